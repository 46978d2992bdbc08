// tests/allocator_stress/slow_path_release_test.cc: without the background
// thread, the slow paths' idle scan returns the page heap's delayed free
// pages of every arena, not only a free into the arena that holds them.
//
// Two threads take page runs of 1 MiB at once (so that both arenas of
// their IDs may hold pages), write them and free them all, within the
// release delay, and exit.  Then the main thread, after the delay and an
// idle period, only allocates small objects: their refills are slow paths,
// but nothing goes back to the page heap, so no free can trigger a
// release.  The target sets CIDMALLOC_RELEASE_BYTES=1M,
// CIDMALLOC_RELEASE_DELAY_MS=200 and CIDMALLOC_CACHE_IDLE_MS=100.
#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kThreads = 2;
constexpr int kRunsPerThread = 48;
constexpr size_t kRunBytes = 1 * kMiB;

TEST(SlowPathRelease, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST(SlowPathRelease, IdleScanReleasesEveryArena) {
  const size_t rss_start = ResidentBytes();
  ASSERT_GT(rss_start, 0u) << "/proc/self/statm unreadable";
  Barrier taken(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<void*> runs;
      for (int i = 0; i < kRunsPerThread; ++i) {
        void* p = malloc(kRunBytes);
        ASSERT_NE(p, nullptr);
        memset(p, 0x5a, kRunBytes);
        runs.push_back(p);
      }
      taken.Wait();
      for (void* p : runs) free(p);
    });
  }
  for (std::thread& t : threads) t.join();
  const size_t rss_freed = ResidentBytes();
  const size_t total = size_t{kThreads} * kRunsPerThread * kRunBytes;
  // Within the delay, the freed runs stay resident.
  ASSERT_GE(rss_freed, rss_start + total / 2)
      << "released before the delay: the test shows nothing";

  // After the delay and more than an idle period, slow paths that give
  // nothing back: refills of a class this process has not used.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::vector<void*> small;
  for (int i = 0; i < 4000; ++i) {
    small.push_back(malloc(3000));
    ASSERT_NE(small.back(), nullptr);
  }
  const size_t rss_after = ResidentBytes();
  printf("resident: start %.1f MiB, runs freed %.1f, after the slow paths "
         "%.1f (%.1f MiB of runs)\n",
         ToMiB(rss_start), ToMiB(rss_freed), ToMiB(rss_after), ToMiB(total));
  // What the small objects take (12 MiB) and the threshold aside, the runs'
  // memory went back.
  EXPECT_LE(rss_after, rss_start + total / 4)
      << "the delayed pages stayed resident: start " << ToMiB(rss_start)
      << ", after " << ToMiB(rss_after) << " MiB";
  for (void* p : small) free(p);
}

}  // namespace
