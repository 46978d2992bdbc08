// tests/allocator/realloc_in_place_test.cc: realloc of large blocks
// without copying.
//
// A block with a mapping of its own (> 2 MiB) moves its pages with mremap
// instead of allocating, faulting in and copying a new block; the page
// faults of the realloc are the observable difference (copying 8 MiB into
// fresh memory faults about 2048 pages, moving the mapping none).  A page
// run grows into the free pages after it and gives back its tail when it
// shrinks, keeping its address.
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"
#include "tests/allocator/alloc_probe.h"
#include "tests/allocator/test_util.h"

namespace {

using namespace cidmalloc_test;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kChunk = 2 * kMiB;

TEST(ReallocHuge, GrowthMovesPagesWithoutCopying) {
  void* p = malloc(8 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(KindOf(p), BlockKind::kHuge);
  FillPattern(p, 8 * kMiB, 11);  // Every page resident.
  const long before = ThreadMinorFaults();
  void* q = realloc(p, 64 * kMiB);
  const long faults = ThreadMinorFaults() - before;
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(KindOf(q), BlockKind::kHuge);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % kChunk, 0u)
      << "a mapping of its own starts on a chunk boundary";
  EXPECT_GE(malloc_usable_size(q), 64 * kMiB);
  // Copying would fault every destination page (2048 of 4 KiB).
  EXPECT_LT(faults, 256) << "realloc faulted " << faults << " pages";
  EXPECT_EQ(FirstPatternMismatch(q, 8 * kMiB, 11), 8 * kMiB);
  // The new tail is ordinary zeroed memory.
  const unsigned char* tail = static_cast<unsigned char*>(q) + 8 * kMiB;
  EXPECT_EQ(tail[0], 0);
  EXPECT_EQ(tail[56 * kMiB - 1], 0);
  memset(static_cast<char*>(q) + 8 * kMiB, 0x5a, 56 * kMiB);
  const uintptr_t old = reinterpret_cast<uintptr_t>(p);
  if (reinterpret_cast<uintptr_t>(q) != old) {
    EXPECT_EQ(KindOf(reinterpret_cast<void*>(old)), BlockKind::kNotOurs)
        << "the old range left the pagemap";
  }
  free(q);
}

TEST(ReallocHuge, RepeatedDoublingKeepsContents) {
  size_t size = 3 * kMiB;
  char* p = static_cast<char*>(malloc(size));
  ASSERT_NE(p, nullptr);
  FillPattern(p, size, 12);
  for (int step = 0; step < 6; ++step) {  // 3 MiB .. 192 MiB
    char* q = static_cast<char*>(realloc(p, size * 2));
    ASSERT_NE(q, nullptr) << "step " << step;
    ASSERT_EQ(FirstPatternMismatch(q, size, 12), size) << "step " << step;
    FillPattern(q, size * 2, 12);
    p = q;
    size *= 2;
    ASSERT_EQ(KindOf(p), BlockKind::kHuge);
  }
  free(p);
}

// A mapping of its own of `from` bytes, filled with a pattern, shrunk by
// realloc to `to`: it must stay where it is, keep its first `to` bytes,
// report `to` rounded up to the page as its usable size (as glibc's
// mmapped chunks do), and give up what lies past `mapping` (whole
// chunks), whose pages leave the pagemap, and the pages past `to` inside
// it.  Returns the block, or nullptr (and a failure) if it moved.
void* ShrinkMapping(size_t from, size_t to, size_t mapping, int seed) {
  void* p = malloc(from);
  if (p == nullptr) {
    ADD_FAILURE() << "malloc(" << from << ") failed";
    return nullptr;
  }
  FillPattern(p, from, seed);
  void* q = realloc(p, to);
  EXPECT_EQ(q, p) << "shrinking a mapping needs no move";
  if (q != p) {
    free(q);
    return nullptr;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(malloc_usable_size(q), (to + page - 1) / page * page);
  EXPECT_EQ(FirstPatternMismatch(q, to, seed), to);
  char* const c = static_cast<char*>(q);
  EXPECT_EQ(KindOf(c + mapping - 1), BlockKind::kHuge) << "whole chunks";
  EXPECT_EQ(KindOf(c + mapping), BlockKind::kNotOurs)
      << "the cut tail is no longer in the pagemap";
  // The pages past the new size, in the last chunk, are not resident.
  const size_t keep = (to + page - 1) / page * page;
  if (keep < mapping) {
    EXPECT_EQ(ResidentPages(c + keep, mapping - keep), 0u)
        << "of " << (mapping - keep) / page << " pages past the size";
  }
  return q;
}

// Below half the block: realloc must not keep all 32 MiB.
TEST(ReallocHuge, ShrinkingStaysInPlaceAndReturnsTheTail) {
  free(ShrinkMapping(32 * kMiB, 5 * kMiB + 100, 6 * kMiB, 13));
}

// Above half the block, but wasting 2 MiB or more: cut in place too, as
// glibc cuts its mmapped chunks.
TEST(ReallocHuge, ShrinkingAboveHalfByAChunkOrMoreReturnsTheTail) {
  free(ShrinkMapping(64 * kMiB, 33 * kMiB, 34 * kMiB, 17));
}

// Less than a chunk under: the mapping stays as it is (no mremap), but the
// pages past the new size go back all the same, as glibc's mremap gives
// them back.
TEST(ReallocHuge, ShrinkingByLessThanAChunkReturnsThePagesPastTheSize) {
  free(ShrinkMapping(5 * kMiB + 512 * 1024, 4 * kMiB + 4097, 6 * kMiB, 19));
  void* q = ShrinkMapping(64 * kMiB, 33 * kMiB, 34 * kMiB, 23);
  ASSERT_NE(q, nullptr);
  void* r = realloc(q, 32 * kMiB + 1);  // Just under 1 MiB less.
  ASSERT_EQ(r, q);
  EXPECT_EQ(malloc_usable_size(r), 32 * kMiB + 4096);
  EXPECT_EQ(FirstPatternMismatch(r, 32 * kMiB + 1, 23), 32 * kMiB + 1);
  free(r);
}

TEST(ReallocRun, GrowsIntoTheFreePagesAfterIt) {
  // 200 KiB is 25 pages of 8 KiB in a 32-page buddy block: the 7 pages
  // after the run are free (nothing else allocates in between).
  constexpr size_t kKiB = 1024;
  char* p = static_cast<char*>(malloc(200 * kKiB));
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(KindOf(p), BlockKind::kLarge);
  FillPattern(p, 200 * kKiB, 14);
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  char* q = static_cast<char*>(realloc(p, 240 * kKiB));
  ASSERT_EQ(reinterpret_cast<uintptr_t>(q), base) << "grown in place";
  EXPECT_EQ(malloc_usable_size(q), 240 * kKiB);
  EXPECT_EQ(FirstPatternMismatch(q, 200 * kKiB, 14), 200 * kKiB);
  memset(q + 200 * kKiB, 0x33, 40 * kKiB);
  cidmalloc::page_heap::CheckInvariants();  // Aborts on a broken buddy heap.
  free(q);
  cidmalloc::page_heap::CheckInvariants();
}

TEST(ReallocRun, ShrinkingBelowHalfKeepsTheAddress) {
  constexpr size_t kKiB = 1024;
  char* p = static_cast<char*>(malloc(1024 * kKiB));
  ASSERT_NE(p, nullptr);
  FillPattern(p, 1024 * kKiB, 15);
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  char* q = static_cast<char*>(realloc(p, 300 * kKiB));
  ASSERT_EQ(reinterpret_cast<uintptr_t>(q), base) << "shrunk in place";
  EXPECT_EQ(malloc_usable_size(q), 304 * kKiB) << "whole 8 KiB pages";
  EXPECT_EQ(FirstPatternMismatch(q, 300 * kKiB, 15), 300 * kKiB);
  cidmalloc::page_heap::CheckInvariants();
  free(q);
  cidmalloc::page_heap::CheckInvariants();
}

}  // namespace
