// tests/rseq/detection_ids_test.cc: fast reads (cpu), concurrency IDs,
// the per-mode ID space and soft IDs, and new threads (part of the
// detection_*_test binaries; see detection_test.cc).

#include <utility>

#include "tests/rseq/detection.h"

namespace {

using namespace cidmalloc_detection;  // NOLINT

// Number of threads in this process according to the kernel.
int KernelThreadCount() {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof line, f) != nullptr) {
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  }
  fclose(f);
  return n;
}

// ---- Fast reads -------------------------------------------------------------

void CheckCpuReadsPinned(const std::vector<int>& cpus) {
  ScopedAffinity restore;
  for (int cpu : cpus) {
    ASSERT_TRUE(PinToCpu(cpu)) << "cannot pin to cpu " << cpu;
    for (int i = 0; i < 200; ++i) {
      unsigned c = ~0u, n = ~0u;
      ASSERT_TRUE(SyscallGetcpu(&c, &n));
      ASSERT_EQ(static_cast<int>(c), cpu) << "pinning did not take";
      ASSERT_EQ(rs::CurrentCpu(), cpu) << "iteration " << i;
      ASSERT_EQ(sched_getcpu(), cpu);
      ASSERT_EQ(rs::CurrentNode(), static_cast<int>(n)) << "cpu " << cpu;
      if (i % 50 == 49) sched_yield();
    }
  }
}

TEST(FastReads, CurrentCpuMatchesSchedGetcpuOnEveryAllowedCpu) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  CheckCpuReadsPinned(cpus);
  // Again on a thread the library has never seen (its first read decides
  // its path, and registers its area in own mode).
  std::thread t([&cpus] { CheckCpuReadsPinned(cpus); });
  t.join();
}

TEST(FastReads, GetCpuAgreesWithGetcpuSyscall) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  std::vector<int> node_of(CPU_SETSIZE, -1);
  {
    ScopedAffinity restore;
    for (int cpu : cpus) {
      ASSERT_TRUE(PinToCpu(cpu));
      for (int i = 0; i < 100; ++i) {
        unsigned c = ~0u, n = ~0u, sc = ~0u, sn = ~0u;
        ASSERT_EQ(rs::GetCpu(&c, &n), 0);
        ASSERT_TRUE(SyscallGetcpu(&sc, &sn));
        ASSERT_EQ(c, sc);
        ASSERT_EQ(n, sn);
        ASSERT_EQ(static_cast<int>(c), cpu);
      }
      unsigned sc, sn;
      ASSERT_TRUE(SyscallGetcpu(&sc, &sn));
      node_of[cpu] = static_cast<int>(sn);
    }
  }
  // Unpinned threads migrate; every (cpu, node) pair must still be one the
  // kernel reports for that cpu.
  std::atomic<int> bad{0};
  std::atomic<int> bad_cpu{-1}, bad_node{-1};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        unsigned c = ~0u, n = ~0u;
        if (rs::GetCpu(&c, &n) != 0 || c >= CPU_SETSIZE ||
            node_of[c] != static_cast<int>(n)) {
          bad.fetch_add(1);
          bad_cpu.store(static_cast<int>(c));
          bad_node.store(static_cast<int>(n));
        }
        if (i % 1000 == 0) sched_yield();
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0) << "inconsistent pair: cpu " << bad_cpu.load()
                           << " node " << bad_node.load();
}

// ---- Concurrency IDs -----------------------------------------------------------

TEST(Cid, AvailableExactlyWhenKernelProvidesIt) {
  const Expectation& e = Expected();
  EXPECT_EQ(rs::CurrentCid() >= 0, e.cid_readable) << Describe(e);
  int in_thread = -2;
  std::thread t([&in_thread] { in_thread = rs::CurrentCid(); });
  t.join();
  EXPECT_EQ(in_thread >= 0, e.cid_readable);
  if (!e.cid_readable) {
    EXPECT_EQ(rs::CurrentCid(), -1);
    GTEST_SKIP() << "no mm_cid here (feature_size " << e.feature_size
                 << ", registration " << RegStr(e.registration) << ")";
  }
}

TEST(Cid, BelowMinOfLiveThreadsAndAllowedCpus) {
  if (!Expected().cid_readable) GTEST_SKIP() << "no mm_cid on this kernel";
  const int allowed = static_cast<int>(AllowedCpus().size());
  for (int n : {1, 2, 3, 4, 8, 16}) {
    SpinBarrier start(n + 1);
    std::vector<int> max_cid(n, -1), min_cid(n, 1 << 30);
    std::atomic<int> threads_seen{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i) {
      ts.emplace_back([&, i] {
        start.Wait();
        for (int k = 0; k < 3000; ++k) {
          const int c = rs::CurrentCid();
          max_cid[i] = std::max(max_cid[i], c);
          min_cid[i] = std::min(min_cid[i], c);
          if (k % 100 == 99) sched_yield();
        }
      });
    }
    const int before = KernelThreadCount();
    start.Wait();
    for (auto& t : ts) t.join();
    // Threads that exited just before may still hold the mm for a moment;
    // the kernel's own count bounds those too.
    const int live = std::max(n + 1, before);
    threads_seen.store(live);
    const int bound = std::min(live, allowed);
    for (int i = 0; i < n; ++i) {
      EXPECT_GE(min_cid[i], 0) << n << " threads, thread " << i;
      EXPECT_LT(max_cid[i], bound)
          << n << " threads (+ main, " << live << " live), " << allowed
          << " allowed cpus, thread " << i;
    }
  }
}

TEST(Cid, SingleThreadedProcessHasCidZero) {
  if (!Expected().cid_readable) GTEST_SKIP() << "no mm_cid on this kernel";
  const std::vector<int> cpus = AllowedCpus();
  // A forked child has exactly one thread: min(1, cpus) == 1.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);
    int bad = 0;
    for (int round = 0; round < 3; ++round) {
      for (int cpu : cpus) {
        if (!PinToCpu(cpu)) _exit(3);
        for (int i = 0; i < 100; ++i) {
          if (rs::CurrentCid() != 0) ++bad;
        }
      }
    }
    _exit(bad == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "a single-threaded child saw a nonzero cid (status " << status << ")";
}

TEST(Cid, ConcurrentPinnedThreadsHaveDistinctCids) {
  if (!Expected().cid_readable) GTEST_SKIP() << "no mm_cid on this kernel";
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two allowed cpus";
  const int k = static_cast<int>(std::min<size_t>(cpus.size(), 8));
  const bool cid_mode = rs::CurrentMode() == rs::Mode::kCid;
  // Node-qualified IDs (node_id * cid_stride + mm_cid) carry the cid in
  // their remainder; only on several nodes do they differ from it.
  const bool qualified =
      rs::Process().id_kind == rs::IdKind::kNodeQualified;
  const int stride = static_cast<int>(rs::Process().cid_stride);
  struct Sample {
    int c1, c2, id;
    bool stable;
  };
  std::vector<Sample> samples(k);
  SpinBarrier barrier(k);
  std::atomic<bool> stop{false};
  std::atomic<bool> pin_failed{false};
  int valid_rounds = 0, rounds = 0;
  std::string violation;
  std::vector<std::thread> ts;
  for (int i = 0; i < k; ++i) {
    ts.emplace_back([&, i] {
      if (!PinToCpu(cpus[i])) pin_failed.store(true);
      for (;;) {
        barrier.Wait();
        const long sw0 = ThreadSwitches();
        const int c1 = rs::CurrentCid();
        const int id = static_cast<int>(rs::CurrentId());
        barrier.Wait();  // Every c1 read precedes every c2 read.
        const int c2 = rs::CurrentCid();
        const long sw1 = ThreadSwitches();
        samples[i] = {c1, c2, id,
                      sw0 == sw1 && sw0 >= 0 && c1 == c2 && !pin_failed};
        barrier.Wait();
        if (i == 0) {
          // No thread was switched out between its two reads, so all held
          // their cid at the instant the middle barrier opened.
          ++rounds;
          bool all_stable = true;
          for (const Sample& s : samples) all_stable &= s.stable;
          if (all_stable) {
            ++valid_rounds;
            std::set<int> seen;
            for (int j = 0; j < k; ++j) {
              if (!seen.insert(samples[j].c1).second && violation.empty()) {
                violation = "round " + std::to_string(rounds) +
                            ": two running threads share cid " +
                            std::to_string(samples[j].c1);
              }
              const int id_cid =
                  qualified ? samples[j].id % stride : samples[j].id;
              if (cid_mode && id_cid != samples[j].c1 && violation.empty()) {
                violation = std::string("cid mode: CurrentId() ") +
                            (qualified ? "% cid_stride " : "") +
                            std::to_string(id_cid) + " != CurrentCid() " +
                            std::to_string(samples[j].c1);
              }
            }
          }
          if (valid_rounds >= 200 || rounds >= 5000 || !violation.empty()) {
            stop.store(true);
          }
        }
        barrier.Wait();
        if (stop.load()) break;
      }
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_FALSE(pin_failed.load()) << "cannot pin a thread to its cpu";
  EXPECT_EQ(violation, "");
  if (valid_rounds == 0) {
    GTEST_SKIP() << "no round without a context switch in " << rounds
                 << " rounds (machine too busy)";
  }
  printf("%d of %d rounds without context switches\n", valid_rounds, rounds);
}

// ---- IDs --------------------------------------------------------------------

// Calls check(cid, value) with value = read() taken between two reads of
// one cid and with no context switch around them, `want` times at most in
// 2000 tries; returns how many times.
template <class Read, class Check>
int ForStableCid(int want, Read read, Check check) {
  int checked = 0;
  for (int i = 0; i < 2000 && checked < want; ++i) {
    const long sw0 = ThreadSwitches();
    const int c1 = rs::CurrentCid();
    const auto value = read();
    const int c2 = rs::CurrentCid();
    if (ThreadSwitches() != sw0 || c1 != c2) continue;
    check(c1, value);
    ++checked;
  }
  return checked;
}

// The hint is the raw ID field where the thread has a registered area
// (mm_cid in cid mode, the node-qualified ID's cid part; cpu_id in cpu and
// none mode), else CurrentId() (a soft ID).
TEST(Ids, CurrentIdHintIsTheRawIdOrTheSoftId) {
  const rs::ProcessState& p = rs::Process();
  if (p.registration == rs::Registration::kNone) {
    ASSERT_EQ(rs::CurrentIdHint(), rs::CurrentId());
    return;
  }
  switch (p.mode) {
    case rs::Mode::kNone:
    case rs::Mode::kCpu: {
      ScopedAffinity restore;
      for (int cpu : AllowedCpus()) {
        ASSERT_TRUE(PinToCpu(cpu));
        ASSERT_EQ(rs::CurrentIdHint(), static_cast<uint32_t>(cpu));
      }
      break;
    }
    case rs::Mode::kCid: {
      const int checked = ForStableCid(
          100, [] { return rs::CurrentIdHint(); },
          [](int cid, uint32_t hint) {
            EXPECT_EQ(hint, static_cast<uint32_t>(cid));
          });
      ASSERT_GT(checked, 0) << "never a stable cid";
      break;
    }
  }
}

TEST(Ids, CurrentIdIsInRangeAndFollowsMode) {
  const rs::ProcessState& p = rs::Process();
  ASSERT_LT(rs::CurrentId(), rs::NumIds());
  const std::vector<int> cpus = AllowedCpus();
  switch (p.mode) {
    case rs::Mode::kCpu: {
      ScopedAffinity restore;
      for (int cpu : cpus) {
        ASSERT_TRUE(PinToCpu(cpu));
        for (int i = 0; i < 100; ++i) {
          ASSERT_EQ(rs::CurrentId(), static_cast<uint32_t>(cpu));
        }
      }
      break;
    }
    case rs::Mode::kCid: {
      const int checked = ForStableCid(
          500,
          [] { return std::make_pair(rs::CurrentNode(), rs::CurrentId()); },
          [&p](int cid, std::pair<int, uint32_t> node_id) {
            // Node-qualified: node_id * stride + mm_cid.
            const uint32_t base =
                p.id_kind == rs::IdKind::kNodeQualified
                    ? static_cast<uint32_t>(node_id.first) * p.cid_stride
                    : 0;
            EXPECT_EQ(node_id.second, base + static_cast<uint32_t>(cid));
          });
      ASSERT_GT(checked, 0) << "never a stable cid";
      break;
    }
    case rs::Mode::kNone: {
      // Soft IDs: one per live thread, stable, distinct between threads.
      const uint32_t mine = rs::CurrentId();
      EXPECT_GE(mine, rs::NumRseqIds());
      for (int i = 0; i < 100; ++i) ASSERT_EQ(rs::CurrentId(), mine);
      constexpr int kThreads = 8;
      std::vector<uint32_t> ids(kThreads);
      std::vector<bool> stable(kThreads, true);
      SpinBarrier both(kThreads);
      std::vector<std::thread> ts;
      for (int t = 0; t < kThreads; ++t) {
        ts.emplace_back([&, t] {
          ids[t] = rs::CurrentId();
          both.Wait();  // All alive at once.
          for (int i = 0; i < 100; ++i) stable[t] = stable[t] && rs::CurrentId() == ids[t];
          both.Wait();
        });
      }
      for (auto& t : ts) t.join();
      std::set<uint32_t> seen{mine};
      for (int t = 0; t < kThreads; ++t) {
        EXPECT_TRUE(stable[t]);
        EXPECT_GE(ids[t], rs::NumRseqIds());
        EXPECT_LT(ids[t], rs::NumIds());
        EXPECT_TRUE(seen.insert(ids[t]).second)
            << "two live threads share soft ID " << ids[t];
      }
      break;
    }
  }
}

// The soft IDs' owner protocol runs exactly in none mode where the kernel
// has membarrier's PRIVATE_EXPEDITED command and CIDMALLOC_RSEQ_SOFT does
// not ask for the lock protocol; a thread then owns its soft ID.
TEST(Ids, SoftOwnerProtocolRunsWhereAskedAndAvailable) {
  const std::string knob = Env("CIDMALLOC_RSEQ_SOFT", "");
  const bool available = MembarrierPrivateExpeditedSupported();
  const bool expected = rs::CurrentMode() == rs::Mode::kNone &&
                        knob != "lock" && available;
  EXPECT_EQ(rs::g_soft_owner_protocol, expected)
      << "CIDMALLOC_RSEQ_SOFT=" << knob << ", PRIVATE_EXPEDITED "
      << available;
  std::thread t([expected] {
    const uint32_t id = rs::CurrentId();
    EXPECT_EQ(rs::t_soft_owner_index >= 0, expected);
    if (expected) {
      EXPECT_EQ(static_cast<uint32_t>(rs::t_soft_owner_index),
                id - rs::NumRseqIds());
      EXPECT_LT(static_cast<uint32_t>(rs::t_soft_owner_index),
                rs::kOwnedSoftIds);
    }
  });
  t.join();
}

TEST(Ids, SoftIdsOfExitedThreadsAreReused) {
  if (rs::CurrentMode() != rs::Mode::kNone) {
    GTEST_SKIP() << "only none mode gives every thread a soft ID";
  }
  // More threads than there are soft IDs, one after the other: each exits
  // before the next starts, so all get the same (lowest free) ID.
  std::vector<uint32_t> ids;
  for (int i = 0; i < static_cast<int>(kSoftIds) + 200; ++i) {
    uint32_t id = 0;
    std::thread t([&id] { id = rs::CurrentId(); });
    t.join();
    ids.push_back(id);
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(ids[i], ids[0]) << "thread " << i;
  }
  EXPECT_GE(ids[0], rs::NumRseqIds());
  EXPECT_LT(ids[0], rs::NumIds());
}

TEST(Threads, NewThreadWorks) {
  const Expectation& e = Expected();
  const std::vector<int> cpus = AllowedCpus();
  Counters counters;
  StackTable stacks(16);
  std::string failure;
  std::thread t([&] {
    auto fail = [&failure](const std::string& s) {
      if (failure.empty()) failure = s;
    };
    // Pinned, so that the ID it pushes on is the one it pops from later.
    if (!PinToCpu(cpus.back())) fail("cannot pin");
    const int cpu = rs::CurrentCpu();
    if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) {
      fail("CurrentCpu() " + std::to_string(cpu) + " not an allowed cpu");
    }
    if (rs::CurrentId() >= rs::NumIds()) fail("CurrentId() out of range");
    rs::CounterAdd(counters.base(), 7);
    if (counters.Sum() != 7) fail("counter sum " + std::to_string(counters.Sum()));
    if (!rs::Push(stacks.table(), stacks.offset(), ItemFor(1))) {
      fail("Push on an empty stack failed");
    }
    // The item is on exactly one stack, whichever ID the thread had.
    std::vector<void*> all;
    stacks.CollectAll(&all);
    if (all.size() != 1 || all[0] != ItemFor(1)) fail("pushed item not found");
    // Pop it back from whatever ID the thread is on now.
    void* got = nullptr;
    for (int i = 0; i < 1000 && got == nullptr; ++i) {
      got = rs::Pop(stacks.table(), stacks.offset());
      if (got == nullptr) sched_yield();
    }
    if (got != ItemFor(1)) fail("could not pop the item back");
    if (e.registration != kRegNone && !ThreadHasRseqRegistered()) {
      fail("the new thread has no rseq area registered after using the "
           "library");
    }
  });
  t.join();
  EXPECT_EQ(failure, "");
  EXPECT_EQ(stacks.CheckLayout(), "");
  EXPECT_EQ(counters.CheckCanaries(), "");
}

}  // namespace
