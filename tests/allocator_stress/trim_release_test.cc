// tests/allocator_stress/trim_release_test.cc: freed memory goes back to
// the OS, measured as the process's resident set (/proc/self/statm; the
// rusage maximum would only ever grow).
//
//   TrimAfterFreeingEverything: ~200 MiB in mixed sizes (small objects,
//     page runs, own mappings), allocated and freed by several threads that
//     stay alive (so their front-end caches must be drained too); after
//     malloc_trim(0) the resident set is down by at least half of what was
//     allocated, and allocating afterwards works.
//   ReleaseWithoutTrim (targets that set CIDMALLOC_RELEASE_BYTES small):
//     the same without malloc_trim: the page heap gives memory back on its
//     own.  EXPECT_AUTO_RELEASE says when:
//       1            at once (CIDMALLOC_RELEASE_DELAY_MS=0);
//       after_delay  once the (short) release delay has passed, at the
//                    next free of a page run: the test sleeps well past
//                    it, then frees one.  Then, after idle periods
//                    (CIDMALLOC_CACHE_IDLE_MS) in which the main thread
//                    runs slow paths, the idle caches are drained and
//                    all but an eighth goes back;
//       kept         not within the (long) delay: most of it stays
//                    resident, until malloc_trim.
//
// The trim target sets CIDMALLOC_RELEASE_BYTES=1G so that the drop is
// malloc_trim's doing.  No timing is asserted: the sleep only has to be
// longer than the delay, and the long delay longer than the test.
#include <gtest/gtest.h>
#include <malloc.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kThreads = 4;
constexpr size_t kPerThread = 50 * kMiB;  // 200 MiB in all.

struct Block {
  char* p;
  size_t size;
};

// kPerThread bytes of blocks: by bytes, 30% small objects (16 B - 1 KiB),
// 30% medium (1 - 64 KiB), 25% page runs (64 KiB - 1 MiB), 15% own
// mappings (2 - 6 MiB).  Every page is written.
std::vector<Block> AllocateMix(uint64_t seed) {
  Rng rng(seed);
  std::vector<Block> blocks;
  const size_t budget[4] = {kPerThread * 30 / 100, kPerThread * 30 / 100,
                            kPerThread * 25 / 100, kPerThread * 15 / 100};
  for (int kind = 0; kind < 4; ++kind) {
    size_t used = 0;
    while (used < budget[kind]) {
      size_t size;
      switch (kind) {
        case 0: size = rng.Range(16, 1024); break;
        case 1: size = rng.Range(1025, 64 * kKiB); break;
        case 2: size = rng.Range(64 * kKiB + 1, kMiB); break;
        default: size = rng.Range(2 * kMiB + 1, 6 * kMiB); break;
      }
      char* p = static_cast<char*>(malloc(size));
      if (p == nullptr) {
        ADD_FAILURE() << "malloc(" << size << ") failed";
        return blocks;
      }
      memset(p, static_cast<int>(blocks.size() & 0xff) | 1, size);
      blocks.push_back(Block{p, size});
      used += size;
    }
  }
  // Free in a random order later: shuffle now.
  for (size_t i = blocks.size(); i > 1; --i) {
    std::swap(blocks[i - 1], blocks[rng.Below(i)]);
  }
  return blocks;
}

size_t TotalBytes(const std::vector<std::vector<Block>>& all) {
  size_t total = 0;
  for (const auto& v : all) {
    for (const Block& b : v) total += b.size;
  }
  return total;
}

// Allocates on kThreads threads, then frees every block on a different
// thread than the one that allocated it, and leaves the threads alive
// (parked) until `done` runs.  Returns the bytes allocated.
template <typename AfterFree>
size_t AllocateFreeAcrossThreads(size_t* rss_full, AfterFree after_free) {
  std::vector<std::vector<Block>> blocks(kThreads);
  Barrier allocated(kThreads + 1), freed(kThreads + 1), finish(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      blocks[t] = AllocateMix(0x7e1ea5e0 + t);
      allocated.Wait();
      allocated.Wait();  // Main has measured.
      // Free the next thread's blocks (checking one byte of each).
      for (const Block& b : blocks[(t + 1) % kThreads]) {
        if (b.p[b.size - 1] == 0) ADD_FAILURE() << "block lost its contents";
        free(b.p);
      }
      freed.Wait();
      finish.Wait();  // Parked, caches full, while main measures and trims.
    });
  }
  allocated.Wait();
  const size_t total = TotalBytes(blocks);
  *rss_full = ResidentBytes();
  allocated.Wait();
  freed.Wait();
  after_free();
  finish.Wait();
  for (auto& t : threads) t.join();
  return total;
}

TEST(TrimRelease, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST(TrimRelease, TrimAfterFreeingEverything) {
  if (Env("EXPECT_AUTO_RELEASE") == "1") {
    GTEST_SKIP() << "this target checks release without malloc_trim";
  }
  malloc_trim(0);
  const size_t rss_start = ResidentBytes();
  ASSERT_GT(rss_start, 0u) << "/proc/self/statm unreadable";
  size_t rss_full = 0, rss_freed = 0, rss_trimmed = 0;
  int trim_result = -1;
  const size_t total = AllocateFreeAcrossThreads(&rss_full, [&] {
    rss_freed = ResidentBytes();
    trim_result = malloc_trim(0);
    rss_trimmed = ResidentBytes();
  });
  printf("allocated %.1f MiB; resident: start %.1f, full %.1f, all freed "
         "%.1f, after malloc_trim %.1f MiB\n",
         ToMiB(total), ToMiB(rss_start), ToMiB(rss_full), ToMiB(rss_freed),
         ToMiB(rss_trimmed));
  // The memory was really resident (every page written)...
  EXPECT_GE(rss_full, rss_start + total * 9 / 10);
  // ...and malloc_trim gave back at least half of it.
  EXPECT_EQ(trim_result, 1) << "malloc_trim reported nothing released";
  EXPECT_LE(rss_trimmed + total / 2, rss_full)
      << "resident set only dropped from " << ToMiB(rss_full) << " to "
      << ToMiB(rss_trimmed) << " MiB";

  // Allocation works afterwards, reusing the released memory.
  std::vector<Block> again = AllocateMix(99);
  for (const Block& b : again) {
    EXPECT_NE(b.p[0], 0);
    free(b.p);
  }
  malloc_trim(0);
  const size_t rss_end = ResidentBytes();
  printf("after a second round and malloc_trim: %.1f MiB\n", ToMiB(rss_end));
  EXPECT_LE(rss_end + total / 2, rss_full);
}

// malloc_trim(0) returns *all* free memory (cidmalloc.h): with every
// object of every size class freed, nothing but metadata and a few pages
// may stay resident.
//
// Known bug KNOWN_BUG_TRIM_KEEPS_EMPTY_SPANS (README.md of this package):
// each central list keeps one empty span resident even through
// malloc_trim, up to 17 MiB per node (one span of every class).
//
// Runs in a fresh subprocess, so that no earlier test's memory is in the
// starting resident set.
TEST(TrimRelease, TrimReleasesEmptySpansOfEveryClass) {
  if (Env("EXPECT_AUTO_RELEASE") == "1") {
    GTEST_SKIP() << "this target checks release without malloc_trim";
  }
  if (!InSubprocess()) {
    KnownBug bug;
    bug.env = "KNOWN_BUG_TRIM_KEEPS_EMPTY_SPANS";
    bug.exit_status = kKnownBugExit;
    bug.summary = "malloc_trim keeps an empty span of every class resident";
    RunThisTestInSubprocess(bug);
    return;
  }
  malloc_trim(0);
  const size_t rss_start = ResidentBytes();
  std::vector<void*> blocks;
  // Three spans' worth of every class (64 KiB .. 2 MiB spans).
  for (size_t size = 16; size <= 64 * kKiB; size += size < 1024 ? 16 : size / 16) {
    const size_t count = std::max<size_t>(3 * 2 * kMiB / size / 8, 24);
    for (size_t i = 0; i < count; ++i) {
      char* p = static_cast<char*>(malloc(size));
      ASSERT_NE(p, nullptr);
      memset(p, 1, size);
      blocks.push_back(p);
    }
  }
  const size_t rss_full = ResidentBytes();
  for (void* p : blocks) free(p);
  blocks = std::vector<void*>();
  malloc_trim(0);
  const size_t rss_trimmed = ResidentBytes();
  const size_t kept = rss_trimmed > rss_start ? rss_trimmed - rss_start : 0;
  printf("resident: start %.1f, full %.1f, after free and malloc_trim %.1f MiB "
         "(%.1f MiB kept)\n",
         ToMiB(rss_start), ToMiB(rss_full), ToMiB(rss_trimmed), ToMiB(kept));
  constexpr size_t kAllowed = 4 * kMiB;
  if (Env("KNOWN_BUG_TRIM_KEEPS_EMPTY_SPANS") == "1" && kept > kAllowed) {
    ExitWithKnownBug(std::to_string(kept >> 10) +
                     " KiB stay resident after malloc_trim");
  }
  EXPECT_LE(kept, kAllowed) << "free memory stayed resident after malloc_trim";
}

TEST(TrimRelease, ReleaseWithoutTrim) {
  const std::string expect = Env("EXPECT_AUTO_RELEASE");
  if (expect != "1" && expect != "after_delay" && expect != "kept") {
    GTEST_SKIP() << "needs a target with a small CIDMALLOC_RELEASE_BYTES";
  }
  malloc_trim(0);
  const size_t rss_start = ResidentBytes();
  ASSERT_GT(rss_start, 0u) << "/proc/self/statm unreadable";
  size_t rss_full = 0, rss_freed = 0;
  const size_t total = AllocateFreeAcrossThreads(
      &rss_full, [&] { rss_freed = ResidentBytes(); });
  printf("allocated %.1f MiB; resident: start %.1f, full %.1f, all freed "
         "(no malloc_trim) %.1f MiB\n",
         ToMiB(total), ToMiB(rss_start), ToMiB(rss_full), ToMiB(rss_freed));
  EXPECT_GE(rss_full, rss_start + total * 9 / 10);
  if (expect == "kept") {
    // Own mappings (15 % of the bytes) are unmapped at once; the rest is
    // free memory the delay keeps.
    EXPECT_GE(rss_freed + total / 4, rss_full)
        << "resident set dropped from " << ToMiB(rss_full) << " to "
        << ToMiB(rss_freed) << " MiB within the release delay";
    malloc_trim(0);
    rss_freed = ResidentBytes();
    printf("after malloc_trim %.1f MiB\n", ToMiB(rss_freed));
  } else if (expect == "after_delay") {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // A page run: its free checks the delay of its own heap.  (Through a
    // volatile, or GCC drops the pair.)  That heap is the arena of this
    // thread's ID (page_heap.h), which need not be arena 0, where the
    // spans' pages are; so what this free gives back is printed, not
    // asserted (1 run in 12 at 7db0fac kept 171 MiB of 222 here), and the
    // 40 % below is asked after the idle phase, whose span frees reach
    // arena 0.  page_heap_release_test checks the delay within one heap.
    void* volatile run = malloc(512 * kKiB);
    ASSERT_NE(run, nullptr);
    free(run);
    rss_freed = ResidentBytes();
    printf("a second later, after freeing a page run: %.1f MiB\n",
           ToMiB(rss_freed));
    // The threads are gone, but the caches of their IDs are not, and their
    // objects pin spans.  After CIDMALLOC_CACHE_IDLE_MS (100 ms here), this
    // thread's slow paths drain those idle caches (or, for the ID it runs
    // on, empty the classes it does not use) and the idle central lists
    // give their spans back; then, after the release delay, a page run's
    // free returns that memory to the OS.  (How many caches were idle
    // depends on which IDs this thread ran on: idle_cache_test counts them.)
    for (int round = 0; round < 4; ++round) {
      RunSlowPaths();
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    void* volatile run2 = malloc(512 * kKiB);
    ASSERT_NE(run2, nullptr);
    free(run2);
    const size_t rss_idle = ResidentBytes();
    const cidmalloc_stats st = Stats();
    printf("after idle periods with slow paths: %.1f MiB (%llu idle caches "
           "drained, %.2f MiB cached)\n",
           ToMiB(rss_idle), st.idle_drains, ToMiB(st.cached_bytes));
    // Most of it, as malloc_trim would (7 MiB left in the trim targets;
    // 9.5-9.9 MiB seen here, against 110-120 without the idle drains).
    EXPECT_LE(rss_idle, rss_start + total / 8)
        << "resident: start " << ToMiB(rss_start) << ", after the idle "
        << "periods " << ToMiB(rss_idle) << " MiB";
    rss_freed = rss_idle;  // For the 40 % below.
  }
  // At least 40 % of what was allocated goes back.  Without malloc_trim
  // the objects cached in the parked threads' slabs keep their spans
  // resident, and how many depends on which IDs the threads ran on: 16 runs
  // of the "auto" variant kept 107.6-120.6 MiB of 221.8 (drops of 48-55 %
  // of the 209.5 MiB allocated; 2c7224b and 9e95ee6 alike), so the half
  // this test asked for failed in 6 of those runs.  With no release at all
  // the drop is the own mappings' 15 % (checked: CIDMALLOC_RELEASE_BYTES=64G
  // fails here).
  EXPECT_LE(rss_freed + total * 2 / 5, rss_full)
      << "resident set only dropped from " << ToMiB(rss_full) << " to "
      << ToMiB(rss_freed) << " MiB without malloc_trim";
  // Allocation still works.
  std::vector<Block> again = AllocateMix(7);
  for (const Block& b : again) free(b.p);
}

}  // namespace
