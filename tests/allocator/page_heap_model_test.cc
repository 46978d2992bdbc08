// tests/allocator/page_heap_model_test.cc: random sequences of the page
// heap's run operations, checked against a model of the live runs.
//
// This binary is not linked with cidmalloc: it drives layer 3 directly.
// Operations: AllocLarge of 1 to 256 pages (runs that start and end
// anywhere in the 64-page words of the chunk's bitmaps) at alignments of 1
// to 64 pages from any of the node's arenas, FreeLarge, ResizeRun (shrinking and growing in place), and
// now and then malloc_trim's ReleaseFreeMemory, under a 1 MiB release
// threshold with no delay, so that automatic release runs too.
//
// The model holds every live run's address, length and fill byte.  Each
// run has its byte in the first and last word of each of its pages, so a
// run handed out twice, or pages taken by two runs, show up as a wrong
// byte.  A run the heap reports as zeroed must read as zero (the page
// heap's record of which free pages went back to the OS).  After every
// operation the run it touched is checked, and every 32 operations all
// runs and page_heap::CheckInvariants (the buddy state, the counts, and
// that only free pages are marked released).
#include <string.h>

#include <vector>

#include "allocator/os/config.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"

namespace {

namespace ph = ::cidmalloc::page_heap;

constexpr size_t kPage = ph::kPageSize;
constexpr uint32_t kMaxRunPages = 256;

struct LiveRun {
  uintptr_t p;
  uint32_t pages;
  uint8_t byte;
};

struct Rng {
  uint64_t s = 0x9e3779b97f4a7c15u;
  uint32_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 16);
  }
};

uint64_t Pattern(uint8_t byte) { return 0x0101010101010101u * byte; }

// The word at each end of each page of the run.
void Mark(const LiveRun& r, uint32_t from_page) {
  for (uint32_t i = from_page; i < r.pages; ++i) {
    uint64_t* page = reinterpret_cast<uint64_t*>(r.p + i * kPage);
    page[0] = page[kPage / 8 - 1] = Pattern(r.byte);
  }
}

::testing::AssertionResult MarksIntact(const LiveRun& r) {
  for (uint32_t i = 0; i < r.pages; ++i) {
    const uint64_t* page = reinterpret_cast<const uint64_t*>(r.p + i * kPage);
    if (page[0] != Pattern(r.byte) || page[kPage / 8 - 1] != Pattern(r.byte)) {
      return ::testing::AssertionFailure()
             << "run at " << reinterpret_cast<void*>(r.p) << " of " << r.pages
             << " pages: page " << i << " holds another run's byte";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult ReadsZero(uintptr_t p, size_t bytes) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i < bytes / 8; ++i) {
    if (w[i] != 0) {
      return ::testing::AssertionFailure()
             << "a run reported zeroed has a nonzero word at offset " << i * 8;
    }
  }
  return ::testing::AssertionSuccess();
}

enum class Op : uint8_t { kAlloc, kFree, kResize, kTrim };

Op Pick(Rng& rng, size_t live) {
  const uint32_t r = rng.Next() % 100;
  if (live == 0 || (live < 40 && r < 45)) return Op::kAlloc;
  if (r < 1) return Op::kTrim;
  if (r < 25) return Op::kResize;
  return live > 80 || r < 70 ? Op::kFree : Op::kAlloc;
}

TEST(PageHeapModel, RandomRunOperationsKeepRunsApartAndZeroedRunsZero) {
  static cidmalloc::os::Config config;
  config.release_threshold = size_t{1} << 20;
  config.release_delay_ms = 0;
  ph::Init(&config);

  Rng rng;
  std::vector<LiveRun> runs;
  uint32_t zeroed_runs = 0, grown = 0, shrunk = 0, refused = 0;
  for (int step = 0; step < 20000; ++step) {
    switch (Pick(rng, runs.size())) {
      case Op::kAlloc: {
        const uint32_t pages = 1 + rng.Next() % kMaxRunPages;
        const size_t align = kPage << (rng.Next() % 7);  // 1-64 pages.
        const size_t bytes = pages * kPage - rng.Next() % kPage;
        // Arenas past the last wrap around.  One thread never meets
        // another on arena 0, so the runs come from there or from the free
        // blocks of the arena asked for (none: only arena 0 grows here).
        const int arena =
            static_cast<int>(rng.Next() % (ph::kArenasPerNode + 2));
        bool zeroed = false;
        void* v = ph::AllocLarge(0, arena, bytes, align, &zeroed);
        ASSERT_NE(v, nullptr) << "step " << step;
        const uintptr_t p = reinterpret_cast<uintptr_t>(v);
        ASSERT_EQ(p % align, 0u) << "step " << step;
        ASSERT_EQ(ph::LookupChunk(p)->arena, 0) << "step " << step;
        ASSERT_GE(ph::LargeUsableSize(ph::LookupChunk(p), p), bytes);
        if (zeroed) {
          ++zeroed_runs;
          ASSERT_TRUE(ReadsZero(p, pages * kPage)) << "step " << step;
        }
        runs.push_back({p, pages, static_cast<uint8_t>(1 + step % 255)});
        Mark(runs.back(), 0);
        break;
      }
      case Op::kFree: {
        const size_t i = rng.Next() % runs.size();
        ASSERT_TRUE(MarksIntact(runs[i])) << "step " << step;
        ph::FreeLarge(ph::LookupChunk(runs[i].p), runs[i].p);
        runs[i] = runs.back();
        runs.pop_back();
        break;
      }
      case Op::kResize: {
        LiveRun& r = runs[rng.Next() % runs.size()];
        const uint32_t pages = 1 + rng.Next() % kMaxRunPages;
        if (!ph::ResizeRun(ph::LookupChunk(r.p), r.p, pages * kPage)) {
          ++refused;
          ASSERT_GT(pages, r.pages) << "a shrink was refused, step " << step;
          break;
        }
        ASSERT_EQ(ph::LargeUsableSize(ph::LookupChunk(r.p), r.p),
                  pages * kPage);
        const uint32_t old = r.pages;
        r.pages = pages;
        if (pages > old) {
          ++grown;
          Mark(r, old);
        } else if (pages < old) {
          ++shrunk;
        }
        ASSERT_TRUE(MarksIntact(r)) << "step " << step;
        break;
      }
      case Op::kTrim:
        ph::ReleaseFreeMemory(0);
        break;
    }
    if (step % 32 == 31) {
      for (const LiveRun& r : runs) ASSERT_TRUE(MarksIntact(r)) << "step " << step;
      ph::CheckInvariants();
    }
  }
  for (const LiveRun& r : runs) {
    ASSERT_TRUE(MarksIntact(r));
    ph::FreeLarge(ph::LookupChunk(r.p), r.p);
  }
  ph::CheckInvariants();
  // The sequence reached every kind of operation, including runs handed
  // out as zeroed after pages went back to the OS.
  EXPECT_GT(zeroed_runs, 100u);
  EXPECT_GT(grown, 100u);
  EXPECT_GT(shrunk, 100u);
  EXPECT_GT(refused, 100u);
}

}  // namespace
