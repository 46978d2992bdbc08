// tests/allocator_stress/background_start_test.cc: the background thread
// (CIDMALLOC_BACKGROUND_THREAD=on) starts early once the heap is large.
//
// The target sets CIDMALLOC_CACHE_IDLE_MS and CIDMALLOC_RELEASE_DELAY_MS
// to 20 s (a tick of 10 s: the start one tick after start-up cannot come
// during this test) and CIDMALLOC_RELEASE_BYTES=16M.  A process that
// allocates much in its first tick, then only frees or sleeps, used to run
// no slow path after the tick and so never had a thread to give its memory
// back (a reviewer's 500 MB burst stayed resident for good); now the first
// allocation slow path after the heap has mapped more than the release
// threshold starts the thread.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <string>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

TEST(BackgroundStart, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST(BackgroundStart, StartsOnceTheHeapHasMappedMoreThanTheThreshold) {
  const auto start = std::chrono::steady_clock::now();
  // gtest's and this test's allocations so far map a few MiB at most.
  ASSERT_STREQ(Stats().background_thread, "pending");
  // 64 MiB of 1000-byte objects, each written: refills, and new chunks.
  constexpr int kObjects = 64 << 10;
  std::vector<void*> objects;
  objects.reserve(kObjects);
  for (int i = 0; i < kObjects; ++i) {
    objects.push_back(malloc(1000));
    ASSERT_NE(objects.back(), nullptr);
    memset(objects.back(), i, 1000);
  }
  const std::string state = Stats().background_thread;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (void* p : objects) free(p);
  if (seconds >= 5) {
    GTEST_SKIP() << "took " << seconds << " s, too close to the 10 s tick "
                 << "to tell an early start from the ordinary one";
  }
  EXPECT_EQ(state, "running") << "after mapping 64 MiB in " << seconds
                              << " s, with a release threshold of 16 MiB";
}

}  // namespace
