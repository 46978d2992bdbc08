// tests/allocator_stress/huge_realloc_race_test.cc: threads that grow
// mappings of their own with realloc (moved by mremap where they cannot
// grow in place) while other threads map and unmap theirs.
//
// realloc of a block above 2 MiB that cannot grow in place moves its pages
// to a new reservation.  The old range is then unmapped by the kernel and
// may be handed at once to another thread's mmap, whose mapping is entered
// in the pagemap.  The moving thread once cleared the old range's pagemap
// entries after the move, erasing the other thread's: its free() then
// aborted with "invalid pointer" (1e0dfb2: realloc_growth --threads=3
// aborted in 3 of 40 runs).  Every block here carries its owner's stamp at
// both ends and is freed by its owner; free() and realloc() must never
// report a live block invalid.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

void Stamp(unsigned char* p, size_t n, unsigned char v) {
  p[0] = v;
  p[n - 1] = v;
}
bool Stamped(const unsigned char* p, size_t n, unsigned char v) {
  return p[0] == v && p[n - 1] == v;
}

TEST(HugeReallocRace, MovedMappingsNeverEraseAnotherThreadsEntries) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 1500;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &bad] {
      const unsigned char v = static_cast<unsigned char>(0x40 + t);
      for (int r = 0; r < kRounds; ++r) {
        size_t n = 3 * kMiB + static_cast<size_t>(r % 7) * 4096;
        unsigned char* p = static_cast<unsigned char*>(malloc(n));
        ASSERT_NE(p, nullptr);
        Stamp(p, n, v);
        // Grow twice: the second often cannot stay in place.
        for (size_t grow : {5 * kMiB, 11 * kMiB}) {
          unsigned char* q = static_cast<unsigned char*>(realloc(p, grow));
          ASSERT_NE(q, nullptr);
          if (q[0] != v) bad.fetch_add(1, std::memory_order_relaxed);
          p = q;
          n = grow;
          Stamp(p, n, v);
        }
        // A mapping taken and given back between the moves of the others.
        unsigned char* other = static_cast<unsigned char*>(malloc(3 * kMiB));
        ASSERT_NE(other, nullptr);
        Stamp(other, 3 * kMiB, v);
        if (!Stamped(other, 3 * kMiB, v) || !Stamped(p, n, v)) {
          bad.fetch_add(1, std::memory_order_relaxed);
        }
        free(other);
        free(p);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0) << "a block's contents changed under its owner";
}

}  // namespace
