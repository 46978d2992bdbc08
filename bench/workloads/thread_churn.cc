// thread_churn: many short-lived threads that allocate and exit
// (bench/workloads/README.md).
//
// The main thread starts thousands of threads, at most N alive at a time.
// Each thread allocates 256 objects (16 B-4 KiB, a few up to 8 KiB) and a
// 64 KiB scratch buffer, frees the scratch buffer and about half of the
// objects itself (interleaved with its allocations), and hands the rest to
// the main thread, which frees them after joining it, i.e. after the
// allocating thread has exited.  Objects carry stamps (common.h); the
// numbers and checksums of the objects allocated and freed must match.
//
//   --threads=N   threads alive at a time (default 2)
//   --quick       1/20 of the threads
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <thread>
#include <vector>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;

constexpr size_t kObjects = 256;  // per thread
constexpr size_t kScratch = 64 << 10;
constexpr uint64_t kIdStride = 1024;  // id = thread * kIdStride + object

struct Slot {
  std::thread thread;
  uint64_t index = 0;            // which thread of the run
  void* handed[kObjects] = {};   // objects left for the main thread
  size_t n_handed = 0;
  uint64_t alloc_sum = 0;        // over all objects the thread allocated
  uint64_t self_free_sum = 0;    // over those it freed itself
  uint64_t self_frees = 0;
};

void FreeChecked(void* p, uint64_t thread_index, const char* who,
                 uint64_t* sum) {
  uint64_t id;
  size_t size;
  wl::CheckStamp(p, who, &id, &size);
  if (id / kIdStride != thread_index) {
    Fail("%s: object %p (id %llu) belongs to thread %llu, not %llu", who, p,
         static_cast<unsigned long long>(id),
         static_cast<unsigned long long>(id / kIdStride),
         static_cast<unsigned long long>(thread_index));
  }
  *sum += wl::IdSum(id);
  free(p);
}

// The body of thread `s->index`.
void Body(Slot* s) {
  wl::Rng rng(8000 + s->index);
  char* scratch = static_cast<char*>(malloc(kScratch));
  if (scratch == nullptr) Fail("malloc(%zu) returned NULL", kScratch);
  memset(scratch, 0x5a, kScratch);

  // Objects allocated but not yet disposed of; each new object may cause
  // an older one to be freed here or handed over.
  void* pending[kObjects];
  size_t n_pending = 0;
  for (size_t j = 0; j < kObjects; ++j) {
    size_t size = rng.Chance(1, 64) ? rng.Range(4097, 8192)
                                    : rng.LogRange(16, 4096);
    void* p = malloc(size);
    if (p == nullptr) Fail("malloc(%zu) returned NULL", size);
    uint64_t id = s->index * kIdStride + j;
    wl::Stamp(p, size, id);
    s->alloc_sum += wl::IdSum(id);
    pending[n_pending++] = p;
    // Dispose of a random pending object now and then.
    if (n_pending > 8 && rng.Chance(1, 2)) {
      size_t k = rng.Below(n_pending);
      void* q = pending[k];
      pending[k] = pending[--n_pending];
      if (rng.Chance(1, 2)) {
        FreeChecked(q, s->index, "thread", &s->self_free_sum);
        s->self_frees++;
      } else {
        s->handed[s->n_handed++] = q;
      }
    }
  }
  for (size_t k = 0; k < n_pending; ++k) {
    if (rng.Chance(1, 2)) {
      FreeChecked(pending[k], s->index, "thread", &s->self_free_sum);
      s->self_frees++;
    } else {
      s->handed[s->n_handed++] = pending[k];
    }
  }
  if (scratch[kScratch - 1] != 0x5a) Fail("scratch buffer corrupt");
  free(scratch);
}

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "thread_churn";
  wl::Args args(argc, argv, "");
  const size_t alive = static_cast<size_t>(args.Threads(2));
  // Full size: 2-4 s under glibc malloc on the 2-vCPU reference machine.
  uint64_t total = 10'000;
  if (args.quick()) total /= 20;

  std::vector<Slot> slots(alive);
  uint64_t alloc_sum = 0, free_sum = 0;
  uint64_t self_frees = 0, parent_frees = 0;
  auto reap = [&](Slot& s) {
    s.thread.join();
    alloc_sum += s.alloc_sum;
    free_sum += s.self_free_sum;
    self_frees += s.self_frees;
    for (size_t k = 0; k < s.n_handed; ++k) {
      FreeChecked(s.handed[k], s.index, "main", &free_sum);
    }
    parent_frees += s.n_handed;
    if (s.self_frees + s.n_handed != kObjects) {
      Fail("thread %llu disposed of %llu objects, allocated %zu",
           static_cast<unsigned long long>(s.index),
           static_cast<unsigned long long>(s.self_frees + s.n_handed),
           kObjects);
    }
  };

  double t0 = wl::NowSeconds();
  for (uint64_t i = 0; i < total; ++i) {
    Slot& s = slots[i % alive];
    if (s.thread.joinable()) reap(s);
    s.index = i;
    s.n_handed = 0;
    s.alloc_sum = 0;
    s.self_free_sum = 0;
    s.self_frees = 0;
    s.thread = std::thread(Body, &s);
  }
  for (Slot& s : slots) {
    if (s.thread.joinable()) reap(s);
  }
  double secs = wl::NowSeconds() - t0;

  if (self_frees + parent_frees != total * kObjects) {
    Fail("%llu objects freed, %llu allocated",
         static_cast<unsigned long long>(self_frees + parent_frees),
         static_cast<unsigned long long>(total * kObjects));
  }
  if (alloc_sum != free_sum) {
    Fail("checksum of freed objects 0x%016llx != allocated 0x%016llx",
         static_cast<unsigned long long>(free_sum),
         static_cast<unsigned long long>(alloc_sum));
  }
  printf("metric threads_per_s=%.0f\n", static_cast<double>(total) / secs);
  printf("metric freed_by_parent=%llu\n",
         static_cast<unsigned long long>(parent_frees));
  wl::Ok(secs, "threads=%llu alive=%zu objects=%llu checksum=%016llx",
         static_cast<unsigned long long>(total), alive,
         static_cast<unsigned long long>(total * kObjects),
         static_cast<unsigned long long>(alloc_sum));
  return 0;
}
