/* tests/preload/fork_handlers.c: fork handlers of the program that
 * allocate, registered before the process's first allocation.
 *
 * pthread_atfork runs prepare handlers in the reverse order of their
 * registration and parent / child handlers in that order.  An allocator
 * that registers its own handlers at its first allocation comes after
 * these: its prepare handler (which takes every allocator lock) runs
 * first, so the program's prepare handler, and then its child handler
 * (before the allocator's child handler resets the locks), wait for ever
 * on a lock the allocator holds.  cidmalloc registers at load time.
 *
 *   fork_handlers N   registers the handlers N times (N >= 48 makes glibc
 *                     2.36 grow its handler table with malloc while it
 *                     holds its atfork lock: the process's first
 *                     allocation then happens inside pthread_atfork).
 *
 * Prints "ok N handlers, M allocations in handlers" and exits 0; a hang is
 * the failure (the test runs it under timeout).  Nothing allocates before
 * the handlers are registered: no stdio until the end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int g_allocs; /* Allocations made by the handlers. */

/* A size class the process has not used yet, so that the allocation misses
 * the cache and takes the central list's lock. */
static void AllocateFresh(void) {
  static int k;
  const size_t size = 3000 + 1024 * (size_t)(k++ % 64);
  char* p = malloc(size);
  if (p == NULL) _exit(3);
  memset(p, 0x5a, size);
  free(p);
  ++g_allocs;
}

static void Prepare(void) { AllocateFresh(); }
static void Parent(void) { AllocateFresh(); }
static void Child(void) { AllocateFresh(); }

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1;
  for (int i = 0; i < n; ++i) {
    if (pthread_atfork(Prepare, Parent, Child) != 0) return 2;
  }
  void* volatile first = malloc(10);
  if (first == NULL) return 2;
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    AllocateFresh(); /* The child allocates after its handlers too. */
    _exit(g_allocs == 2 * n + 1 ? 0 : 4);  /* prepare, child, this */
  }
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return 5;
  }
  free(first);
  printf("ok %d handlers, %d allocations in handlers\n", n, g_allocs);
  return g_allocs == 2 * n ? 0 : 6;
}
