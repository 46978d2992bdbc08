// tests/allocator_stress/repro_fork_main.cc: the minimal reproducer of the
// double initialisation fixed by 283d5c7 ("Make every global constinit"),
// kept as a regression test (init_once_*_test) and as a binary
// (:repro_fork).
//
// A C++ program linking cidmalloc statically: libstdc++'s own start-up
// allocates first, so the allocator initialises before the program's
// dynamic initialisers run.  A global of the library with a dynamic
// initialiser would then be reset after use; for rseq's process state that
// meant a second initialisation: fork handlers registered twice (fork()
// deadlocked in the second prepare handler) and, under
// GLIBC_TUNABLES=glibc.pthread.rseq=0, an EBUSY registration that fell
// back to none mode.
//
// Exits 0 iff fork() returns in time and, when the environment says what
// to expect (EXPECT_MODE / EXPECT_REGISTRATION), the mode and registration
// are those.  No gtest: nothing but the program itself allocates.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "allocator/api/cidmalloc.h"

int main() {
  void* volatile p = malloc(100);  // Misses the empty cache: slow path.
  free(p);
  struct cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  printf("mode %s, registration %s\n", s.mode, s.registration);
  fflush(stdout);
  int failures = 0;
  const char* want_mode = getenv("EXPECT_MODE");
  if (want_mode != nullptr && strcmp(want_mode, s.mode) != 0) {
    printf("FAIL: expected mode %s\n", want_mode);
    ++failures;
  }
  const char* want_reg = getenv("EXPECT_REGISTRATION");
  if (want_reg != nullptr &&
      (want_mode == nullptr || strcmp(want_mode, "none") != 0) &&
      strcmp(want_reg, s.registration) != 0) {
    printf("FAIL: expected registration %s\n", want_reg);
    ++failures;
  }
  fflush(stdout);
  alarm(10);  // SIGALRM kills the process if fork() deadlocks.
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  alarm(0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("FAIL: child status %d\n", status);
    ++failures;
  }
  puts(failures == 0 ? "fork ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
