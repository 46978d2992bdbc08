// large_churn: resident memory against live bytes while threads keep
// replacing buffers of random sizes, a few of them large
// (bench/workloads/README.md).
//
// Each thread owns 512 slots and, again and again, frees the buffer in a
// random slot and puts a new one there: 1 in 8 of 8 KiB-1 MiB (uniformly),
// the others of 8 B-8 KiB.  Every byte of every buffer is written; small
// ones carry stamps (common.h), large ones a pattern that is checked whole
// before the free.  Three rounds of N threads, each round's threads
// created and joined in turn.  A C reduction of a node soak in which
// workers made Buffers of that mix (docs/benchmarks/tuning_log.md).
//
// Prints "metric live_peak_kb=" (the most bytes live at once, as the
// threads counted them) and "metric rss_peak_kb=" (VmHWM) and their ratio
// in percent, "metric rss_over_live_pct=".
//
//   --threads=N   threads a round (default 2)
//   --quick       1/20 of the replacements
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;

constexpr size_t kSlots = 512;
constexpr int kRounds = 3;
constexpr size_t kLargeMin = 8193, kLargeMax = 1 << 20;

std::atomic<int64_t> g_live{0}, g_live_peak{0};

void CountLive(int64_t delta) {
  const int64_t live = g_live.fetch_add(delta, std::memory_order_relaxed) +
                       delta;
  int64_t peak = g_live_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_live_peak.compare_exchange_weak(
                            peak, live, std::memory_order_relaxed)) {
  }
}

struct Buffer {
  char* p = nullptr;
  size_t size = 0;
  uint64_t id = 0;
};

struct Thread {
  std::thread thread;
  uint64_t alloc_sum = 0, free_sum = 0;
};

void Release(Buffer* b, uint64_t* free_sum) {
  if (b->size <= wl::kMaxStampSize) {
    uint64_t id;
    size_t size;
    wl::CheckStamp(b->p, "free", &id, &size);
    if (id != b->id || size != b->size) {
      Fail("buffer %p holds object %llu of %zu bytes, not %llu of %zu",
           static_cast<void*>(b->p), static_cast<unsigned long long>(id),
           size, static_cast<unsigned long long>(b->id), b->size);
    }
  } else if (!wl::CheckPattern(b->p, b->size, b->id)) {
    Fail("buffer %p of %zu bytes (object %llu) lost its contents",
         static_cast<void*>(b->p), b->size,
         static_cast<unsigned long long>(b->id));
  }
  *free_sum += wl::IdSum(b->id);
  free(b->p);
  CountLive(-static_cast<int64_t>(b->size));
  b->p = nullptr;
}

void Body(Thread* t, uint64_t stream, uint64_t ops) {
  wl::Rng rng(9000 + stream);
  std::vector<Buffer> slots(kSlots);
  for (uint64_t i = 0; i < ops; ++i) {
    Buffer& b = slots[rng.Below(kSlots)];
    if (b.p != nullptr) Release(&b, &t->free_sum);
    b.size = rng.Chance(1, 8) ? rng.Range(kLargeMin, kLargeMax)
                              : rng.Range(8, wl::kMaxStampSize);
    b.id = (stream << 24) | i;
    b.p = static_cast<char*>(malloc(b.size));
    if (b.p == nullptr) Fail("malloc(%zu) returned NULL", b.size);
    if (b.size <= wl::kMaxStampSize) {
      memset(b.p, static_cast<int>(i), b.size);
      wl::Stamp(b.p, b.size, b.id);
    } else {
      wl::FillPattern(b.p, b.size, b.id);
    }
    t->alloc_sum += wl::IdSum(b.id);
    CountLive(static_cast<int64_t>(b.size));
  }
  for (Buffer& b : slots) {
    if (b.p != nullptr) Release(&b, &t->free_sum);
  }
}

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "large_churn";
  wl::Args args(argc, argv, "");
  const int threads = args.Threads(2);
  // Full size: 1-3 s under glibc malloc with 2 threads on the 2-vCPU
  // reference machine (every byte is written and, for large buffers, read
  // back).
  uint64_t ops = 50'000;
  if (args.quick()) ops /= 20;

  std::vector<Thread> ts(static_cast<size_t>(threads));
  uint64_t alloc_sum = 0, free_sum = 0;
  const double t0 = wl::NowSeconds();
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < threads; ++i) {
      ts[i].thread = std::thread(Body, &ts[i],
                                 static_cast<uint64_t>(round * 64 + i), ops);
    }
    for (Thread& t : ts) {
      t.thread.join();
      alloc_sum += t.alloc_sum;
      free_sum += t.free_sum;
      t = Thread{};
    }
  }
  const double secs = wl::NowSeconds() - t0;

  if (alloc_sum != free_sum || g_live.load() != 0) {
    Fail("checksum of freed buffers 0x%016llx != allocated 0x%016llx, "
         "%lld bytes live",
         static_cast<unsigned long long>(free_sum),
         static_cast<unsigned long long>(alloc_sum),
         static_cast<long long>(g_live.load()));
  }
  const long peak = wl::StatusKb("VmHWM");
  if (peak < 0) Fail("cannot read VmHWM");
  const long live_kb = static_cast<long>(g_live_peak.load() >> 10);
  printf("metric live_peak_kb=%ld\n", live_kb);
  printf("metric rss_peak_kb=%ld\n", peak);
  printf("metric rss_over_live_pct=%ld\n",
         live_kb > 0 ? peak * 100 / live_kb : 0);
  wl::Ok(secs, "threads=%d replacements=%llu checksum=%016llx", threads,
         static_cast<unsigned long long>(ops * kRounds *
                                         static_cast<uint64_t>(threads)),
         static_cast<unsigned long long>(alloc_sum));
  return 0;
}
