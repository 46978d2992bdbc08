// tests/common/deny_rseq.cc: a test process without rseq, natively.
//
// With TEST_DENY_RSEQ=ENOSYS (or EPERM) in its environment, a test binary
// that links this library re-executes itself, before main(), under a
// seccomp filter that fails rseq(2) with that errno: what a kernel without
// rseq (ENOSYS) or a sandbox that forbids it (EPERM) does.  In the new image
// glibc's registration fails at start-up, so does cidmalloc's own, and the
// allocator must find that out by itself and serve every thread in none mode
// (CheckTargetMode then asks for mode and registration "none").  With
// TEST_DENY_RSEQ=FAKE the call returns 0 without registering anything, as
// a sandbox that pretends to allow it: glibc and cidmalloc both believe
// they registered, and cidmalloc must see that the kernel never wrote the
// area.  Unlike
// valgrind, which has no rseq either, the threads run truly in parallel.
//
// The filter stays across execve and is inherited by fork children and new
// threads.  After the re-exec TEST_DENY_RSEQ_APPLIED is set, and the
// constructor only checks that rseq(2) answers as asked; any
// failure here ends the process with a message (the test fails; it is never
// silently run with rseq).  Without TEST_DENY_RSEQ it does nothing.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/common/deny_rseq_filter.h"

namespace {

using cidmalloc_test::DenyRseqDie;

// Runs from .init_array, which glibc calls with main()'s arguments.
__attribute__((constructor)) void DenyRseq(int argc, char** argv, char**) {
  (void)argc;
  const char* v = getenv("TEST_DENY_RSEQ");
  if (v == nullptr || *v == '\0') return;
  int err = 0;
  if (!cidmalloc_test::DenyRseqAnswer(v, &err)) {
    fprintf(stderr, "deny_rseq: TEST_DENY_RSEQ=%s: want ENOSYS, EPERM or FAKE\n",
            v);
    _exit(2);
  }
  if (getenv("TEST_DENY_RSEQ_APPLIED") == nullptr) {
    cidmalloc_test::InstallDenyRseqFilter("deny_rseq", err);
    if (setenv("TEST_DENY_RSEQ_APPLIED", "1", 1) != 0) {
      DenyRseqDie("deny_rseq", "setenv", errno);
    }
    execv("/proc/self/exe", argv);
    DenyRseqDie("deny_rseq", "execv(/proc/self/exe)", errno);
  }
  // The re-executed image: a kernel that allows rseq fails this call with
  // EINVAL (no area); the filter makes it fail with `err`, or return 0.
  errno = 0;
  const long r = syscall(SYS_rseq, nullptr, 0, 0, 0);
  const long want = err == 0 ? 0 : -1;
  if (r != want || errno != err) {
    fprintf(stderr, "deny_rseq: rseq(2) gave %ld, errno %d; want %ld (%s)\n",
            r, errno, want, v);
    _exit(2);
  }
}

}  // namespace
