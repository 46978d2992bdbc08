// large_churn: resident memory against live bytes when threads keep
// replacing buffers of random sizes, a few of them large.
//
//   large_churn [THREADS [OPS [LARGE_MAX]]]     defaults: 2 100000 1048576
//
// Each thread owns 512 slots and, OPS times, frees the buffer in a random
// slot and puts a new one there: 1 in 8 of LARGE_MAX bytes at most (8 KiB
// and up, uniformly), the others of 1-8192 bytes; every byte is written
// and the last byte is checked before the free.  Three rounds of THREADS
// threads, created and joined in turn.  The C program node's worker soak
// reduced to (docs/benchmarks/tuning_log.md): Buffers of that mix kept
// cidmalloc 1.3x glibc's resident memory.
//
// Prints "peak live <MB>, VmHWM <MB>": the most bytes live at once (as the
// threads counted them) and the peak resident set.  Not linked with any
// allocator: run it with one preloaded, as malloc_bench.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kSlots = 512, kRounds = 3, kMaxThreads = 64 };

static long g_ops = 100000;
static long g_large_max = 1 << 20;
static atomic_long g_live, g_peak;

static uint64_t Next(uint64_t* s) {  // xorshift64
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void CountLive(long delta) {
  const long live = atomic_fetch_add(&g_live, delta) + delta;
  long peak = atomic_load(&g_peak);
  while (live > peak && !atomic_compare_exchange_weak(&g_peak, &peak, live)) {
  }
}

static void* Churn(void* arg) {
  uint64_t s = 0x9e3779b97f4a7c15u + (uintptr_t)arg * 7919;
  static __thread char* buf[kSlots];
  static __thread size_t len[kSlots];
  for (long i = 0; i < g_ops; ++i) {
    const int k = (int)(Next(&s) % kSlots);
    if (buf[k] != NULL) {
      if (buf[k][len[k] - 1] != (char)k) {
        fprintf(stderr, "large_churn: slot %d lost its contents\n", k);
        abort();
      }
      free(buf[k]);
      CountLive(-(long)len[k]);
    }
    const size_t n = Next(&s) % 8 == 0
                         ? 8192 + Next(&s) % (uint64_t)(g_large_max - 8192)
                         : 1 + Next(&s) % 8192;
    buf[k] = malloc(n);
    if (buf[k] == NULL) {
      fprintf(stderr, "large_churn: malloc(%zu) failed\n", n);
      abort();
    }
    len[k] = n;
    memset(buf[k], k, n);
    CountLive((long)n);
  }
  for (int k = 0; k < kSlots; ++k) {
    if (buf[k] == NULL) continue;
    free(buf[k]);
    CountLive(-(long)len[k]);
    buf[k] = NULL;
  }
  return NULL;
}

static long VmHwmKb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
  }
  if (f != NULL) fclose(f);
  return kb;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  if (argc > 2) g_ops = atol(argv[2]);
  if (argc > 3) g_large_max = atol(argv[3]);
  if (threads < 1 || threads > kMaxThreads || g_ops < 1 ||
      g_large_max <= 8192) {
    fprintf(stderr, "usage: large_churn [THREADS(1-%d) [OPS [LARGE_MAX(>8192)]]]\n",
            kMaxThreads);
    return 2;
  }
  pthread_t tid[kMaxThreads];
  for (int round = 0; round < kRounds; ++round) {
    for (int t = 0; t < threads; ++t) {
      if (pthread_create(&tid[t], NULL, Churn,
                         (void*)(uintptr_t)(round * kMaxThreads + t)) != 0) {
        fprintf(stderr, "large_churn: pthread_create failed\n");
        return 1;
      }
    }
    for (int t = 0; t < threads; ++t) pthread_join(tid[t], NULL);
  }
  printf("peak live %ld MB, VmHWM %ld MB\n", atomic_load(&g_peak) >> 20,
         VmHwmKb() >> 10);
  return 0;
}
