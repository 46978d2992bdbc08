// tests/allocator_stress/single_step_test.cc: malloc and free under a
// debugger's single-stepping (ptrace PTRACE_SINGLESTEP, what gdb's `stepi`
// and `step` do).
//
// Every step stops the thread, and a stopped thread's critical section is
// aborted when it resumes: a section that restarted after every abort
// never completed (gdb stepping into malloc in cpu mode hung; 64-instruction
// loops of `stepi` never left rseq::cs::Pop).  Since the sections give up
// after rseq::kAbortsBeforeGivingUp aborts in a row and fail to their slow
// paths (rseq/state.h), a single-stepped malloc and free complete.  Built for cid, cpu, none and node-qualified IDs (BUILD).
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/allocator_stress/stress_util.h"

namespace cidmalloc_stress {
namespace {

TEST(SingleStep, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

// A child that stops itself for its tracer, then allocates and frees a few
// small objects of two sizes and exits 0 (1 if malloc failed).
[[noreturn]] void SteppedChild() {
  if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(2);
  raise(SIGSTOP);
  void* volatile p = malloc(48);
  void* volatile q = malloc(700);
  if (p == nullptr || q == nullptr) _exit(1);
  memset(p, 1, 48);
  free(p);
  free(q);
  _exit(0);
}

TEST(SingleStep, MallocAndFreeCompleteUnderSingleStepping) {
  // Warm the caches first, as a program's earlier work would: the child
  // then pops and pushes on its ID's stacks.
  AllocateAndFreeSmall(3, 200);
  const pid_t pid = fork();
  if (pid == 0) SteppedChild();
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSTOPPED(status)) << DescribeWaitStatus(status);
  // Each step is a ptrace round trip (a few microseconds); the child's
  // work takes a few ten thousand steps.  A section that restarts for
  // ever takes them all.
  constexpr long kMaxSteps = 1500000;
  long steps = 0;
  for (; steps < kMaxSteps; ++steps) {
    ASSERT_EQ(ptrace(PTRACE_SINGLESTEP, pid, nullptr, nullptr), 0);
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFSTOPPED(status)) break;
  }
  if (steps == kMaxSteps) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the stepped child did not finish in " << kMaxSteps
           << " steps";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << DescribeWaitStatus(status);
  printf("single-stepped malloc/free: %ld steps\n", steps);
}

}  // namespace
}  // namespace cidmalloc_stress
