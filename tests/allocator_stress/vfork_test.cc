// tests/allocator_stress/vfork_test.cc: vfork children that allocate
// before they exit, while other threads of the parent allocate.
//
// A vfork child shares its parent thread's stack and TLS, rseq area
// included, but the kernel gives it no registration: before cidmalloc's
// vfork (allocator/api/vfork.cc, rseq/vfork.cc), such a child ran its
// critical sections on the parent's cid or cpu unprotected, and the
// workers' cookies below broke (or a worker crashed) within tens of
// milliseconds in cid and cpu mode.  Also checked: what vfork must keep
// doing (the child's writes reach the parent, which sees the exec's errno;
// the signal mask), that the parent's area is registered again afterwards
// and that the child had its own registration.  Built for cid, own, cpu,
// none and node-qualified IDs (BUILD).
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "rseq/rseq.h"
#include "tests/allocator_stress/stress_util.h"

namespace cidmalloc_stress {
namespace {

// The errno of rseq(2) registering the calling thread's area again: EBUSY
// when the calling task has it registered (a second registration of the
// same area), 0 if it was not registered (it is now).
int ReRegisterErrno() {
  namespace r = cidmalloc::rseq;
  return r::RseqSyscall(r::ThreadPointer() + r::g_process.area_offset,
                        CIDMALLOC_RSEQ_AREA_SIZE, 0);
}

bool RseqMode() { return ExpectedMode() != "none"; }

TEST(Vfork, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

// Every word of a live object holds its address mixed with its owner's
// tag: an object handed out twice is overwritten by its second owner.
void Fill(uint64_t* p, size_t words, uint64_t tag) {
  for (size_t i = 0; i < words; ++i) {
    p[i] = Mix(reinterpret_cast<uintptr_t>(p), tag);
  }
}
bool Intact(const uint64_t* p, size_t words, uint64_t tag) {
  for (size_t i = 0; i < words; ++i) {
    if (p[i] != Mix(reinterpret_cast<uintptr_t>(p), tag)) return false;
  }
  return true;
}

// What a careless vfork child does before exec: allocate, fill, check and
// free small objects, and duplicate a string.  Exits 0, or 3 if one of its
// own objects was overwritten (handed out twice).
[[noreturn]] void AllocatingChild(uint64_t tag) {
  constexpr int kObjects = 64;
  uint64_t* objects[kObjects];
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < kObjects; ++i) {
      const size_t words = 2 + static_cast<size_t>(i % 16) * 2;
      objects[i] = static_cast<uint64_t*>(malloc(words * 8));
      if (objects[i] == nullptr) _exit(4);
      Fill(objects[i], words, tag);
    }
    for (int i = 0; i < kObjects; ++i) {
      if (!Intact(objects[i], 2 + static_cast<size_t>(i % 16) * 2, tag)) {
        _exit(3);
      }
      free(objects[i]);
    }
  }
  char* s = strdup("PATH=/nonexistent");
  if (s == nullptr) _exit(4);
  free(s);
  _exit(0);
}

TEST(Vfork, AllocatingChildrenLeaveTheParentsHeapIntact) {
  constexpr int kWorkers = 2;
  constexpr int kVforks = 400;
  std::atomic<bool> stop{false};
  std::atomic<long> broken{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      constexpr int kSlots = 256;
      uint64_t* slot[kSlots] = {};
      size_t words[kSlots] = {};
      const uint64_t tag = 0x1000 + static_cast<uint64_t>(w);
      Rng rng(static_cast<uint64_t>(w) + 1);
      while (!stop.load(std::memory_order_relaxed)) {
        const size_t i = rng.Below(kSlots);
        if (slot[i] != nullptr) {
          if (!Intact(slot[i], words[i], tag)) broken.fetch_add(1);
          free(slot[i]);
        }
        words[i] = 2 + rng.Below(31);
        slot[i] = static_cast<uint64_t*>(malloc(words[i] * 8));
        Fill(slot[i], words[i], tag);
      }
      for (int i = 0; i < kSlots; ++i) {
        if (slot[i] == nullptr) continue;
        if (!Intact(slot[i], words[i], tag)) broken.fetch_add(1);
        free(slot[i]);
      }
    });
  }
  int bad_children = 0;
  for (int n = 0; n < kVforks; ++n) {
    const pid_t pid = vfork();
    if (pid == 0) AllocatingChild(0x2000 + static_cast<uint64_t>(n));
    ASSERT_GT(pid, 0) << strerror(errno);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      if (++bad_children <= 3) {
        ADD_FAILURE() << "vfork child " << n << ": "
                      << DescribeWaitStatus(status);
      }
    }
  }
  stop.store(true);
  for (auto& t : workers) t.join();
  EXPECT_EQ(bad_children, 0);
  EXPECT_EQ(broken.load(), 0) << "objects of the parent's threads overwritten";
}

// vfork's contract stays: the child's stores reach the parent (here the
// errno of a failed exec, a common idiom), and the parent waits for it.
TEST(Vfork, TheChildsWritesReachTheParent) {
  volatile int exec_errno = 0;
  const pid_t pid = vfork();
  if (pid == 0) {
    void* volatile p = malloc(100);  // Before exec, as careless code does.
    free(p);
    execl("/nonexistent/cidmalloc-vfork-test", "x",
          static_cast<char*>(nullptr));
    exec_errno = errno;
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(exec_errno, ENOENT);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127)
      << DescribeWaitStatus(status);
}

// The signal mask the program had is the child's and, afterwards, the
// parent's (cidmalloc blocks every signal while it lends the rseq area).
TEST(Vfork, TheSignalMaskIsKept) {
  sigset_t usr1, before, after;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &before), 0);
  volatile int child_usr1 = -1, child_usr2 = -1;
  const pid_t pid = vfork();
  if (pid == 0) {
    sigset_t m;
    pthread_sigmask(SIG_SETMASK, nullptr, &m);
    child_usr1 = sigismember(&m, SIGUSR1);
    child_usr2 = sigismember(&m, SIGUSR2);
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &before, &after), 0);
  EXPECT_EQ(child_usr1, 1);
  EXPECT_EQ(child_usr2, 0);
  EXPECT_EQ(sigismember(&after, SIGUSR1), 1);
  EXPECT_EQ(sigismember(&after, SIGUSR2), 0);
}

// In the rseq modes the child had the area registered for itself, and the
// parent has it registered again afterwards (a second registration of the
// same area fails with EBUSY in both).  Its IDs are then its own: malloc
// and free go on working on them.
TEST(Vfork, ChildAndParentEachHaveTheAreaRegistered) {
  if (!RseqMode()) GTEST_SKIP() << "no rseq area in none mode";
  free(malloc(64));  // The parent's own area registered (own: lazily).
  ASSERT_EQ(ReRegisterErrno(), EBUSY);
  volatile int child_errno = -1;
  volatile int child_cpu = -1;
  const pid_t pid = vfork();
  if (pid == 0) {
    child_errno = ReRegisterErrno();
    child_cpu = cidmalloc::rseq::AreaCpuId();
    free(malloc(64));
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  EXPECT_EQ(child_errno, EBUSY) << "the child had no registration";
  EXPECT_GE(child_cpu, 0);
  EXPECT_EQ(ReRegisterErrno(), EBUSY) << "the parent lost its registration";
  EXPECT_GE(cidmalloc::rseq::AreaCpuId(), 0);
  AllocateAndFreeSmall(7, 1000);
}

}  // namespace
}  // namespace cidmalloc_stress
