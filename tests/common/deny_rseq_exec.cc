// tests/common/deny_rseq_exec.cc: runs a program with rseq(2) denied.
//
//   deny_rseq_exec ENOSYS|EPERM|FAKE CMD [ARGS...]
//
// Installs the seccomp filter of deny_rseq_filter.h (rseq(2) fails with the
// errno named, or FAKE: returns 0 without registering anything) and
// executes CMD (searched in PATH) with the environment it was given,
// LD_PRELOAD included: a preloaded libcidmalloc.so then starts in
// a process where neither glibc nor cidmalloc can register rseq
// (tests/preload_test.sh).  Exits 2 with a message if it cannot.
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "tests/common/deny_rseq_filter.h"

int main(int argc, char** argv) {
  int err = 0;
  if (argc < 3 || !cidmalloc_test::DenyRseqAnswer(argv[1], &err)) {
    fprintf(stderr, "usage: deny_rseq_exec ENOSYS|EPERM|FAKE CMD [ARGS...]\n");
    return 2;
  }
  cidmalloc_test::InstallDenyRseqFilter("deny_rseq_exec", err);
  execvp(argv[2], argv + 2);
  cidmalloc_test::DenyRseqDie("deny_rseq_exec", argv[2], errno);
}
