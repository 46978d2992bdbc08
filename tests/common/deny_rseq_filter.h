// tests/common/deny_rseq_filter.h: a seccomp filter that fails rseq(2),
// for the tests that run cidmalloc without rseq natively: the constructor
// of //tests/common:deny_rseq (a test binary re-executes itself under it)
// and //tests/common:deny_rseq_exec (a launcher for real programs).
#ifndef CIDMALLOC_TESTS_COMMON_DENY_RSEQ_FILTER_H_
#define CIDMALLOC_TESTS_COMMON_DENY_RSEQ_FILTER_H_

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cidmalloc_test {

// Prints "<who>: <what>: <strerror(err)>" and ends the process (status 2).
[[noreturn]] inline void DenyRseqDie(const char* who, const char* what,
                                     int err) {
  fprintf(stderr, "%s: %s: %s\n", who, what, strerror(err));
  _exit(2);
}

// What rseq(2) answers under the filter, from its TEST_DENY_RSEQ name:
// ENOSYS or EPERM (the call fails with that errno), or FAKE (the call
// returns 0 without running: a sandbox that pretends to allow it; the
// area is never registered).  Returns false for any other name.
inline bool DenyRseqAnswer(const char* name, int* err) {
  if (strcmp(name, "ENOSYS") == 0) {
    *err = ENOSYS;
  } else if (strcmp(name, "EPERM") == 0) {
    *err = EPERM;
  } else if (strcmp(name, "FAKE") == 0) {
    *err = 0;
  } else {
    return false;
  }
  return true;
}

// From now on, in this process and everything it forks or executes,
// rseq(2) fails with `err` (as a kernel without rseq does with ENOSYS, or
// a sandbox that forbids it with EPERM), or returns 0 without running if
// `err` is 0; every other system call is allowed.  A system call of
// another architecture (x32, i386) kills the process, since its numbers
// differ.  Sets no_new_privs first, so that an
// unprivileged process may install it.  Ends the process on failure.
inline void InstallDenyRseqFilter(const char* who, int err) {
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
    DenyRseqDie(who, "prctl(PR_SET_NO_NEW_PRIVS)", errno);
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    DenyRseqDie(who, "prctl(PR_SET_SECCOMP)", errno);
  }
}

}  // namespace cidmalloc_test

#endif  // CIDMALLOC_TESTS_COMMON_DENY_RSEQ_FILTER_H_
