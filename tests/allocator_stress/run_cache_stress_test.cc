// tests/allocator_stress/run_cache_stress_test.cc: blocks above the size
// classes up to the longest run the per-ID run stacks cache (128 KiB + 1 to
// 256 KiB)
// (allocator/front_end/run_cache.h), allocated, handed to other threads
// through shared slots, grown and shrunk with realloc and freed, while
// another thread drains every cache with malloc_trim.  Each block carries
// a cookie of its address and a serial number in words spread over it
// (first, last and every 4 KiB); a block handed out twice, or a run whose
// pages the cache gave back while it was live, shows as a wrong cookie
// when its owner checks it before the free.  Run in every mode (BUILD).
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocator/central/size_classes.h"
#include "allocator/front_end/run_cache.h"
#include "allocator/page_heap/chunk.h"
#include "tests/allocator_stress/stress_util.h"

namespace cidmalloc_stress {
namespace {

constexpr int kThreads = 4;
constexpr int kOpsPerThread = 6000;
constexpr int kLocal = 3;           // blocks a thread holds at a time
constexpr int kShared = 8;          // slots blocks pass through
// The lengths the run stacks take: from the allocator's own bounds, so that
// they follow it (when the classes grew to 128 KiB these were 64 KiB + 1 to
// 128 KiB, class objects by then, and no run stack was exercised).
constexpr size_t kMinSize = cidmalloc::central::kMaxSmallSize + 1;
constexpr size_t kMaxSize = size_t{cidmalloc::front_end::kMaxCachedRunPages}
                            << cidmalloc::page_heap::kPageShift;
constexpr size_t kStrideWords = 512;  // a checked word every 4 KiB

struct Block {
  uint64_t* p = nullptr;
  size_t size = 0;
  uint64_t serial = 0;
};

// The checked words of a block of `size` bytes: 1, every kStrideWords-th,
// and the last (word 0 holds the serial).
template <typename F>
void ForEachCheckedWord(size_t size, F f) {
  const size_t words = size / 8;
  for (size_t w = 1; w < words; w += kStrideWords) f(w);
  f(words - 1);
}

uint64_t Cookie(const Block& b, size_t w) {
  return Mix(reinterpret_cast<uintptr_t>(b.p) + w, b.serial);
}

void Stamp(const Block& b) {
  b.p[0] = b.serial;
  ForEachCheckedWord(b.size, [&](size_t w) { b.p[w] = Cookie(b, w); });
}

// False (with a message) if a checked word is not the block's own.
bool Intact(const Block& b, size_t size) {
  if (b.p[0] != b.serial) {
    ADD_FAILURE() << "serial of " << b.p << " overwritten";
    return false;
  }
  bool ok = true;
  ForEachCheckedWord(size, [&](size_t w) {
    if (ok && b.p[w] != Cookie(b, w)) {
      ADD_FAILURE() << "word " << w << " of " << b.p << " (" << size
                    << " bytes) overwritten";
      ok = false;
    }
  });
  return ok;
}

struct Shared {
  std::atomic<Block*> slots[kShared] = {};
  std::atomic<uint64_t> next_serial{1};
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
};

void Release(Shared& s, Block* b) {
  if (b == nullptr) return;
  if (!Intact(*b, b->size)) s.failures.fetch_add(1);
  free(b->p);
  delete b;
}

Block* NewBlock(Shared& s, Rng& rng) {
  auto* b = new Block;
  b->size = rng.Range(kMinSize, kMaxSize);
  b->p = static_cast<uint64_t*>(rng.Chance(1, 8) ? calloc(1, b->size)
                                                 : malloc(b->size));
  if (b->p == nullptr) {
    ADD_FAILURE() << "malloc(" << b->size << ") failed";
    delete b;
    return nullptr;
  }
  b->serial = s.next_serial.fetch_add(1);
  Stamp(*b);
  return b;
}

void Worker(Shared& s, int index) {
  Rng rng(1000 + index);
  Block* local[kLocal] = {};
  for (int op = 0; op < kOpsPerThread; ++op) {
    Block*& slot = local[rng.Below(kLocal)];
    switch (rng.Below(4)) {
      case 0:  // Free what the slot holds, take a new block.
      case 1:
        Release(s, slot);
        slot = NewBlock(s, rng);
        break;
      case 2:  // Pass a block through a shared slot: free what comes back.
        Release(s, s.slots[rng.Below(kShared)].exchange(slot));
        slot = nullptr;
        break;
      case 3:  // Resize within the cached lengths, or beyond them.
        if (slot != nullptr) {
          const size_t size = rng.Chance(1, 4)
                                  ? rng.Range(kMaxSize, 2 * kMaxSize)
                                  : rng.Range(kMinSize, kMaxSize);
          if (!Intact(*slot, slot->size)) s.failures.fetch_add(1);
          void* q = realloc(slot->p, size);
          if (q == nullptr) {
            ADD_FAILURE() << "realloc failed";
            break;
          }
          slot->p = static_cast<uint64_t*>(q);
          slot->size = size;
          Stamp(*slot);  // The cookies depend on the address.
        }
        break;
    }
  }
  for (Block* b : local) Release(s, b);
}

TEST(RunCacheStress, BlocksPassBetweenThreadsWhileCachesDrain) {
  CheckTargetMode();
  Shared s;
  std::thread trimmer([&s] {
    while (!s.stop.load()) {
      malloc_trim(0);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back(Worker, std::ref(s), t);
  }
  for (std::thread& w : workers) w.join();
  s.stop.store(true);
  trimmer.join();
  for (std::atomic<Block*>& slot : s.slots) Release(s, slot.exchange(nullptr));
  EXPECT_EQ(s.failures.load(), 0);
  // Everything went back: with every cache drained, the allocator holds
  // no cached object and no cached run.
  malloc_trim(0);
  EXPECT_EQ(Stats().cached_bytes, 0u);
}

}  // namespace
}  // namespace cidmalloc_stress
