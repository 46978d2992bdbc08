// tests/common/deny_rseq.cc: a test process without rseq, natively.
//
// With TEST_DENY_RSEQ=ENOSYS (or EPERM) in its environment, a test binary
// that links this library re-executes itself, before main(), under a
// seccomp filter that fails rseq(2) with that errno: what a kernel without
// rseq (ENOSYS) or a sandbox that forbids it (EPERM) does.  In the new image
// glibc's registration fails at start-up, so does cidmalloc's own, and the
// allocator must find that out by itself and serve every thread in none mode
// (CheckTargetMode then asks for mode and registration "none").  Unlike
// valgrind, which has no rseq either, the threads run truly in parallel.
//
// The filter stays across execve and is inherited by fork children and new
// threads.  After the re-exec TEST_DENY_RSEQ_APPLIED is set, and the
// constructor only checks that rseq(2) fails with the errno asked for; any
// failure here ends the process with a message (the test fails; it is never
// silently run with rseq).  Without TEST_DENY_RSEQ it does nothing.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

[[noreturn]] void Die(const char* what, int err) {
  fprintf(stderr, "deny_rseq: %s: %s\n", what, strerror(err));
  _exit(2);
}

int WantedErrno(const char* v) {
  if (strcmp(v, "ENOSYS") == 0) return ENOSYS;
  if (strcmp(v, "EPERM") == 0) return EPERM;
  fprintf(stderr, "deny_rseq: TEST_DENY_RSEQ=%s: want ENOSYS or EPERM\n", v);
  _exit(2);
}

// rseq(2) fails with `err`; every other system call is allowed.  A process
// of another architecture (x32 or i386 system calls) is killed, since its
// numbers differ.
void InstallFilter(int err) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rseq, 0, 1),
      BPF_STMT(
          BPF_RET | BPF_K,
          SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {
      static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    Die("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    Die("prctl(PR_SET_SECCOMP)", errno);
  }
}

// Runs from .init_array, which glibc calls with main()'s arguments.
__attribute__((constructor)) void DenyRseq(int argc, char** argv, char**) {
  (void)argc;
  const char* v = getenv("TEST_DENY_RSEQ");
  if (v == nullptr || *v == '\0') return;
  const int err = WantedErrno(v);
  if (getenv("TEST_DENY_RSEQ_APPLIED") == nullptr) {
    InstallFilter(err);
    if (setenv("TEST_DENY_RSEQ_APPLIED", "1", 1) != 0) Die("setenv", errno);
    execv("/proc/self/exe", argv);
    Die("execv(/proc/self/exe)", errno);
  }
  // The re-executed image: a kernel that allows rseq fails this call with
  // EINVAL (no area); the filter makes it fail with `err`.
  errno = 0;
  const long r = syscall(SYS_rseq, nullptr, 0, 0, 0);
  if (r != -1 || errno != err) {
    fprintf(stderr, "deny_rseq: rseq(2) gave %ld, errno %d; want -1, %s\n", r,
            errno, v);
    _exit(2);
  }
}

}  // namespace
