// tests/allocator/page_heap_fit_test.cc: page runs whose length is not a
// power of two go where their pages fit, not only into a free block of the
// next power of two (page_heap/run_fit.h).
//
// This binary is not linked with cidmalloc: it drives layer 3 directly, on
// node 0's arena 0, with the automatic release off (an unlimited
// threshold).  Each PageHeapFit test starts and ends with the heap's one chunk wholly
// free (and returned to the OS): it fills the chunk with 32 runs of 8 pages, frees some of them to
// leave holes, and asks for a run that only a hole can hold without the
// heap growing.
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "allocator/os/config.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"
#include "tests/allocator/test_util.h"

namespace {

namespace ph = ::cidmalloc::page_heap;

constexpr size_t kPage = ph::kPageSize;
constexpr uint32_t kRuns = ph::kPagesPerChunk / 8;

cidmalloc::os::Config g_config;

uintptr_t Alloc(size_t pages, size_t align, bool* zeroed) {
  void* v = ph::AllocLarge(0, 0, pages * kPage, align, zeroed);
  EXPECT_NE(v, nullptr);
  return reinterpret_cast<uintptr_t>(v);
}
void Free(uintptr_t p) { ph::FreeLarge(ph::LookupChunk(p), p); }
size_t Mapped() {
  ph::NodeStats stats;
  ph::GetNodeStats(0, &stats);
  return stats.mapped_bytes;
}

// The page heap reads its configuration through the pointer Init keeps:
// no automatic release (an unlimited threshold).
void InitWithoutRelease() {
  g_config.release_threshold = SIZE_MAX / 2;
  g_config.release_delay_ms = 0;
  ph::Init(&g_config);
}

class PageHeapFit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InitWithoutRelease(); }
  // Fills the heap's chunk with kRuns runs of 8 pages, each marked with its
  // index, run[i] at page 8 * i.
  void SetUp() override {
    bool zeroed;
    for (uint32_t i = 0; i < kRuns; ++i) {
      run_[i] = Alloc(8, kPage, &zeroed);
      memset(reinterpret_cast<void*>(run_[i]), static_cast<int>(i + 1),
             8 * kPage);
    }
    base_ = run_[0];
    ASSERT_EQ(base_ & (ph::kChunkSize - 1), 0u);
    for (uint32_t i = 0; i < kRuns; ++i) {
      ASSERT_EQ(run_[i], base_ + i * 8 * kPage) << "the heap had another chunk";
    }
    ASSERT_EQ(Mapped(), ph::kChunkSize);
  }
  void TearDown() override {
    for (uint32_t i = 0; i < kRuns; ++i) {
      if (run_[i] != 0) Free(run_[i]);
    }
    ph::CheckInvariants();
    // Merges the run parked by the last free, for the next test's runs to
    // fill the chunk from its start.
    ph::ReleaseFreeMemory(0);
  }
  // Frees runs [from, to): a hole of pages [8 * from, 8 * to) once the
  // last of them is no longer parked (see ParkTheLastRun).
  void Hole(uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; ++i) {
      Free(run_[i]);
      run_[i] = 0;
    }
  }
  // A free parks its run (buddy.h, ParkRun) and merges the run parked
  // before into the free pages: freeing the chunk's last run completes the
  // holes.
  void ParkTheLastRun() {
    Free(run_[kRuns - 1]);
    run_[kRuns - 1] = 0;
  }
  // The runs left in place still hold their marks.
  void ExpectRunsIntact() {
    for (uint32_t i = 0; i < kRuns; ++i) {
      if (run_[i] == 0) continue;
      const auto* b = reinterpret_cast<const unsigned char*>(run_[i]);
      EXPECT_EQ(b[0], i + 1);
      EXPECT_EQ(b[8 * kPage - 1], i + 1);
    }
  }
  uintptr_t Page(uint32_t p) const { return base_ + p * kPage; }

  uintptr_t run_[kRuns] = {};
  uintptr_t base_ = 0;
};

TEST_F(PageHeapFit, ARunTakesAHoleThatIsNoBlockOfItsOrder) {
  // Pages 32-95: two free 32-page blocks that are not buddies, so no
  // 64-page block is free anywhere.  48 pages fit from page 32.
  Hole(4, 12);
  ParkTheLastRun();
  bool zeroed;
  const uintptr_t p = Alloc(48, kPage, &zeroed);
  EXPECT_EQ(p, Page(32));
  EXPECT_EQ(Mapped(), ph::kChunkSize) << "the heap grew";
  EXPECT_FALSE(zeroed) << "its pages were in use and are still committed";
  EXPECT_EQ(ph::LargeUsableSize(ph::LookupChunk(p), p), 48 * kPage);
  memset(reinterpret_cast<void*>(p), 0xee, 48 * kPage);
  ExpectRunsIntact();
  // The rest of the hole, pages 80-95, is free: an exact block takes it.
  const uintptr_t tail = Alloc(16, kPage, &zeroed);
  EXPECT_EQ(tail, Page(80));
  Free(tail);
  Free(p);
}

TEST_F(PageHeapFit, PagesThatWentBackToTheOsAreReportedZeroed) {
  Hole(4, 12);
  ParkTheLastRun();
  ph::ReleaseFreeMemory(0);
  bool zeroed;
  const uintptr_t p = Alloc(48, kPage, &zeroed);
  ASSERT_EQ(p, Page(32));
  EXPECT_TRUE(zeroed);
  EXPECT_EQ(cidmalloc_test::FirstNonZero(reinterpret_cast<void*>(p),
                                         48 * kPage),
            48 * kPage);
  Free(p);
}

TEST_F(PageHeapFit, TheRunKeepsItsAlignment) {
  // Pages 24-71: 40 pages at an alignment of 16 pages fit from page 32 (24
  // is not a multiple of 16) to the hole's end.
  Hole(3, 9);
  ParkTheLastRun();
  bool zeroed;
  const uintptr_t p = Alloc(40, 16 * kPage, &zeroed);
  EXPECT_EQ(p, Page(32));
  EXPECT_EQ(p % (16 * kPage), 0u);
  EXPECT_EQ(Mapped(), ph::kChunkSize) << "the heap grew";
  memset(reinterpret_cast<void*>(p), 0xdd, 40 * kPage);
  ExpectRunsIntact();
  Free(p);
}

TEST_F(PageHeapFit, TheShortestHoleThatHoldsTheRunIsTaken) {
  // A 40-page hole (pages 16-55) before a 24-page one (80-103): 20 pages go
  // to the shorter, not to the first.
  Hole(2, 7);
  Hole(10, 13);
  ParkTheLastRun();
  bool zeroed;
  const uintptr_t p = Alloc(20, kPage, &zeroed);
  EXPECT_EQ(p, Page(80));
  memset(reinterpret_cast<void*>(p), 0xcc, 20 * kPage);
  ExpectRunsIntact();
  Free(p);
}

// The chunk: how runs are placed among chunks.  A heap of its own (the
// BUILD rule page_heap_fit_chunks_test runs only this suite): it grows to
// more than one chunk, which PageHeapFit's tests must not find.
class PageHeapFitAcrossChunks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InitWithoutRelease(); }
  void TearDown() override { ph::CheckInvariants(); }
};

TEST_F(PageHeapFitAcrossChunks, TheChunkWithTheShortestStretchThatFitsIsTaken) {
  // Two chunks full of 8-page runs; in the first a 40-page hole, in the
  // second a 24-page one.  20 pages go to the second chunk's hole, though
  // the first chunk was freed into last.
  bool zeroed;
  uintptr_t runs[2 * kRuns];
  for (uint32_t i = 0; i < 2 * kRuns; ++i) runs[i] = Alloc(8, kPage, &zeroed);
  uintptr_t chunk[2] = {runs[0] & ~(ph::kChunkSize - 1), 0};
  for (uint32_t i = 0; i < 2 * kRuns; ++i) {
    const uintptr_t c = runs[i] & ~(ph::kChunkSize - 1);
    if (c != chunk[0]) chunk[1] = c;
  }
  ASSERT_NE(chunk[1], 0u);
  // The run at page p of chunk c.
  auto run_at = [&](int c, uint32_t p) -> uintptr_t& {
    for (uintptr_t& r : runs) {
      if (r == chunk[c] + p * kPage) return r;
    }
    ADD_FAILURE() << "no run at page " << p << " of chunk " << c;
    return runs[0];
  };
  auto hole = [&](int c, uint32_t from_page, uint32_t to_page) {
    for (uint32_t p = from_page; p < to_page; p += 8) {
      uintptr_t& r = run_at(c, p);
      Free(r);
      r = 0;
    }
  };
  hole(1, 80, 104);
  hole(0, 16, 56);
  // A run freed last stays parked, out of the holes: park one elsewhere.
  uintptr_t& last = run_at(1, 248);
  Free(last);
  last = 0;
  const uintptr_t p = Alloc(20, kPage, &zeroed);
  EXPECT_EQ(p, chunk[1] + 80 * kPage);
  ph::CheckInvariants();
  Free(p);
  for (uintptr_t r : runs) {
    if (r != 0) Free(r);
  }
}

TEST_F(PageHeapFitAcrossChunks, ChunksUnmappedWhenTheOsRefusesLeaveTheIndex) {
  // Wholly free chunks (freed into: on the index's list to measure again),
  // then a mapping of its own that the address-space limit refuses: the
  // page heap unmaps the free chunks and tries again (DropFreeMappings).
  // The index must not keep them (CheckInvariants: every chunk on it is
  // still in the pagemap).
  bool zeroed;
  uintptr_t runs[kRuns];
  for (uintptr_t& r : runs) r = Alloc(8, kPage, &zeroed);
  for (uintptr_t r : runs) Free(r);
  // Unparks the last run, and measures the chunk it takes.
  const uintptr_t three = Alloc(3, kPage, &zeroed);
  ph::CheckInvariants();
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  const size_t vm = cidmalloc_test::VmSizeBytes();
  ASSERT_GT(vm, 0u);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(vm + ph::kChunkSize);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  void* huge = ph::AllocLarge(0, 0, 16 * ph::kChunkSize, kPage, &zeroed);
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
  if (huge != nullptr) ph::FreeLarge(ph::LookupChunk(
                           reinterpret_cast<uintptr_t>(huge)),
                       reinterpret_cast<uintptr_t>(huge));
  ph::NodeStats stats;
  ph::GetNodeStats(0, &stats);
  EXPECT_LT(stats.mapped_bytes, 2 * ph::kChunkSize)
      << "the free chunks were not unmapped";
  ph::CheckInvariants();
  // The heap still places runs.
  const uintptr_t p = Alloc(20, kPage, &zeroed);
  Free(p);
  Free(three);
}

}  // namespace
