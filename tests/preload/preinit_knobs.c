/* tests/preload/preinit_knobs.c: the process's first allocation made from
 * .preinit_array, before libc's constructor has set `environ`.
 *
 * The dynamic loader runs the program's .preinit_array before any
 * library's constructor, libc's among them, so `environ` is still NULL
 * there and getenv finds nothing: the allocator initialises in that call
 * and must read its CIDMALLOC_* knobs from the initial environment.
 * preinit_knobs_test.sh runs this with knobs set and checks their effect
 * (the stats summary, the mode, a warning).
 *
 * Prints "environ at the first malloc: NULL" (or "set", which makes the
 * test fail: it would not test the case) and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern char** environ;

static int g_environ_was_null = -1;

static void FirstAllocation(int argc, char** argv, char** envp) {
  (void)argc;
  (void)argv;
  (void)envp;
  g_environ_was_null = environ == NULL;
  /* volatile: GCC removes a malloc whose result is only freed. */
  void* volatile p = malloc(100);
  if (p == NULL) _exit(3);
  free(p);
}

__attribute__((section(".preinit_array"), used)) static void (*const
    g_preinit)(int, char**, char**) = FirstAllocation;

int main(void) {
  printf("environ at the first malloc: %s\n",
         g_environ_was_null == 1   ? "NULL"
         : g_environ_was_null == 0 ? "set"
                                   : "(preinit did not run)");
  return 0;
}
