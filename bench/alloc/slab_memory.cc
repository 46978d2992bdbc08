// bench/alloc/slab_memory.cc: how much front-end memory (per-ID slabs)
// cidmalloc touches with T busy threads.
//
//   slab_memory [threads] [seconds]          (defaults: 4 threads, 0.5 s)
//   CIDMALLOC_RSEQ_MODE=cpu slab_memory 16
//
// Linked with cidmalloc (cc_binary malloc = "//:cidmalloc").  Starts T
// threads that, from a common start, allocate and free small objects
// (batches of 64 objects of 16..512 bytes) for the given time, recording
// which front-end IDs (rseq::CurrentId(): the cid in cid mode, the cpu in
// cpu mode, a soft ID without rseq) and which cpus they ran on.  After
// joining them, prints one line of key=value pairs: the mode, the distinct
// IDs and cpus seen, and cidmalloc_get_stats()'s slabs and slab_bytes.
// bench/alloc/slab_memory.sh runs it for T = 2, 4, 8, 16 in cid and cpu
// mode (docs/benchmarks/allocator_303b808.md, "3. Front-end memory (slabs)").
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "rseq/rseq.h"

namespace {

constexpr uint32_t kMaxTrackedIds = 16384;
constexpr uint32_t kMaxTrackedCpus = 4096;
constexpr int kObjects = 64;

// Bitmaps of the IDs and cpus any thread was seen on.
std::atomic<uint64_t> g_ids[kMaxTrackedIds / 64];
std::atomic<uint64_t> g_cpus[kMaxTrackedCpus / 64];
std::atomic<bool> g_go{false};
std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_ops{0};

void Mark(std::atomic<uint64_t>* bits, uint32_t limit, uint32_t i) {
  if (i >= limit) return;
  const uint64_t bit = uint64_t{1} << (i % 64);
  if ((bits[i / 64].load(std::memory_order_relaxed) & bit) == 0) {
    bits[i / 64].fetch_or(bit, std::memory_order_relaxed);
  }
}

unsigned Count(const std::atomic<uint64_t>* bits, uint32_t limit) {
  unsigned n = 0;
  for (uint32_t w = 0; w < limit / 64; ++w) {
    n += static_cast<unsigned>(__builtin_popcountll(bits[w].load()));
  }
  return n;
}

void Worker(unsigned seed) {
  void* objs[kObjects];
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
  uint64_t ops = 0;
  while (!g_go.load(std::memory_order_acquire)) {
  }
  while (!g_stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < kObjects; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const size_t size = 16 + static_cast<size_t>(x % 497);  // 16..512
      objs[i] = malloc(size);
      static_cast<volatile char*>(objs[i])[0] = 1;
    }
    Mark(g_ids, kMaxTrackedIds, cidmalloc::rseq::CurrentId());
    const int cpu = sched_getcpu();
    if (cpu >= 0) Mark(g_cpus, kMaxTrackedCpus, static_cast<uint32_t>(cpu));
    for (int i = 0; i < kObjects; ++i) free(objs[i]);
    ops += kObjects;
  }
  g_ops.fetch_add(ops, std::memory_order_relaxed);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 4;
  const double seconds = argc > 2 ? atof(argv[2]) : 0.5;
  if (threads < 1 || threads > 1024 || !(seconds > 0)) {
    fprintf(stderr, "usage: %s [threads 1..1024] [seconds]\n", argv[0]);
    return 2;
  }
  // The main thread's own allocations (thread creation) may give it a slab
  // too; its ID is recorded like the workers'.
  Mark(g_ids, kMaxTrackedIds, cidmalloc::rseq::CurrentId());

  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(Worker, static_cast<unsigned>(t));
  }
  g_go.store(true, std::memory_order_release);
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  nanosleep(&ts, nullptr);
  g_stop.store(true, std::memory_order_relaxed);
  for (std::thread& t : pool) t.join();

  struct cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  printf(
      "threads=%d mode=%s registration=%s num_rseq_ids=%u ids_seen=%u "
      "cpus_seen=%u slabs=%u max_slab_id=%u slab_bytes=%llu "
      "bytes_per_slab=%llu cached_bytes=%llu meta_bytes=%llu ops=%llu\n",
      threads, s.mode, s.registration, s.num_rseq_ids,
      Count(g_ids, kMaxTrackedIds), Count(g_cpus, kMaxTrackedCpus), s.slabs,
      s.max_slab_id, s.slab_bytes,
      s.slabs != 0 ? s.slab_bytes / s.slabs : 0ull, s.cached_bytes,
      s.meta_bytes, static_cast<unsigned long long>(g_ops.load()));
  return 0;
}
