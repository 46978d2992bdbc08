// tests/allocator/page_heap_park_test.cc: the page heap's parked run (the
// page run freed last, kept whole for the next allocation of its length).
//
// This binary is not linked with cidmalloc: it drives layer 3 directly, on
// node 0's arena 0, with the automatic release off (an unlimited threshold).
#include <stdint.h>
#include <string.h>

#include "allocator/os/config.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"

namespace {

namespace ph = ::cidmalloc::page_heap;

constexpr size_t kPage = ph::kPageSize;

uintptr_t Alloc(size_t pages, bool* zeroed) {
  void* v = ph::AllocLarge(0, 0, pages * kPage, kPage, zeroed);
  EXPECT_NE(v, nullptr);
  return reinterpret_cast<uintptr_t>(v);
}
void Free(uintptr_t p) { ph::FreeLarge(ph::LookupChunk(p), p); }

// The page heap reads it through the pointer Init keeps: a test may change
// it (and must restore it).
cidmalloc::os::Config g_config;

class PageHeapPark : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_config.release_threshold = SIZE_MAX / 2;
    g_config.release_delay_ms = 0;
    ph::Init(&g_config);
  }
  void TearDown() override { ph::CheckInvariants(); }
};

TEST_F(PageHeapPark, TheSameLengthTakesTheRunFreedLastWithItsContents) {
  bool zeroed;
  const uintptr_t p = Alloc(9, &zeroed);
  memset(reinterpret_cast<void*>(p), 0x5a, 9 * kPage);
  Free(p);
  ph::CheckInvariants();  // With a run parked.
  const uintptr_t q = Alloc(9, &zeroed);
  EXPECT_EQ(q, p);
  // Its pages were in use: not promised to read as zero.
  EXPECT_FALSE(zeroed);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(q)[9 * kPage - 1], 0x5a);
  EXPECT_EQ(ph::LargeUsableSize(ph::LookupChunk(q), q), 9 * kPage);
  Free(q);
}

TEST_F(PageHeapPark, ItsPagesAreNotHandedOutForOtherLengths) {
  bool zeroed;
  // 9 pages: a 16-page block whose 7-page tail went back as blocks of 1, 2
  // and 4 pages.  Merged on free, the whole block would be free again and a
  // 1-page request would get p's first page; parked, the request gets the
  // free page after the run.
  const uintptr_t p = Alloc(9, &zeroed);
  Free(p);
  const uintptr_t one = Alloc(1, &zeroed);
  EXPECT_TRUE(one + kPage <= p || one >= p + 9 * kPage)
      << "a page of the parked run was handed out";
  EXPECT_EQ(Alloc(9, &zeroed), p);
  Free(one);
  Free(p);
}

TEST_F(PageHeapPark, AnotherLengthLeavesItParkedAndItCountsAsFree) {
  bool zeroed;
  const uintptr_t p = Alloc(9, &zeroed);
  ph::NodeStats before;
  ph::GetNodeStats(0, &before);
  Free(p);
  ph::NodeStats parked;
  ph::GetNodeStats(0, &parked);
  EXPECT_EQ(parked.free_bytes, before.free_bytes + 9 * kPage);
  // 10 pages fit in the free pages after the run: the parked run stays,
  // and a 9-page request still gets it.
  const uintptr_t other = Alloc(10, &zeroed);
  EXPECT_NE(other, p);
  const uintptr_t again = Alloc(9, &zeroed);
  EXPECT_EQ(again, p);
  Free(other);
  Free(again);
}

TEST_F(PageHeapPark, RunsOfUpToAChunkAreParked) {
  bool zeroed;
  // Half a chunk and a page: a whole chunk's block, whose tail went back as
  // blocks; merged on free, a 1-page request would get p's first page.
  const size_t n = ph::kPagesPerChunk / 2 + 1;
  const uintptr_t p = Alloc(n, &zeroed);
  Free(p);
  const uintptr_t one = Alloc(1, &zeroed);
  EXPECT_TRUE(one + kPage <= p || one >= p + n * kPage)
      << "a page of the parked run was handed out";
  EXPECT_EQ(Alloc(n, &zeroed), p);
  Free(one);
  Free(p);
}

TEST_F(PageHeapPark, AnAutomaticReleaseMergesItAndReturnsIt) {
  bool zeroed;
  const uintptr_t p = Alloc(9, &zeroed);
  memset(reinterpret_cast<void*>(p), 0x66, 9 * kPage);
  // No free memory may stay committed: the free that parks the run starts
  // a release pass, which must not leave the run out.
  g_config.release_threshold = 0;
  Free(p);
  g_config.release_threshold = SIZE_MAX / 2;
  const uintptr_t q = Alloc(9, &zeroed);
  EXPECT_TRUE(zeroed) << "the parked run stayed committed";
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(q)[0], 0);
  Free(q);
}

TEST_F(PageHeapPark, TrimMergesTheParkedRunAndReturnsIt) {
  bool zeroed;
  const uintptr_t p = Alloc(9, &zeroed);
  memset(reinterpret_cast<void*>(p), 0x77, 9 * kPage);
  Free(p);
  ph::ReleaseFreeMemory(0);
  ph::NodeStats stats;
  ph::GetNodeStats(0, &stats);
  EXPECT_EQ(stats.released_bytes, stats.free_bytes);
  // Taken again, the pages went back to the OS: zero (MADV_DONTNEED, the
  // default method).
  const uintptr_t q = Alloc(9, &zeroed);
  EXPECT_TRUE(zeroed);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(q)[0], 0);
  Free(q);
}

TEST_F(PageHeapPark, AnAllocationThatMustSplitMergesItFirst) {
  bool zeroed;
  // 8 pages while 9 are parked at the start of a 16-page block whose tail
  // is free as blocks of 1, 2 and 4: no 8-page block is free, so the
  // request must split one, and merges the parked run first: it gets the
  // start of that block, where the buddy heap would place it without the
  // parked run, not a split of a larger block elsewhere.
  const uintptr_t p = Alloc(9, &zeroed);
  Free(p);
  const uintptr_t eight = Alloc(8, &zeroed);
  EXPECT_EQ(eight, p);
  Free(eight);
}

TEST_F(PageHeapPark, TheHeapDoesNotGrowForAChunkAParkedRunSitsIn) {
  bool zeroed;
  const uintptr_t p = Alloc(9, &zeroed);
  Free(p);
  // A whole chunk: no block of order 8 is free while the 9 pages of p are
  // parked in the chunk they came from, unless that chunk is merged first
  // (else the heap would grow by a chunk).
  ph::NodeStats before;
  ph::GetNodeStats(0, &before);
  const uintptr_t whole = Alloc(256, &zeroed);
  ph::NodeStats after;
  ph::GetNodeStats(0, &after);
  EXPECT_EQ(after.mapped_bytes, before.mapped_bytes)
      << "the heap grew while a parked run kept a chunk from merging";
  EXPECT_EQ(whole & (ph::kChunkSize - 1), 0u);
  Free(whole);
}

TEST_F(PageHeapPark, DoubleFreeOfAParkedRunAborts) {
  bool zeroed;
  const uintptr_t p = Alloc(9, &zeroed);
  Free(p);
  EXPECT_DEATH(Free(p), "double free");
}

}  // namespace
