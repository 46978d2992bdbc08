// tests/allocator_stress/lifecycle_fork_test.cc: fork while other threads
// allocate (part of the lifecycle_*_test binaries; see lifecycle_test.cc).

#include "tests/allocator_stress/lifecycle.h"

namespace {

using namespace cidmalloc_lifecycle;  // NOLINT

// ---- fork while other threads allocate -------------------------------------------

// Background threads allocating, freeing and passing objects to each other
// through a mutex-protected list; they run until stop is set.
class Churn {
 public:
  explicit Churn(int threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] { Body(t); });
    }
  }
  ~Churn() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
    threads_.clear();
    for (const Block& b : shared_) {
      EXPECT_TRUE(Intact(b.p, b.size, b.tag));
      free(b.p);
    }
    shared_.clear();
    EXPECT_EQ(bad_.load(), 0);
  }
  // Takes up to n objects the churn threads allocated (the caller owns and
  // frees them).
  std::vector<Block> Take(size_t n) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<Block> out;
    while (out.size() < n && !shared_.empty()) {
      out.push_back(shared_.back());
      shared_.pop_back();
    }
    return out;
  }
  long ops() const { return ops_.load(); }

 private:
  void Body(int t) {
    Rng rng(Mix(0xf0c, t));
    std::vector<Block> mine;
    while (!stop_.load(std::memory_order_relaxed)) {
      for (int i = 0; i < 64; ++i) {
        size_t size = SizeFor(rng.Below(14));
        if (size > 4 * kKiB && !rng.Chance(1, 16)) size = 200;
        if (size > kMiB) size = 70000;
        const uint64_t tag = rng.Next();
        void* p = malloc(size);
        if (p == nullptr) {
          bad_.fetch_add(1);
          continue;
        }
        Fill(p, size, tag);
        mine.push_back(Block{p, size, tag});
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        for (int i = 0; i < 16 && !mine.empty(); ++i) {
          shared_.push_back(mine.back());
          mine.pop_back();
        }
        for (int i = 0; i < 24 && shared_.size() > 256; ++i) {
          mine.push_back(shared_.front());
          shared_.erase(shared_.begin());
        }
      }
      while (mine.size() > 32) {
        const Block b = mine.back();
        mine.pop_back();
        if (!Intact(b.p, b.size, b.tag)) bad_.fetch_add(1);
        free(b.p);
      }
      ops_.fetch_add(1, std::memory_order_relaxed);
      usleep(100);  // Leave cpu time to the fork children.
    }
    for (const Block& b : mine) {
      if (!Intact(b.p, b.size, b.tag)) bad_.fetch_add(1);
      free(b.p);
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> bad_{0};
  std::atomic<long> ops_{0};
  std::mutex mu_;
  std::vector<Block> shared_;
  std::vector<std::thread> threads_;
};

// What a fork child does; runs under alarm() and reports through `r`.
// Whether the child forks a grandchild of its own.
enum class Grandchild : uint8_t { kNone, kFork };
void ChildWork(ChildReport& r, std::vector<Block>& before_fork,
               Grandchild grandchild) {
  // Free memory allocated before the fork, by this thread and by threads
  // that do not exist in the child.
  for (const Block& b : before_fork) {
    r.Check(Intact(b.p, b.size, b.tag), "pre-fork block %p corrupt", b.p);
    free(b.p);
  }
  before_fork.clear();
  // Allocate on the forking thread.
  std::vector<Block> mine;
  for (int i = 0; i < 600; ++i) {
    const size_t size = SizeFor(i) > kMiB && i > 100 ? 48 : SizeFor(i);
    void* p = malloc(size);
    r.Check(p != nullptr || size == 0, "malloc(%zu) failed in child", size);
    if (p == nullptr) continue;
    Fill(p, size, i);
    mine.push_back(Block{p, size, static_cast<uint64_t>(i)});
  }
  // Threads in the child, exchanging memory with the main thread.
  std::atomic<int> bad{0};
  std::vector<std::vector<Block>> theirs(4);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = t; i < static_cast<int>(mine.size()); i += 8) {
        if (!Intact(mine[i].p, mine[i].size, mine[i].tag)) bad.fetch_add(1);
        free(mine[i].p);
        mine[i].p = nullptr;
      }
      for (int i = 0; i < 1000; ++i) {
        const size_t size = SizeFor(i + t) > kMiB ? 64 : SizeFor(i + t);
        void* p = malloc(size);
        if (p == nullptr) {
          bad.fetch_add(1);
          continue;
        }
        Fill(p, size, i);
        theirs[t].push_back(Block{p, size, static_cast<uint64_t>(i)});
        if (i % 3 == 0) {
          const Block b = theirs[t].back();
          theirs[t].pop_back();
          free(b.p);
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  r.Check(bad.load() == 0, "child threads found %d bad blocks", bad.load());
  std::vector<Block> live;
  for (const Block& b : mine) {
    if (b.p != nullptr) live.push_back(b);
  }
  for (auto& v : theirs) live.insert(live.end(), v.begin(), v.end());
  r.Check(static_cast<bool>(Disjoint(live)), "child blocks overlap");
  if (grandchild == Grandchild::kFork) {
    const std::string g = RunInChild(20, [&](ChildReport& gr) {
      ChildWork(gr, live, Grandchild::kNone);
      live.clear();
    });
    r.Check(g.empty(), "grandchild: %s", g.c_str());
  }
  for (const Block& b : live) {
    r.Check(Intact(b.p, b.size, b.tag), "child block %p corrupt", b.p);
    free(b.p);
  }
  malloc_trim(0);
  void* big = malloc(5 * kMiB);
  r.Check(big != nullptr, "5 MiB malloc failed in child");
  free(big);
}

// The fork test runs in a subprocess of its own (RunTestInSubprocess): a
// fork() that never returns in the parent (fork handlers deadlocked) must
// fail the test, not hang the suite.  The subprocess's watchdog tells where
// it was stuck through its exit status.
constexpr int kStuckInFork = 3;
constexpr int kStuckElsewhere = 4;
constexpr int kForkTestTimeoutSeconds = 25;
// CIDMALLOC_TEST_FORKS=N (1 to kMaxForks; default kMaxForks): how many of
// ForkWhileOtherThreadsAllocate's forks run.  Under qemu's TCG each one
// took about a minute (tests/vm's arm64_old_kernel: 395 s for six, most of
// its scenario), where the first two already cover both kinds of child
// (with a grandchild, and without).
constexpr int kMaxForks = 6;
int Forks() {
  return static_cast<int>(
      EnvInRange("CIDMALLOC_TEST_FORKS", 1, kMaxForks, kMaxForks));
}
std::atomic<bool> g_in_fork{false};

void ForkWatchdog(int) {
  static const char kInFork[] =
      "watchdog: still inside fork() in the parent: the fork handlers "
      "deadlocked\n";
  static const char kElsewhere[] = "watchdog: fork test timed out\n";
  const bool in_fork = g_in_fork.load();
  const ssize_t unused = in_fork ? write(2, kInFork, sizeof kInFork - 1)
                                 : write(2, kElsewhere, sizeof kElsewhere - 1);
  (void)unused;
  _exit(in_fork ? kStuckInFork : kStuckElsewhere);
}

// fork() used to deadlock in the parent here: the library initialised twice
// and registered its rseq fork handlers twice (fixed by 283d5c7); the
// watchdog reports such a hang as kStuckInFork.
TEST(Lifecycle, ForkWhileOtherThreadsAllocate) {
  if (!InSubprocess()) {
    KnownBug hang;
    hang.exit_status = kStuckInFork;
    hang.summary = "fork() deadlocked in the parent's fork handlers";
    RunThisTestInSubprocess(hang);
    return;
  }
  signal(SIGALRM, ForkWatchdog);
  alarm(kForkTestTimeoutSeconds * TimeoutScale());
  const int forks = Forks();
  Churn churn(4);
  for (int i = 0; i < forks; ++i) {
    // Let the churn run a little between forks.
    const long ops = churn.ops();
    while (churn.ops() < ops + 20) std::this_thread::yield();
    std::vector<Block> before_fork = churn.Take(64);
    for (int j = 0; j < 64; ++j) {
      const size_t size = SizeFor(j + i);
      void* p = malloc(size);
      ASSERT_TRUE(p != nullptr || size == 0);
      Fill(p, size, j);
      before_fork.push_back(Block{p, size, static_cast<uint64_t>(j)});
    }
    const std::string result = RunInChild(
        20,
        [&](ChildReport& r) {
          ChildWork(r, before_fork,
                    i % 4 == 0 ? Grandchild::kFork : Grandchild::kNone);
        },
        &g_in_fork);
    EXPECT_EQ(result, "") << "fork " << i;
    // The parent still owns the pre-fork blocks.
    for (const Block& b : before_fork) {
      EXPECT_TRUE(Intact(b.p, b.size, b.tag));
      free(b.p);
    }
  }
  churn.Stop();
  alarm(0);
}

}  // namespace
