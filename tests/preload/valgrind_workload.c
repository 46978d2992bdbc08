/* tests/preload/valgrind_workload.c: a C program that exercises the malloc
 * API from several threads, frees across threads, forks (the child
 * allocates in a new thread) and trims, checking every byte it wrote.
 * valgrind_test.sh runs it with libcidmalloc.so preloaded under valgrind,
 * which has no rseq: cidmalloc must run in none mode, and memcheck must
 * find nothing wrong in its own accesses.
 *
 * Prints "ok <checksum>" and exits 0 when every check passed; otherwise
 * prints what failed on stderr and exits 1.  With the argument "control"
 * it only passes write(2) an unmapped buffer, which memcheck must report
 * (the test's control that a memcheck error fails a run). */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kThreads = 4, kRounds = 60, kSlots = 48, kMailbox = 16 };

static int g_failed = 0;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void Fail(const char* what, size_t a, size_t b) {
  fprintf(stderr, "FAIL: %s (%zu, %zu)\n", what, a, b);
  __atomic_store_n(&g_failed, 1, __ATOMIC_RELAXED);
}

/* Objects handed from one thread to the next (freed there: remote frees). */
struct Mail {
  unsigned char* p;
  size_t n;
  unsigned char seed;
};
static struct Mail g_mail[kThreads][kMailbox];
static int g_mail_count[kThreads];

static uint32_t Next(uint32_t* s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

static void Fill(unsigned char* p, size_t n, unsigned char seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)(seed + i * 7);
}

static int Holds(const unsigned char* p, size_t n, unsigned char seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != (unsigned char)(seed + i * 7)) return 0;
  }
  return 1;
}

/* A size: mostly small, sometimes a few KiB, rarely large (own mapping). */
static size_t SizeOf(uint32_t r) {
  if (r % 61 == 0) return 200000 + r % 3000000;
  if (r % 7 == 0) return 1024 + r % 20000;
  return 1 + r % 600;
}

static uint64_t Checked(unsigned char* p, size_t n, unsigned char seed) {
  if (!Holds(p, n, seed)) Fail("contents changed", n, seed);
  if (malloc_usable_size(p) < n) Fail("usable size", malloc_usable_size(p), n);
  return n;
}

static void* Worker(void* arg) {
  const int self = (int)(intptr_t)arg;
  uint32_t rng = 12345u + (uint32_t)self * 7919u;
  unsigned char* p[kSlots];
  size_t n[kSlots];
  unsigned char seed[kSlots];
  uint64_t sum = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kSlots; ++i) {
      const uint32_t r = Next(&rng);
      n[i] = SizeOf(r);
      seed[i] = (unsigned char)r;
      switch (r % 5) {
        case 0:
          p[i] = calloc(1, n[i]);
          if (p[i] != NULL) {
            for (size_t k = 0; k < n[i]; ++k) {
              if (p[i][k] != 0) {
                Fail("calloc not zeroed", n[i], k);
                break;
              }
            }
          }
          break;
        case 1: {
          const size_t align = (size_t)16 << (r % 9); /* 16 .. 4096 */
          void* q = NULL;
          if (posix_memalign(&q, align, n[i]) != 0) q = NULL;
          if (q != NULL && (uintptr_t)q % align != 0) Fail("alignment", align, n[i]);
          p[i] = q;
          break;
        }
        default:
          p[i] = malloc(n[i]);
          break;
      }
      if (p[i] == NULL) {
        Fail("allocation failed", n[i], (size_t)r);
        return NULL;
      }
      Fill(p[i], n[i], seed[i]);
    }
    /* Grow or shrink a third of them: the prefix must survive. */
    for (int i = 0; i < kSlots; i += 3) {
      const size_t m = SizeOf(Next(&rng));
      unsigned char* q = realloc(p[i], m);
      if (q == NULL) {
        Fail("realloc failed", n[i], m);
        return NULL;
      }
      const size_t keep = m < n[i] ? m : n[i];
      if (!Holds(q, keep, seed[i])) Fail("realloc lost contents", n[i], m);
      p[i] = q;
      n[i] = m;
      Fill(p[i], n[i], seed[i]);
    }
    /* Free what the previous thread mailed us, then mail a few objects on. */
    pthread_mutex_lock(&g_lock);
    for (int k = 0; k < g_mail_count[self]; ++k) {
      struct Mail* m = &g_mail[self][k];
      sum += Checked(m->p, m->n, m->seed);
      free(m->p);
    }
    g_mail_count[self] = 0;
    const int to = (self + 1) % kThreads;
    for (int i = 0; i < kSlots && g_mail_count[to] < kMailbox; i += 5) {
      g_mail[to][g_mail_count[to]++] = (struct Mail){p[i], n[i], seed[i]};
      p[i] = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < kSlots; ++i) {
      if (p[i] == NULL) continue;
      sum += Checked(p[i], n[i], seed[i]);
      free(p[i]);
    }
  }
  return (void*)(uintptr_t)sum;
}

static void* ChildThread(void* arg) {
  (void)arg;
  uint64_t sum = 0;
  for (int i = 0; i < 2000; ++i) {
    const size_t n = 1 + (size_t)i % 3000;
    unsigned char* p = malloc(n);
    if (p == NULL) return NULL;
    Fill(p, n, (unsigned char)i);
    sum += Holds(p, n, (unsigned char)i) ? n : 0;
    free(p);
  }
  return (void*)(uintptr_t)sum;
}

/* fork: the child allocates, also from a new thread. */
static int ForkChildAllocates(void) {
  const pid_t pid = fork();
  if (pid < 0) {
    Fail("fork", 0, 0);
    return 0;
  }
  if (pid == 0) {
    pthread_t t;
    void* r = NULL;
    char* s = strdup("child");
    if (s == NULL || pthread_create(&t, NULL, ChildThread, NULL) != 0 ||
        pthread_join(t, &r) != 0 || r == NULL) {
      _exit(1);
    }
    free(s);
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    Fail("child", (size_t)status, 0);
    return 0;
  }
  return 1;
}

/* Passes write(2) a buffer at an unmapped address: the kernel says EFAULT,
 * memcheck reports an unaddressable system call parameter. */
static int Control(void) {
  uintptr_t bad = 16;
  asm("" : "+r"(bad));  /* Hidden from the compiler's buffer checks. */
  const ssize_t r = write(1, (const void*)bad, 1);
  return r == 1 ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "control") == 0) return Control();
  pthread_t threads[kThreads];
  uint64_t total = 0;
  for (int t = 0; t < kThreads; ++t) {
    if (pthread_create(&threads[t], NULL, Worker, (void*)(intptr_t)t) != 0) {
      Fail("pthread_create", (size_t)t, 0);
      return 1;
    }
  }
  for (int t = 0; t < kThreads; ++t) {
    void* r = NULL;
    pthread_join(threads[t], &r);
    total += (uint64_t)(uintptr_t)r;
  }
  /* Mail nobody collected. */
  for (int t = 0; t < kThreads; ++t) {
    for (int k = 0; k < g_mail_count[t]; ++k) {
      total += Checked(g_mail[t][k].p, g_mail[t][k].n, g_mail[t][k].seed);
      free(g_mail[t][k].p);
    }
  }
  ForkChildAllocates();
  malloc_trim(0);
  if (g_failed) return 1;
  printf("ok %llu\n", (unsigned long long)total);
  return 0;
}
