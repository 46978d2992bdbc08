// tests/allocator_stress/lifecycle_test.cc: the allocator across thread
// and process lifetimes.
//
//   - The very first call into the allocator on a brand-new thread (many
//     threads, each doing exactly one operation, all alive at once): malloc,
//     calloc, realloc(NULL), memalign, operator new, and free of a pointer
//     another thread allocated.  Results must be distinct live blocks.
//   - Thread-exit destructors allocate and free: pthread_key destructors
//     (re-armed for several destructor rounds) and C++ thread_local
//     destructors free what the thread allocated earlier and allocate new
//     memory, part of which outlives the thread.  In none mode the soft IDs
//     of those threads must still be recycled (the slab count stays
//     bounded).
//   - Threads allocate and exit; other threads verify and free the memory
//     later.
//   - none mode: a thread's cached memory goes back when it exits
//     (cidmalloc_get_stats().cached_bytes drops to where it was).
//   - fork while other threads allocate: the child must not deadlock
//     (alarm), frees memory allocated before the fork (by itself and by the
//     other threads), allocates, starts threads that allocate, forks a
//     grandchild; the parent goes on; repeated in a loop.
//
// Built for cid, own, cpu and none mode (BUILD).  The fork case is in
// lifecycle_fork_test.cc, part of the same binaries.

#include "tests/allocator_stress/lifecycle.h"

namespace {

using namespace cidmalloc_lifecycle;  // NOLINT

TEST(Lifecycle, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

// ---- First allocation on a new thread -----------------------------------------

enum class FirstOp { kMalloc, kCalloc, kReallocNull, kMemalign, kNew, kFree };

TEST(Lifecycle, FirstOperationOnManyNewThreads) {
  constexpr int kWave = 16;
  constexpr int kWaves = 24;  // 384 threads.
  std::vector<void*> foreign;  // Allocated here, first freed by a new thread.
  for (int w = 0; w < kWaves; ++w) {
    std::vector<Block> got(kWave);
    std::vector<void*> to_free(kWave, nullptr);
    for (int t = 0; t < kWave; ++t) {
      to_free[t] = malloc(SizeFor(t + w));
      ASSERT_NE(to_free[t], nullptr);
      Fill(to_free[t], SizeFor(t + w), 77);
    }
    Barrier all_holding(kWave + 1), release(kWave + 1);
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kWave; ++t) {
      threads.emplace_back([&, t] {
        const FirstOp op = static_cast<FirstOp>((t + w) % 6);
        const size_t size = SizeFor(t * 7 + w);
        const uint64_t tag = static_cast<uint64_t>(w) << 8 | t;
        void* p = nullptr;
        switch (op) {
          case FirstOp::kMalloc:
            p = malloc(size);
            break;
          case FirstOp::kCalloc:
            p = calloc(1, size);
            if (p != nullptr) {
              for (size_t i = 0; i < size; ++i) {
                if (static_cast<unsigned char*>(p)[i] != 0) {
                  bad.fetch_add(1);
                  break;
                }
              }
            }
            break;
          case FirstOp::kReallocNull:
            p = realloc(nullptr, size);
            break;
          case FirstOp::kMemalign:
            p = memalign(256, size);
            if (reinterpret_cast<uintptr_t>(p) % 256 != 0) bad.fetch_add(1);
            break;
          case FirstOp::kNew:
            p = operator new(size);
            break;
          case FirstOp::kFree:
            // The thread's first call is a free of main's block.
            if (!Intact(to_free[t], SizeFor(t + w), 77)) bad.fetch_add(1);
            free(to_free[t]);
            to_free[t] = nullptr;
            p = malloc(size);
            break;
        }
        if (p == nullptr) {
          bad.fetch_add(1);
        } else {
          Fill(p, size, tag);
        }
        got[t] = Block{p, size, tag};
        all_holding.Wait();  // Every block of the wave is live now.
        release.Wait();
        if (p != nullptr && !Intact(p, size, tag)) bad.fetch_add(1);
        // Half the threads free their block; main frees the others after
        // the thread is gone.
        if (t % 2 == 0) {
          if (op == FirstOp::kNew) {
            operator delete(p);
          } else {
            free(p);
          }
          got[t].p = nullptr;
        }
      });
    }
    all_holding.Wait();
    std::vector<Block> live;
    for (const Block& b : got) {
      if (b.p != nullptr) live.push_back(b);
    }
    EXPECT_TRUE(Disjoint(live)) << "wave " << w;
    release.Wait();
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0) << "wave " << w;
    for (const Block& b : got) {
      if (b.p == nullptr) continue;
      EXPECT_TRUE(Intact(b.p, b.size, b.tag));
      free(b.p);
    }
    for (void* p : to_free) free(p);
  }
}

// ---- Allocation in thread-exit destructors -------------------------------------

std::mutex g_outlived_mu;
std::vector<Block> g_outlived;  // Allocated in destructors, freed by main.
std::atomic<int> g_key_dtor_runs{0};
std::atomic<int> g_tls_dtor_runs{0};
std::atomic<int> g_dtor_failures{0};

void Outlive(const Block& b) {
  std::lock_guard<std::mutex> l(g_outlived_mu);
  g_outlived.push_back(b);
}

// The pthread key's value: blocks the thread allocated while running, and
// how many more destructor rounds to re-arm for.
struct KeyState {
  std::vector<Block> blocks;
  int rearm = 0;
  uint64_t tag = 0;
};

pthread_key_t g_key;

void KeyDestructor(void* arg) {
  g_key_dtor_runs.fetch_add(1);
  KeyState* st = static_cast<KeyState*>(arg);
  for (const Block& b : st->blocks) {
    if (!Intact(b.p, b.size, b.tag)) g_dtor_failures.fetch_add(1);
    free(b.p);
  }
  st->blocks.clear();
  // New memory, in this destructor: some freed right here, one outlives
  // the thread, and some is kept for the next round.
  for (int i = 0; i < 8; ++i) {
    const size_t size = SizeFor(st->tag + i);
    void* p = malloc(size);
    if (p == nullptr) {
      g_dtor_failures.fetch_add(1);
      continue;
    }
    Fill(p, size, st->tag + i);
    if (i == 0) {
      Outlive(Block{p, size, st->tag + i});
    } else if (st->rearm > 0 && i < 4) {
      st->blocks.push_back(Block{p, size, st->tag + i});
    } else {
      free(p);
    }
  }
  if (st->rearm > 0) {
    --st->rearm;
    st->tag += 100;
    pthread_setspecific(g_key, st);  // Another destructor round.
  } else {
    delete st;
  }
}

struct TlsObject {
  std::vector<Block> blocks;
  uint64_t tag = 0;
  bool used = false;
  ~TlsObject() {
    if (!used) return;
    g_tls_dtor_runs.fetch_add(1);
    for (const Block& b : blocks) {
      if (!Intact(b.p, b.size, b.tag)) g_dtor_failures.fetch_add(1);
      free(b.p);
    }
    for (int i = 0; i < 4; ++i) {
      const size_t size = SizeFor(tag + i);
      char* p = new char[size];
      Fill(p, size, tag + i);
      if (i == 0) {
        Outlive(Block{p, size, tag + i});
      } else {
        delete[] p;
      }
    }
  }
};
thread_local TlsObject t_tls;

void ExitDestructorThread(int index, int rearm) {
  KeyState* st = new KeyState;
  st->rearm = rearm;
  st->tag = static_cast<uint64_t>(index) * 1000;
  for (int i = 0; i < 6; ++i) {
    const size_t size = SizeFor(index + i);
    void* p = malloc(size);
    Fill(p, size, st->tag + 50 + i);
    st->blocks.push_back(Block{p, size, st->tag + 50 + i});
  }
  pthread_setspecific(g_key, st);
  t_tls.used = true;
  t_tls.tag = static_cast<uint64_t>(index) * 1000 + 500;
  for (int i = 0; i < 3; ++i) {
    const size_t size = SizeFor(index * 3 + i);
    void* p = malloc(size);
    Fill(p, size, t_tls.tag + 10 + i);
    t_tls.blocks.push_back(Block{p, size, t_tls.tag + 10 + i});
  }
  // Churn a little so the thread's cache holds objects at exit.
  std::vector<void*> churn;
  for (int i = 0; i < 200; ++i) churn.push_back(malloc(16 + (i % 40) * 16));
  for (void* p : churn) free(p);
}

void RunExitDestructorThreads(int threads, int concurrent, int rearm) {
  for (int base = 0; base < threads; base += concurrent) {
    std::vector<std::thread> ts;
    for (int i = base; i < base + concurrent && i < threads; ++i) {
      ts.emplace_back(ExitDestructorThread, i, rearm);
    }
    for (auto& t : ts) t.join();
  }
}

class ExitDestructors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(pthread_key_create(&g_key, KeyDestructor), 0);
  }
  void TearDown() override {
    std::lock_guard<std::mutex> l(g_outlived_mu);
    for (const Block& b : g_outlived) {
      EXPECT_TRUE(Intact(b.p, b.size, b.tag));
      free(b.p);
    }
    g_outlived.clear();
  }
};

TEST_F(ExitDestructors, AllocateAndFreeInKeyAndThreadLocalDestructors) {
  constexpr int kThreads = 64;
  g_key_dtor_runs = 0;
  g_tls_dtor_runs = 0;
  RunExitDestructorThreads(kThreads, 8, /*rearm=*/1);
  EXPECT_EQ(g_dtor_failures.load(), 0);
  EXPECT_EQ(g_key_dtor_runs.load(), kThreads * 2);
  EXPECT_EQ(g_tls_dtor_runs.load(), kThreads);
  std::lock_guard<std::mutex> l(g_outlived_mu);
  EXPECT_EQ(g_outlived.size(), static_cast<size_t>(kThreads * 3));
  std::vector<Block> copy = g_outlived;
  EXPECT_TRUE(Disjoint(copy));
}

// The slabs one thread's ID may take: one, or with node-qualified IDs (cid
// mode on several nodes, docs/rseq.md) one on each node the thread runs
// on.
unsigned SlabsPerId(const cidmalloc_stats& s) {
  return strcmp(s.mode, "cid") == 0 && s.num_nodes > 1 ? s.num_nodes : 1;
}

// A thread whose destructors allocate until the last destructor round
// (PTHREAD_DESTRUCTOR_ITERATIONS) must not keep its soft ID (none mode) or
// anything else: many such threads, one after the other, reuse the same IDs
// and slabs.
TEST_F(ExitDestructors, SlabsStayBoundedWhenDestructorsAllocateLate) {
  constexpr int kThreads = 32;
  const cidmalloc_stats before = Stats();
  // rearm 1: two destructor rounds, allocation in both.
  RunExitDestructorThreads(kThreads, 4, /*rearm=*/1);
  const cidmalloc_stats after = Stats();
  EXPECT_EQ(g_dtor_failures.load(), 0);
  // At most 4 threads alive at once besides main: at most that many new
  // IDs, whatever the mode, each with its slabs.
  EXPECT_LE(after.slabs, before.slabs + (4 + 1) * SlabsPerId(after))
      << "slabs " << before.slabs << " -> " << after.slabs;
}

// The same with allocation in every destructor round glibc runs
// (PTHREAD_DESTRUCTOR_ITERATIONS = 4): the last round allocates after the
// allocator's own key destructor already ran in that round.
//
// Known bug KNOWN_BUG_SOFT_ID_EXIT_LEAK (none mode; README.md of this
// package): the allocation claims a fresh soft ID and re-arms the
// allocator's key, but glibc runs no fifth round, so the ID (and the
// objects cached in its slab) is never given back: one leaked slab per
// such thread.
TEST_F(ExitDestructors, SlabsStayBoundedWhenDestructorsAllocateInTheLastRound) {
  constexpr int kThreads = 32;
  const cidmalloc_stats before = Stats();
  RunExitDestructorThreads(kThreads, 4, /*rearm=*/3);
  const cidmalloc_stats after = Stats();
  EXPECT_EQ(g_dtor_failures.load(), 0);
  const bool bounded =
      after.slabs <= before.slabs + (4 + 1) * SlabsPerId(after);
  if (Env("KNOWN_BUG_SOFT_ID_EXIT_LEAK") == "1") {
    if (!bounded) {
      GTEST_SKIP() << "KNOWN_BUG_SOFT_ID_EXIT_LEAK (known bug): slabs "
                   << before.slabs << " -> " << after.slabs << " after "
                   << kThreads << " threads";
    }
    ADD_FAILURE() << "KNOWN_BUG_SOFT_ID_EXIT_LEAK seems fixed: remove it "
                     "from this target in tests/allocator_stress/BUILD";
  }
  EXPECT_TRUE(bounded) << "slabs " << before.slabs << " -> " << after.slabs
                       << " after " << kThreads << " threads, at most 4 alive "
                       << "at once";
}

// ---- Threads that exit before their memory is freed ----------------------------

TEST(Lifecycle, MemoryOutlivesTheThreadThatAllocatedIt) {
  constexpr int kProducers = 12;
  constexpr int kPerProducer = 400;
  std::vector<std::vector<Block>> made(kProducers);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> producers;
    for (int t = 0; t < kProducers; ++t) {
      producers.emplace_back([&made, t, round] {
        Rng rng(Mix(t, round));
        for (int i = 0; i < kPerProducer; ++i) {
          size_t size = SizeFor(rng.Below(14));
          if (size > kMiB && !rng.Chance(1, 20)) size = 1000;
          const uint64_t tag = rng.Next();
          void* p = malloc(size);
          Fill(p, size, tag);
          made[t].push_back(Block{p, size, tag});
        }
        // Free a few of its own, then exit holding the rest.
        for (int i = 0; i < kPerProducer / 4; ++i) {
          free(made[t].back().p);
          made[t].pop_back();
        }
      });
    }
    for (auto& t : producers) t.join();  // Every producer is gone.
    std::vector<Block> all;
    for (auto& v : made) all.insert(all.end(), v.begin(), v.end());
    EXPECT_TRUE(Disjoint(all));
    // Consumers (new threads, fewer of them) verify and free, in an order
    // unrelated to the producers'.
    std::atomic<int> bad{0};
    std::vector<std::thread> consumers;
    for (int c = 0; c < 3; ++c) {
      consumers.emplace_back([&, c] {
        for (int t = c; t < kProducers; t += 3) {
          for (auto it = made[t].rbegin(); it != made[t].rend(); ++it) {
            if (!Intact(it->p, it->size, it->tag)) bad.fetch_add(1);
            free(it->p);
          }
          made[t].clear();
        }
      });
    }
    for (auto& t : consumers) t.join();
    EXPECT_EQ(bad.load(), 0);
  }
}

// ---- none mode: caches of exiting threads ----------------------------------------

TEST(Lifecycle, ExitingThreadsReturnTheirCachesInNoneMode) {
  if (std::string(Stats().mode) != "none") {
    GTEST_SKIP() << "per-thread caches exist in none mode only (mode "
                 << Stats().mode << ")";
  }
  constexpr int kThreads = 8;
  constexpr int kRounds = 6;
  const unsigned long long baseline = Stats().cached_bytes;
  unsigned long long peak_alive = 0;
  for (int round = 0; round < kRounds; ++round) {
    Barrier filled(kThreads + 1), go(kThreads + 1);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        // Fill the thread's cache: allocate many objects of several
        // classes, then free them all (they stay in its slab).
        std::vector<void*> v;
        for (int i = 0; i < 3000; ++i) v.push_back(malloc(16 + ((i + t) % 64) * 32));
        for (void* p : v) free(p);
        filled.Wait();
        go.Wait();
      });
    }
    filled.Wait();
    const unsigned long long alive = Stats().cached_bytes;
    peak_alive = std::max(peak_alive, alive);
    go.Wait();
    for (auto& t : ts) t.join();
    const unsigned long long after = Stats().cached_bytes;
    // The threads' caches were substantial while they lived...
    EXPECT_GE(alive, baseline + kThreads * 16 * kKiB) << "round " << round;
    // ...and all of it went back when they exited (main's cache may have
    // changed a little around thread creation and join).
    EXPECT_LE(after, baseline + 64 * kKiB)
        << "round " << round << ": cached " << baseline << " -> alive "
        << alive << " -> after exit " << after;
  }
  printf("cached bytes: baseline %llu, with %d threads alive %llu, after all "
         "exited %llu\n",
         baseline, kThreads, peak_alive, Stats().cached_bytes);
}

}  // namespace
