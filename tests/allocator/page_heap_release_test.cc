// tests/allocator/page_heap_release_test.cc: the page heap's automatic
// release (allocator/page_heap/page_heap.cc, MaybeRelease), on its own.
//
// This binary is not linked with cidmalloc: it drives layer 3 directly with
// a 4 MiB threshold.  Automatic release returns the largest free blocks
// first, and smaller ones (single pages between pages in use) where the
// larger do not get it down to half the threshold.  The first test checks
// what the OS gets back,
// from the node's counters, through that sequence, with no release delay;
// the second, that the delay keeps what was freed and malloc_trim's path
// does not wait for it.  (release_decay_test checks the delay's timing.)
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "allocator/os/config.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"

namespace {

namespace ph = ::cidmalloc::page_heap;

constexpr size_t kPage = ph::kPageSize;
constexpr size_t kThreshold = size_t{4} << 20;  // 512 pages.
constexpr size_t kPages = 1100;

size_t Committed() {
  ph::NodeStats s;
  ph::GetNodeStats(0, &s);
  return (s.free_bytes - s.released_bytes) / kPage;
}

// n single pages from the page heap, each filled with `byte`.
std::vector<uintptr_t> AllocWritten(size_t n, int byte) {
  std::vector<uintptr_t> pages;
  for (size_t i = 0; i < n; ++i) {
    bool zeroed;
    const uintptr_t p = ph::AllocSpan(0, 0, &zeroed);
    EXPECT_NE(p, 0u);
    if (p == 0) break;
    memset(reinterpret_cast<void*>(p), byte, kPage);
    pages.push_back(p);
  }
  return pages;
}

TEST(PageHeapRelease, HolesAndMergedBlocksGoBackPastTheThreshold) {
  static cidmalloc::os::Config config;
  config.release_threshold = kThreshold;
  config.release_delay_ms = 0;  // Release at once.
  ph::Init(&config);

  // 1100 single pages, each written: nothing free is committed yet.
  std::vector<uintptr_t> pages = AllocWritten(kPages, 0x5a);
  ASSERT_EQ(pages.size(), kPages);
  ASSERT_EQ(Committed(), 0u);

  // Every other one: 550 free pages, over the threshold, all single pages
  // (their buddies are in use).  The free that passes the threshold
  // releases holes down to half of it; the pages in use beside them keep
  // their contents.  (Automatic release once left blocks below 128 KiB, and
  // a heap of holes kept all of them: 550 pages here.)
  for (size_t i = 0; i < kPages; i += 2) {
    ph::FreeSpan(ph::LookupChunk(pages[i]), pages[i], 0);
  }
  ph::CheckInvariants();
  EXPECT_LE(Committed(), kThreshold / kPage);
  EXPECT_LT(Committed(), kPages / 2) << "no hole went back";
  for (size_t i = 1; i < kPages; i += 2) {
    const auto* q = reinterpret_cast<const unsigned char*>(pages[i]);
    ASSERT_EQ(q[0], 0x5a) << "page " << i << " in use lost its contents";
    ASSERT_EQ(q[kPage - 1], 0x5a);
  }

  // Refill the holes, released or not: no committed free page is left.
  for (size_t i = 0; i < kPages; i += 2) {
    bool zeroed;
    pages[i] = ph::AllocSpan(0, 0, &zeroed);
    ASSERT_NE(pages[i], 0u);
    memset(reinterpret_cast<void*>(pages[i]), 0x33, kPage);
  }
  ASSERT_EQ(Committed(), 0u);

  // The lowest 600 pages in address order: they merge into large blocks,
  // 600 committed free pages.  Past the threshold, so they go back down to
  // half of it.
  std::sort(pages.begin(), pages.end());
  for (size_t i = 0; i < 600; ++i) {
    ph::FreeSpan(ph::LookupChunk(pages[i]), pages[i], 0);
  }
  ph::CheckInvariants();
  EXPECT_LE(Committed(), kThreshold / kPage);

  // The rest.
  for (size_t i = 600; i < kPages; ++i) {
    ph::FreeSpan(ph::LookupChunk(pages[i]), pages[i], 0);
  }
  ph::CheckInvariants();
  EXPECT_LE(Committed(), kThreshold / kPage);

  // malloc_trim's path returns everything.
  ph::ReleaseFreeMemory(0);
  EXPECT_EQ(Committed(), 0u);
}

// n single pages, each written, freed again in address order (so that
// they merge into blocks large enough for automatic release).
void AllocWriteAndFree(size_t n) {
  std::vector<uintptr_t> pages = AllocWritten(n, 0x77);
  std::sort(pages.begin(), pages.end());
  for (const uintptr_t p : pages) ph::FreeSpan(ph::LookupChunk(p), p, 0);
  ph::CheckInvariants();
}

TEST(PageHeapRelease, TheDelayKeepsFreedMemoryUntilItHasPassed) {
  static cidmalloc::os::Config config;
  config.release_threshold = kThreshold;
  config.release_delay_ms = 60 * 1000;  // Longer than this test.
  ph::Init(&config);
  ASSERT_EQ(Committed(), 0u);

  // Past the threshold, but freed just now: all of it stays.
  AllocWriteAndFree(kPages);
  EXPECT_EQ(Committed(), kPages);

  // malloc_trim's path does not wait.
  ph::ReleaseFreeMemory(0);
  EXPECT_EQ(Committed(), 0u);

  // Taken and freed again: kept again.
  AllocWriteAndFree(kPages);
  EXPECT_EQ(Committed(), kPages);

  // With a delay of 20 ms, once it has passed (twice over, and more), the
  // next free of a span returns what stayed free, down to half the
  // threshold (or below: release goes a whole block at a time).  (Changing
  // the delay also restarts the epochs' numbering; the timing itself is
  // release_decay_test's.)
  config.release_delay_ms = 20;
  usleep(100 * 1000);
  AllocWriteAndFree(1);
  EXPECT_LE(Committed(), kThreshold / kPage);
  ph::ReleaseFreeMemory(0);
}

}  // namespace
