// tests/allocator_stress/consumer_cache_test.cc: a cache grows with its
// ID's own reuse, not with frees alone (allocator/front_end/front_end.h,
// "Capacity").
//
// A thread that only frees a class (a consumer of objects another thread
// allocates) keeps at most about its first batch of that class: past it,
// a full stack sends a batch home instead of growing, since the ID never
// reuses those objects.  A thread that allocates and frees the same
// objects still grows its stack to hold them all.
//
// Run in none mode (BUILD), where each thread has an ID of its own (a soft
// ID), so that the producer's and the consumer's caches are surely
// different ones; CIDMALLOC_CACHE_IDLE_MS=0, so that no idle drain moves
// the cached bytes while they are measured.  Each thread stays alive (its
// soft ID's cache with it) until main has read the statistics.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

// 1.25 MiB of 64-byte objects: more than an ID's budget
// (CIDMALLOC_CACHE_BYTES, 1 MiB by default), so a cache that grew on
// frees alone would hold close to 1 MiB of them.
constexpr int kObjects = 20000;
constexpr size_t kSize = 64;

TEST(ConsumerCache, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

// Cached bytes added while `body` runs on a new thread, measured while
// that thread (and its soft ID's cache) is still alive.
template <typename Body>
int64_t CachedBytesAddedBy(Body body) {
  const int64_t before = static_cast<int64_t>(Stats().cached_bytes);
  Barrier ran(2), measured(2);
  std::thread t([&] {
    body();
    ran.Wait();
    measured.Wait();
  });
  ran.Wait();
  const int64_t after = static_cast<int64_t>(Stats().cached_bytes);
  measured.Wait();
  t.join();
  return after - before;
}

TEST(ConsumerCache, AThreadThatOnlyFreesAClassKeepsAboutABatch) {
  std::vector<void*> objs(kObjects);
  for (void*& p : objs) {
    p = malloc(kSize);
    ASSERT_NE(p, nullptr);
  }
  const int64_t added = CachedBytesAddedBy([&] {
    for (void* p : objs) free(p);
  });
  printf("the consumer freed %.2f MiB; its cache kept %.1f KiB\n",
         ToMiB(kObjects * kSize), added / 1024.0);
  // A batch of a small class is at most 16 KiB of objects; allow a few
  // for the classes the thread's own start-up touches.
  EXPECT_LT(added, 128 * static_cast<int64_t>(kKiB));
}

TEST(ConsumerCache, AThreadThatReusesItsObjectsGrowsItsCache) {
  const int64_t added = CachedBytesAddedBy([] {
    std::vector<void*> objs(kObjects / 4);
    for (int round = 0; round < 3; ++round) {
      for (void*& p : objs) {
        p = malloc(kSize);
        ASSERT_NE(p, nullptr);
      }
      for (void* p : objs) free(p);
    }
  });
  printf("the thread reused %.2f MiB; its cache kept %.1f KiB\n",
         ToMiB(kObjects / 4 * kSize), added / 1024.0);
  // 5000 objects of 64 bytes: 312 KiB; most of it stays cached.
  EXPECT_GT(added, 256 * static_cast<int64_t>(kKiB));
}

}  // namespace
