// tests/allocator_stress/idle_cache_test.cc: the caches of IDs that went
// idle go back to the central lists without malloc_trim
// (CIDMALLOC_CACHE_IDLE_MS, allocator/front_end/front_end.h).
//
// kThreads threads each allocate and free a mix of small objects, which
// leaves their IDs' caches full, and then sleep.  The main thread, alone
// and busy, then runs slow paths (a class nobody used misses every time)
// for several idle periods.  Where two cpus are allowed, the threads run
// on the second and main on the first, so that the threads' slab is not
// main's: cpu mode's slabs are the cpus', and cid mode's cids stay with
// the cpus that used them while the process has no more threads running
// than cpus.
//   EXPECT_IDLE_DRAIN=1   (CIDMALLOC_CACHE_IDLE_MS=50): the threads'
//     slabs are drained as idle (each thread's in none mode; with the
//     threads on their own cpu, theirs in cid and cpu modes); what stays
//     cached is at most 1 MiB, main's own 40 KiB objects and little else
//     (its slab empties the classes it does not use), and the spans the
//     drained objects emptied go back to the OS (CIDMALLOC_RELEASE_BYTES=0,
//     no delay): the resident set ends within 4 MiB of where it started.
//     Drains are counted from before the threads start: a thread that
//     finishes early can be drained while the others still fill theirs.
//   EXPECT_IDLE_DRAIN=0   (CIDMALLOC_CACHE_IDLE_MS=0): nothing is drained,
//     and the cached bytes and the spans they pin stay.
// MAIN_SLOW_PATHS=large: main's slow paths are page runs of 600 KiB (the
// page heap's allocation and free, which count no slab event) instead of
// small objects; they must run the idle scan too.
// No timing is asserted: the main thread keeps going until the drain is
// seen and three periods more (at most 10 s), or for 20 periods when none
// is expected.
#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kThreads = 4;
constexpr int kObjects = 20000;  // Per thread, 16 B - 1 KiB: ~10 MiB.


TEST(IdleCache, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

// Main's slow paths in the loop below: small objects (RunSlowPaths), or a
// page run from the page heap, written and freed.
void RunMainSlowPaths() {
  if (Env("MAIN_SLOW_PATHS") != "large") return RunSlowPaths();
  constexpr size_t kRun = 600 * kKiB;  // Above the run stacks' 256 KiB.
  char* p = static_cast<char*>(malloc(kRun));
  ASSERT_NE(p, nullptr);
  memset(p, 0x6b, kRun);
  free(p);
}

TEST(IdleCache, IdleIdsCachesGoBack) {
  const std::string expect = Env("EXPECT_IDLE_DRAIN");
  ASSERT_TRUE(expect == "0" || expect == "1")
      << "EXPECT_IDLE_DRAIN must be set by the target";
  const long period_ms = atol(Env("CIDMALLOC_CACHE_IDLE_MS", "1000").c_str());
  malloc_trim(0);
  const size_t rss_start = ResidentBytes();
  ASSERT_GT(rss_start, 0u) << "/proc/self/statm unreadable";

  const uint64_t drains_start = Stats().idle_drains;
  const std::vector<int> cpus = AllowedCpus();
  const bool apart = cpus.size() >= 2 && PinToCpu(cpus[0]);
  Barrier filled(kThreads + 1), done(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // EXPECT: an ASSERT would return before the barriers and hang main.
      if (apart) {
        EXPECT_TRUE(PinToCpu(cpus[1]));
      }
      AllocateAndFreeSmall(0x1d1e0000 + t, kObjects);
      filled.Wait();
      done.Wait();  // Parked while main measures.
    });
  }
  filled.Wait();
  // Main's own class at its steady state first, so that the rounds below
  // add nothing to the cached bytes.
  RunSlowPaths();
  const cidmalloc_stats before = Stats();
  const size_t rss_before = ResidentBytes();
  printf("mode %s: resident at the start %.1f MiB; after the threads: %u "
         "slabs, cached %.2f MiB, %llu idle drains, resident %.1f MiB\n",
         before.mode, ToMiB(rss_start), before.slabs,
         ToMiB(before.cached_bytes), before.idle_drains, ToMiB(rss_before));
  if (expect == "0") {
    // Each thread freed ~10 MiB of objects, and its ID's cache kept some
    // (about 650 KiB a slab).  (With drains on, some may be gone already.)
    EXPECT_GE(before.cached_bytes, 512 * kKiB);
  }

  // Main alone runs slow paths, a little more than a period apart.
  cidmalloc_stats after = Stats();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // With drains expected: until the first one, and three periods more, in
  // which main's own slab empties the classes it does not use (a sweep
  // once a period) and the central lists nobody refills from give their
  // spans back.
  int rounds_left = expect == "1" ? -1 : 20;
  while (rounds_left != 0) {
    RunMainSlowPaths();
    after = Stats();
    if (rounds_left < 0 && after.idle_drains > drains_start) {
      rounds_left = 3;
    }
    if (rounds_left > 0) --rounds_left;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(period_ms + 10));
  }
  const size_t rss_after = ResidentBytes();
  printf("after: cached %.2f MiB, %llu idle drains; resident %.1f MiB\n",
         ToMiB(after.cached_bytes), after.idle_drains, ToMiB(rss_after));
  if (expect == "1") {
    const uint64_t drains = after.idle_drains - drains_start;
    if (std::string(before.mode) == "none") {
      EXPECT_GE(drains, uint64_t{kThreads}) << "one per thread's soft ID";
    } else if (apart) {
      EXPECT_GE(drains, 1u) << "the threads' slab was not drained";
    }
    // What is left sits in the slab main keeps busy: its 40 KiB objects
    // (8 at most, 320 KiB) and a few of the classes gtest uses.
    EXPECT_LE(after.cached_bytes, kMiB)
        << "cached " << ToMiB(before.cached_bytes) << " -> "
        << ToMiB(after.cached_bytes) << " MiB";
    // The drained objects, and the idle central lists' transfer caches,
    // emptied their spans, which went back to the OS
    // (CIDMALLOC_RELEASE_BYTES=0): the resident set is back near where it
    // started, as malloc_trim would have left it.
    EXPECT_LE(rss_after, rss_start + 4 * kMiB)
        << "resident: start " << ToMiB(rss_start) << ", "
        << ToMiB(rss_before) << " -> " << ToMiB(rss_after) << " MiB";
  } else {
    EXPECT_EQ(after.idle_drains, drains_start);
    EXPECT_EQ(drains_start, 0u);
    // The threads' caches stay (main's slow paths may shrink a class or
    // two of its own slab: the sweeps that count events still run).
    EXPECT_GT(after.cached_bytes * 4, before.cached_bytes * 3)
        << "cached " << ToMiB(before.cached_bytes) << " -> "
        << ToMiB(after.cached_bytes) << " MiB";
    // And so do the spans they pin.
    EXPECT_GE(rss_after, rss_start + 8 * kMiB)
        << "resident: start " << ToMiB(rss_start) << ", "
        << ToMiB(rss_before) << " -> " << ToMiB(rss_after) << " MiB";
  }
  done.Wait();
  for (auto& t : threads) t.join();
}

}  // namespace
