// tests/allocator_stress/background_thread_test.cc: the background thread
// (CIDMALLOC_BACKGROUND_THREAD, allocator/api/background.h).
//
// The targets set CIDMALLOC_CACHE_IDLE_MS=50 (a tick of 25 ms),
// CIDMALLOC_RELEASE_DELAY_MS=500, CIDMALLOC_RELEASE_BYTES=0 and
// EXPECT_BACKGROUND:
//   running  CIDMALLOC_BACKGROUND_THREAD=on: one thread called
//            "cidmalloc-bg" starts one tick after start-up, from a slow
//            path, with the program's signals blocked; once the program's
//            threads have freed ~80 MiB and nobody calls the allocator any
//            more, their caches are drained and the free pages go back to
//            the OS (the resident set ends within 8 MiB of where it
//            started); a fork child starts a thread of its own.
//   off      the knob off: no such thread, and in the same quiet process
//            the caches keep their objects (no slow path runs the idle
//            scan).
// While the process is quiet the main thread only sleeps and reads
// /proc/self/statm and cidmalloc_get_stats, neither of which allocates.
// No timing is asserted: the waits poll with deadlines of seconds.
#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kThreads = 4;
constexpr int kObjects = 40000;  // Per thread, 16 B - 1 KiB: ~20 MiB.

bool Expected() {
  const std::string expect = Env("EXPECT_BACKGROUND");
  EXPECT_TRUE(expect == "running" || expect == "off")
      << "EXPECT_BACKGROUND must be set by the target";
  return expect == "running";
}

// A small file of /proc as a string ("" if unreadable).
std::string ReadProc(const std::string& path) {
  char buf[4096];
  const size_t n = ReadSmallFile(path.c_str(), buf, sizeof buf);
  return std::string(buf, n);
}

// The process's thread count, from /proc/self/status, read without
// allocating (a fork child checks it before anything could start its
// background thread); 0 if unreadable.
int ThreadCount() {
  char buf[4096];
  if (ReadSmallFile("/proc/self/status", buf, sizeof buf) == 0) return 0;
  const char* at = strstr(buf, "\nThreads:");
  return at != nullptr ? atoi(at + strlen("\nThreads:")) : 0;
}

// The process's threads called "cidmalloc-bg" (their /proc task paths).
std::vector<std::string> BackgroundTasks() {
  std::vector<std::string> found;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return found;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    if (ReadProc(task + "/comm") == "cidmalloc-bg\n") found.push_back(task);
  }
  closedir(d);
  return found;
}

// Calls done() every `step` until it returns true or `limit` has passed;
// returns its last result.
template <typename Done>
bool PollUntil(std::chrono::milliseconds step, std::chrono::seconds limit,
               Done done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(step);
  }
}

// BackgroundTasks() once it has `n` entries, or after 5 s: the thread
// names itself when it first runs, which may come after its creator
// reported it running.
std::vector<std::string> WaitForBackgroundTasks(size_t n) {
  std::vector<std::string> tasks;
  PollUntil(std::chrono::milliseconds(10), std::chrono::seconds(5), [&] {
    tasks = BackgroundTasks();
    return tasks.size() == n;
  });
  return tasks;
}

// Slow paths, a little more than a tick apart, until the state is no longer
// "pending" (the thread starts at the first slow path a tick after
// start-up), at most 5 s.  Returns the state.
std::string WarmUp() {
  std::string state;
  PollUntil(std::chrono::milliseconds(30), std::chrono::seconds(5), [&] {
    RunSlowPaths();
    state = Stats().background_thread;
    return state != "pending" && state != "starting";
  });
  return state;
}

// Committed free bytes of the page heap (free and not returned to the OS).
size_t CommittedFree(const cidmalloc_stats& s) {
  size_t total = 0;
  for (unsigned n = 0; n < s.num_nodes; ++n) {
    total += s.node_free[n] - s.node_released[n];
  }
  return total;
}

TEST(BackgroundThread, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST(BackgroundThread, StartsOnceWithSignalsBlocked) {
  const bool expected = Expected();
  const std::string state = WarmUp();
  const std::vector<std::string> tasks =
      WaitForBackgroundTasks(expected ? 1 : 0);
  if (!expected) {
    EXPECT_EQ(state, "off");
    EXPECT_TRUE(tasks.empty());
    return;
  }
  ASSERT_EQ(state, "running");
  ASSERT_EQ(tasks.size(), 1u) << "exactly one background thread";
  // SigBlk: a hex mask, bit n-1 for signal n.  The program's signals are
  // blocked (glibc keeps its own two, SIGCANCEL and SIGSETXID, open).
  const std::string status = ReadProc(tasks[0] + "/status");
  const size_t at = status.find("SigBlk:\t");
  ASSERT_NE(at, std::string::npos) << status;
  const unsigned long long blocked =
      strtoull(status.c_str() + at + 8, nullptr, 16);
  for (const int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM,
                        SIGPIPE, SIGHUP}) {
    EXPECT_NE(blocked & (1ull << (sig - 1)), 0u)
        << "signal " << sig << " not blocked; SigBlk " << std::hex << blocked;
  }
  // Many slow paths later, still one.
  for (int i = 0; i < 10; ++i) RunSlowPaths();
  EXPECT_EQ(BackgroundTasks().size(), 1u);
  // It ticks (within 10 s: a tick is 25 ms).
  const uint64_t ticks = Stats().background_ticks;
  PollUntil(std::chrono::milliseconds(10), std::chrono::seconds(10),
            [&] { return Stats().background_ticks != ticks; });
  EXPECT_GT(Stats().background_ticks, ticks) << "the thread does not tick";
}

TEST(BackgroundThread, QuietProcessGivesMemoryBack) {
  const bool expected = Expected();
  ASSERT_EQ(WarmUp(), expected ? "running" : "off");
  malloc_trim(0);
  const size_t rss_start = ResidentBytes();
  ASSERT_GT(rss_start, 0u) << "/proc/self/statm unreadable";
  const uint64_t drains_start = Stats().idle_drains;

  Barrier done(kThreads + 1), parked(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AllocateAndFreeSmall(0xb6000000 + t, kObjects);
      done.Wait();
      parked.Wait();  // Parked, holding their IDs, while main waits.
    });
  }
  done.Wait();
  // From here until `parked`, nobody calls the allocator (a failing
  // EXPECT below allocates, after the wait).
  const cidmalloc_stats before = Stats();
  const size_t rss_before = ResidentBytes();
  cidmalloc_stats after = before;
  size_t rss_after = rss_before;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // Running: until the caches and the committed free pages are gone, and
  // two ticks more.  Off: 20 idle periods (1 s).
  int rounds_left = expected ? -1 : 20;
  while (rounds_left != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = Stats();
    rss_after = ResidentBytes();
    if (rounds_left < 0 && after.cached_bytes <= 64 * kKiB &&
        CommittedFree(after) <= 4 * kMiB) {
      rounds_left = 2;
    }
    if (rounds_left > 0) --rounds_left;
  }
  parked.Wait();
  for (std::thread& t : threads) t.join();
  printf("before: cached %.2f MiB, committed free %.2f MiB, resident %.1f "
         "MiB (%.1f at the start); after: cached %.2f MiB, committed free "
         "%.2f MiB, resident %.1f MiB, idle drains %llu, ticks %llu\n",
         ToMiB(before.cached_bytes), ToMiB(CommittedFree(before)),
         ToMiB(rss_before), ToMiB(rss_start), ToMiB(after.cached_bytes),
         ToMiB(CommittedFree(after)), ToMiB(rss_after),
         after.idle_drains - drains_start, after.background_ticks);
  // What the quiet window starts with: the threads' caches hold objects,
  // and the freed memory is still resident (whatever the slow paths of
  // the threads already gave back while they ran).
  EXPECT_GE(before.cached_bytes, 512 * kKiB);
  EXPECT_GE(rss_before, rss_start + 24 * kMiB);
  if (expected) {
    // Drained while nobody called the allocator: every cache is empty,
    // the spans went back, and the page heap returned the pages.
    EXPECT_GT(after.idle_drains, before.idle_drains);
    EXPECT_LE(after.cached_bytes, 64 * kKiB);
    EXPECT_LE(CommittedFree(after), 4 * kMiB);
    EXPECT_LE(rss_after, rss_start + 8 * kMiB)
        << "resident: start " << ToMiB(rss_start) << ", "
        << ToMiB(rss_before) << " -> " << ToMiB(rss_after) << " MiB";
  } else {
    // Nothing ran the idle scan while the process was quiet (the slow
    // paths of the threads may have, before): the threads' caches kept
    // their objects.
    EXPECT_EQ(after.idle_drains, before.idle_drains);
    EXPECT_GE(after.cached_bytes, 512 * kKiB);
    EXPECT_EQ(after.cached_bytes, before.cached_bytes);
  }
}

// A thread whose operations all hit its cache counts no slow-path events,
// but its stacks' tops keep changing: the idle scan (here the background
// thread's, every period) must not take its cache for idle.  Before the
// tops were compared, such a slab was drained every one or two periods
// (the drain's refills then counted as events, and the next period was
// idle again): 6-8 drains in the 20 periods below, measured.
TEST(BackgroundThread, BusyCacheThatOnlyHitsIsNotDrained) {
  const bool expected = Expected();
  ASSERT_EQ(WarmUp(), expected ? "running" : "off");
  if (!expected) return;  // No scan runs while main sleeps.
  static constexpr int kRing = 64;
  const long period_ms = atol(Env("CIDMALLOC_CACHE_IDLE_MS").c_str());
  ASSERT_GT(period_ms, 0);
  Barrier warm(2), stop_seen(2);
  std::atomic<bool> stop{false};
  bool pin_ok = false;  // Written by the worker before warm.Wait().
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  std::thread worker([&] {
    // Pinned: a thread that moves to another cpu may get another cid (and
    // in cpu mode another ID), leaving its former slab's objects to no one,
    // which the scan is right to drain.
    pin_ok = PinToCpu(cpus[0]);
    // Sizes 16..256 B, fixed per slot: each step allocates the slot's new
    // object and then frees its old one, of the same class, so every
    // stack keeps its count (no misses, no full stacks) and its top moves
    // to the object just freed.
    void* ring[kRing];
    for (int j = 0; j < kRing; ++j) ring[j] = malloc(16 + 16 * (j % 16));
    const auto step = [&ring](int j) {
      void* p = malloc(16 + 16 * (j % 16));
      static_cast<char*>(p)[0] = static_cast<char>(j);
      free(ring[j]);
      ring[j] = p;
    };
    // Slots in a random order: in turn, the stacks' tops would come back
    // to the same state every kRing steps, and an idle scan that sampled
    // the same state at both ends of a period (1 in kRing) would take the
    // busy slab for idle.
    uint32_t x = 2463534242u;
    const auto next_slot = [&x] {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      return static_cast<int>(x % kRing);
    };
    for (int i = 0; i < 200000; ++i) step(next_slot());  // Steady state.
    warm.Wait();
    while (!stop.load(std::memory_order_relaxed)) step(next_slot());
    stop_seen.Wait();
    for (void* p : ring) free(p);
  });
  warm.Wait();
  // From here main only sleeps and reads the statistics.  The other slabs
  // that hold objects (main's own, from WarmUp) go idle and are drained in
  // the first periods; the count starts after them.
  std::this_thread::sleep_for(std::chrono::milliseconds(4 * period_ms));
  const uint64_t drains_before = Stats().idle_drains;
  std::this_thread::sleep_for(std::chrono::milliseconds(20 * period_ms));
  const cidmalloc_stats during = Stats();
  stop.store(true);
  stop_seen.Wait();
  worker.join();
  printf("idle drains while the worker hit its cache for 20 periods: %llu "
         "(%llu ticks)\n",
         during.idle_drains - drains_before, during.background_ticks);
  ASSERT_TRUE(pin_ok);
  // 0 seen in 22 runs, 16 of them beside two busy loops on the machine's
  // two cpus (a worker that a loaded machine did not run for a whole
  // period would be idle for real).  Unpinned, under that load: 1-5, 4
  // runs of 16 above the bound; with the slots in turn as well, 0-2
  // without load.
  EXPECT_LE(during.idle_drains - drains_before, 3u);
}

TEST(BackgroundThread, ForkChildStartsItsOwn) {
  const bool expected = Expected();
  ASSERT_EQ(WarmUp(), expected ? "running" : "off");
  const std::string failure = RunInChild(20, [&](ChildReport& r) {
    // Before anything allocates: a malloc a tick after the fork could
    // start the child's own thread.
    const int threads = ThreadCount();
    const char* first = Stats().background_thread;
    r.Check(threads == 1, "the child has %d threads right after fork",
            threads);
    r.Check(strcmp(first, expected ? "pending" : "off") == 0,
            "child's state right after fork: %s", first);
    const std::string state = WarmUp();
    r.Check(state == (expected ? "running" : "off"),
            "child's state after its slow paths: %s", state.c_str());
    const size_t tasks = WaitForBackgroundTasks(expected ? 1 : 0).size();
    r.Check(tasks == (expected ? 1u : 0u),
            "the child has %zu background threads", tasks);
  });
  EXPECT_EQ(failure, "");
  // The parent's thread is still there.
  EXPECT_EQ(BackgroundTasks().size(), expected ? 1u : 0u);
}

}  // namespace
