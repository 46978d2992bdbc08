// server: a larson-like server workload (bench/workloads/README.md).
//
// A shared array of slots holds one object each.  T threads repeatedly pick
// a random slot, put a new object of random size into it (8 B..1 KiB, one
// time in 16 up to 8 KiB) with an atomic exchange, and free the object they
// took out, which another thread may have allocated.  Every object carries
// a stamp (common.h) checked before it is freed.  At the end the main
// thread frees what is left, and the number and checksum of the objects
// freed must equal those of the objects allocated.
//
//   --threads=N   worker threads (default 2)
//   --slots=N     slots in the array (default 10000)
//   --quick       1/20 of the operations
#include <stdint.h>
#include <stdlib.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;

struct alignas(64) Counts {
  uint64_t allocs = 0;
  uint64_t frees = 0;
  uint64_t alloc_sum = 0;  // sum of IdSum(id) of the objects allocated
  uint64_t free_sum = 0;   // ... and of those freed
  uint64_t from_other = 0; // objects freed that another thread allocated
};

size_t RandomSize(wl::Rng& rng) {
  if (rng.Chance(1, 16)) return rng.Range(1025, 8192);
  return rng.Range(8, 1024);
}

// Object ids: id = serial * stride + owner, owner 0 = main thread, 1..T the
// workers, so the owner of any object can be read back from its id.
struct IdGen {
  uint64_t serial = 0;
  uint64_t owner;
  uint64_t stride;
  uint64_t Next() { return (serial++) * stride + owner; }
};

void* NewObject(wl::Rng& rng, IdGen& ids, Counts& c) {
  size_t size = RandomSize(rng);
  void* p = malloc(size);
  if (p == nullptr) Fail("malloc(%zu) returned NULL", size);
  uint64_t id = ids.Next();
  if (id > wl::kIdMask) Fail("object id overflow");
  wl::Stamp(p, size, id);
  c.allocs++;
  c.alloc_sum += wl::IdSum(id);
  return p;
}

void FreeObject(void* p, const char* where, uint64_t self, uint64_t stride,
                Counts& c) {
  uint64_t id;
  size_t size;
  wl::CheckStamp(p, where, &id, &size);
  if (id % stride != self) c.from_other++;
  c.free_sum += wl::IdSum(id);
  c.frees++;
  free(p);
}

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "server";
  wl::Args args(argc, argv, "slots");
  const int threads = args.Threads(2);
  const size_t nslots =
      static_cast<size_t>(args.GetInt("slots", 10000, 1, 10'000'000));
  // Full size: 2-4 s under glibc malloc on the 2-vCPU reference machine.
  uint64_t total_ops = 8'000'000;
  if (args.quick()) total_ops /= 20;
  const uint64_t ops_per_thread = total_ops / static_cast<uint64_t>(threads);
  const uint64_t stride = static_cast<uint64_t>(threads) + 1;

  std::unique_ptr<std::atomic<void*>[]> slots(
      new std::atomic<void*>[nslots]);
  std::vector<Counts> counts(static_cast<size_t>(threads) + 1);

  // Fill the slots from the main thread.
  {
    wl::Rng rng(1000);
    IdGen ids{0, 0, stride};
    for (size_t i = 0; i < nslots; ++i) {
      slots[i].store(NewObject(rng, ids, counts[0]),
                     std::memory_order_relaxed);
    }
  }

  double t0 = wl::NowSeconds();
  std::vector<std::thread> workers;
  for (int t = 1; t <= threads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t self = static_cast<uint64_t>(t);
      wl::Rng rng(1000 + self);
      IdGen ids{0, self, stride};
      Counts c;
      for (uint64_t i = 0; i < ops_per_thread; ++i) {
        void* fresh = NewObject(rng, ids, c);
        size_t slot = rng.Below(nslots);
        void* old = slots[slot].exchange(fresh, std::memory_order_acq_rel);
        if (old == nullptr) Fail("slot %zu was empty", slot);
        FreeObject(old, "worker", self, stride, c);
      }
      counts[t] = c;
    });
  }
  for (auto& w : workers) w.join();
  double secs = wl::NowSeconds() - t0;

  for (size_t i = 0; i < nslots; ++i) {
    void* p = slots[i].exchange(nullptr, std::memory_order_relaxed);
    if (p == nullptr) Fail("slot %zu empty at the end", i);
    FreeObject(p, "final", 0, stride, counts[0]);
  }

  Counts total;
  for (const Counts& c : counts) {
    total.allocs += c.allocs;
    total.frees += c.frees;
    total.alloc_sum += c.alloc_sum;
    total.free_sum += c.free_sum;
    total.from_other += c.from_other;
  }
  uint64_t expect_allocs = nslots + ops_per_thread * threads;
  if (total.allocs != expect_allocs || total.frees != total.allocs) {
    Fail("allocated %llu objects (expected %llu), freed %llu",
         static_cast<unsigned long long>(total.allocs),
         static_cast<unsigned long long>(expect_allocs),
         static_cast<unsigned long long>(total.frees));
  }
  if (total.alloc_sum != total.free_sum) {
    Fail("checksum of freed objects 0x%016llx != allocated 0x%016llx",
         static_cast<unsigned long long>(total.free_sum),
         static_cast<unsigned long long>(total.alloc_sum));
  }
  uint64_t ops = ops_per_thread * threads;
  printf("metric ops_per_s=%.0f\n", static_cast<double>(ops) / secs);
  printf("metric cross_thread_frees=%llu\n",
         static_cast<unsigned long long>(total.from_other));
  wl::Ok(secs, "threads=%d slots=%zu ops=%llu checksum=%016llx", threads,
         nslots, static_cast<unsigned long long>(ops),
         static_cast<unsigned long long>(total.alloc_sum));
  return 0;
}
