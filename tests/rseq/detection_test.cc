// tests/rseq/detection_test.cc: feature detection, fast reads and the basic
// semantics of the per-ID operations, checked against what the kernel and
// glibc report independently of the library.
//
// Built four times (tests/rseq/BUILD) with different environments:
//   EXPECT_MODE          cid|cpu|none: the mode cap the target sets through
//                        CIDMALLOC_RSEQ_MODE (cid: no cap).  The mode the
//                        library must pick is min(cap, what the kernel
//                        offers), where the kernel's offer comes from auxv.
//   EXPECT_REGISTRATION  glibc|own: who should register the rseq areas
//                        (own: GLIBC_TUNABLES=glibc.pthread.rseq=0).
// On kernels without rseq or without mm_cid the affected checks skip with
// the reason.
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rseq/rseq.h"
#include "tests/rseq/stack_table.h"
#include "tests/rseq/test_util.h"

extern char** environ;

namespace {

using namespace cidmalloc_test;  // NOLINT
namespace rs = ::cidmalloc::rseq;

int M(rs::Mode m) { return static_cast<int>(m); }
int R(rs::Registration r) { return static_cast<int>(r); }

const Expectation& Expected() {
  static const Expectation e = ExpectedForThisProcess();
  return e;
}

std::string Describe(const Expectation& e) {
  char buf[256];
  snprintf(buf, sizeof buf,
           "expected: cap=%s registration=%s best=%s mode=%s node_id=%d "
           "fence=%d feature_size=%u (__rseq_size=%u)",
           ModeStr(e.cap), RegStr(e.registration), ModeStr(e.best_mode),
           ModeStr(e.mode), e.has_node_id, e.fence, e.feature_size,
           GlibcRseqSize());
  return buf;
}

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

// ---- Environment ------------------------------------------------------------

TEST(Environment, TargetEnvironmentReachedTheProcess) {
  printf("EXPECT_MODE=%s EXPECT_REGISTRATION=%s CIDMALLOC_RSEQ_MODE=%s "
         "GLIBC_TUNABLES=%s\n%s\n",
         Env("EXPECT_MODE", "(unset)").c_str(),
         Env("EXPECT_REGISTRATION", "(unset)").c_str(),
         Env("CIDMALLOC_RSEQ_MODE", "(unset)").c_str(),
         Env("GLIBC_TUNABLES", "(unset)").c_str(),
         Describe(Expected()).c_str());
  if (EnvSet("EXPECT_MODE")) {
    EXPECT_EQ(ParseMode(Env("CIDMALLOC_RSEQ_MODE")), ExpectedCap())
        << "EXPECT_MODE and CIDMALLOC_RSEQ_MODE disagree: the target's "
           "environment is inconsistent";
  }
  if (RequestedRegistration() == kRegOwn) {
    // GLIBC_TUNABLES only works if it was there when ld.so started.
    EXPECT_EQ(GlibcRseqSize(), 0u)
        << "GLIBC_TUNABLES=" << Env("GLIBC_TUNABLES")
        << " did not switch glibc's rseq registration off";
  } else {
    if (!GlibcExportsRseq()) {
      GTEST_SKIP() << "this glibc does not export __rseq_size (< 2.35), so "
                      "it registers no rseq area";
    }
    if (GlibcRseqSize() == 0) {
      GTEST_SKIP() << "glibc did not register rseq (kernel without rseq?)";
    }
    EXPECT_GE(GlibcAreaCpuId(), 0) << "__rseq_size > 0 but glibc's area has "
                                      "no valid cpu_id";
  }
}

// ---- Feature detection ------------------------------------------------------

TEST(Detection, FeatureSizeAndAlignComeFromAuxv) {
  const rs::ProcessState& p = rs::Process();
  EXPECT_EQ(p.feature_size, getauxval(kAtRseqFeatureSize));
  EXPECT_EQ(p.rseq_align, getauxval(kAtRseqAlign));
  if (p.feature_size == 0) {
    GTEST_SKIP() << "no AT_RSEQ_FEATURE_SIZE in auxv (kernel before 6.3)";
  }
  // The original 32-byte area was always 32-byte aligned.
  EXPECT_GE(p.rseq_align, 32u);
  EXPECT_GE(p.feature_size, 20u);
}

TEST(Detection, RegistrationMatchesGlibcAndKernel) {
  const rs::ProcessState& p = rs::Process();
  const Expectation& e = Expected();
  EXPECT_EQ(R(p.registration), e.registration)
      << "library: " << rs::RegistrationName(p.registration) << "; "
      << Describe(e);
  if (GlibcRseqSize() > 0) {
    // glibc registered: the library must use glibc's area, never its own.
    EXPECT_NE(p.registration, rs::Registration::kOwn);
    if (p.registration == rs::Registration::kGlibc) {
      EXPECT_EQ(p.area_offset, __rseq_offset);
    }
  }
  if (p.registration == rs::Registration::kOwn) {
    EXPECT_EQ(p.registration_errno, 0);
    EXPECT_TRUE(ThreadHasRseqRegistered())
        << "own registration reported but the main thread has no area";
  }
  if (p.registration != rs::Registration::kNone) {
    // The area the library reads is the thread's real, kernel-updated one.
    EXPECT_GE(rs::AreaCpuId(), 0);
  }
  if (e.registration == kRegNone) {
    EXPECT_EQ(p.registration, rs::Registration::kNone);
    GTEST_SKIP() << "no rseq registration possible here ("
                 << (e.kernel_rseq ? "mode capped to none with glibc's "
                                     "registration off"
                                   : "kernel or glibc without rseq")
                 << ")";
  }
  EXPECT_EQ(e.registration, RequestedRegistration())
      << "the target asked for " << RegStr(RequestedRegistration())
      << " registration but the process has " << RegStr(e.registration);
}

TEST(Detection, ModeFollowsFeatureSizeRegistrationAndCap) {
  const rs::ProcessState& p = rs::Process();
  const Expectation& e = Expected();
  EXPECT_EQ(M(p.best_mode), e.best_mode) << Describe(e);
  EXPECT_EQ(M(p.mode), e.mode) << Describe(e);
  EXPECT_EQ(M(rs::CurrentMode()), e.mode);
  EXPECT_EQ(p.has_node_id, e.has_node_id) << Describe(e);
  // The rules, spelled out on the library's own report.
  const bool registered = p.registration != rs::Registration::kNone;
  EXPECT_EQ(p.best_mode == rs::Mode::kCid,
            registered && p.feature_size >= kFeatureEndMmCid);
  EXPECT_EQ(p.best_mode == rs::Mode::kCpu,
            registered && p.feature_size < kFeatureEndMmCid);
  EXPECT_EQ(p.has_node_id, registered && p.feature_size >= kFeatureEndNodeId);
  EXPECT_LE(M(p.mode), M(p.best_mode));
  EXPECT_LE(M(p.mode), ExpectedCap());
  EXPECT_EQ(M(p.mode), std::min(ExpectedCap(), M(p.best_mode)));
  if (e.mode < e.cap) {
    printf("note: the kernel offers less than the cap: %s\n",
           Describe(e).c_str());
  }
}

TEST(Detection, IdSpaceMatchesMode) {
  const rs::ProcessState& p = rs::Process();
  const uint32_t possible = PossibleCpuCount();
  ASSERT_GT(possible, 0u) << "cannot parse /sys/devices/system/cpu/possible";
  EXPECT_EQ(p.possible_cpus, possible);
  const Expectation& e = Expected();
  const uint32_t rseq_ids =
      p.mode == rs::Mode::kNone ? 0 : possible * (e.node_qualified ? e.nodes : 1);
  EXPECT_EQ(p.num_rseq_ids, rseq_ids);
  const rs::IdKind kind = p.mode == rs::Mode::kNone ? rs::IdKind::kNone
                          : e.node_qualified       ? rs::IdKind::kNodeQualified
                                                   : rs::IdKind::kRaw;
  EXPECT_EQ(p.id_kind, kind);
  EXPECT_EQ(rs::CurrentIdKind(), kind);
  if (kind == rs::IdKind::kNodeQualified) {
    EXPECT_EQ(p.cid_stride, possible);
    EXPECT_EQ(p.num_nodes, e.nodes);
    // Each ID belongs to one node.
    for (uint32_t id = 0; id < rseq_ids; id += possible) {
      EXPECT_EQ(rs::NodeOfId(id), static_cast<int>(id / possible));
    }
  } else if (p.mode == rs::Mode::kCid) {
    EXPECT_EQ(rs::NodeOfId(0), -1) << "a raw cid runs on any node";
  }
  EXPECT_EQ(rs::NodeOfId(p.num_rseq_ids), -1) << "soft IDs have no node";
  EXPECT_EQ(rs::NumRseqIds(), rseq_ids);
  EXPECT_EQ(p.num_ids, rseq_ids + kSoftIds);
  EXPECT_EQ(rs::NumIds(), rseq_ids + kSoftIds);
  // Every cpu this process may run on has an ID in cpu mode.
  for (int cpu : AllowedCpus()) EXPECT_LT(static_cast<uint32_t>(cpu), possible);
}

TEST(Detection, FenceMatchesMembarrierQuery) {
  const rs::ProcessState& p = rs::Process();
  const Expectation& e = Expected();
  EXPECT_EQ(p.fence_available, e.fence) << Describe(e);
  EXPECT_EQ(rs::Fence(), e.fence);
  EXPECT_EQ(rs::Fence(), e.fence) << "a second fence behaves differently";
  if (e.fence) {
    // The library registered the process for the rseq fence.
    EXPECT_TRUE(RawRseqFenceWorks());
  }
  // A soft ID can always be quiesced (its lock); an rseq ID needs the fence.
  EXPECT_TRUE(rs::QuiesceId(p.num_rseq_ids));
  EXPECT_TRUE(rs::QuiesceId(p.num_ids - 1));
  if (p.num_rseq_ids > 0) {
    EXPECT_EQ(rs::QuiesceId(0), e.fence);
    EXPECT_EQ(rs::QuiesceId(p.num_rseq_ids - 1), e.fence);
  }
  if (!e.fence && p.mode != rs::Mode::kNone) {
    GTEST_SKIP() << "the kernel has no MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ "
                    "(before 5.10)";
  }
}

// A child of this binary in knob-printing mode (see main()) reports the
// state it detected; run it with each value of CIDMALLOC_RSEQ_MODE.
struct ChildResult {
  int status = -1;
  std::string out, err;
};

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    s.append(buf, static_cast<size_t>(r));
  }
  return s;
}

// Runs this binary as a child that prints what the library detected, with
// CIDMALLOC_RSEQ_MODE=knob (unset if null).  With `soft` (then the child
// prints only whether the soft IDs' owner protocol runs), also
// CIDMALLOC_RSEQ_SOFT=*soft, unset if *soft is null.
ChildResult RunKnobChild(const char* knob, const char* const* soft = nullptr) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, "CIDMALLOC_RSEQ_MODE=", 20) == 0) continue;
    if (strncmp(*e, "CIDMALLOC_RSEQ_SOFT=", 20) == 0) continue;
    env.push_back(*e);
  }
  env.push_back(soft ? "RSEQ_DETECTION_CHILD=soft" : "RSEQ_DETECTION_CHILD=1");
  if (knob != nullptr) env.push_back(std::string("CIDMALLOC_RSEQ_MODE=") + knob);
  if (soft != nullptr && *soft != nullptr) {
    env.push_back(std::string("CIDMALLOC_RSEQ_SOFT=") + *soft);
  }
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);

  int out[2], err[2];
  ChildResult res;
  if (pipe(out) != 0 || pipe(err) != 0) return res;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addclose(&fa, err[0]);
  char arg0[] = "rseq_detection_child";
  char* argv[] = {arg0, nullptr};
  pid_t pid;
  const int rc =
      posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  if (rc == 0) {
    res.out = ReadAll(out[0]);
    res.err = ReadAll(err[0]);
    waitpid(pid, &res.status, 0);
  }
  close(out[0]);
  close(err[0]);
  return res;
}

TEST(Detection, ModeKnobHonouredForEveryValue) {
  int own_probe = -1;
  struct Case {
    const char* knob;  // nullptr: unset
    int cap;
    bool warn_invalid;
  };
  const Case cases[] = {
      {nullptr, kModeCid, false}, {"cid", kModeCid, false},
      {"cpu", kModeCpu, false},   {"none", kModeNone, false},
      {"", kModeCid, false},      {"bogus", kModeCid, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("CIDMALLOC_RSEQ_MODE=") +
                 (c.knob ? c.knob : "(unset)"));
    const Expectation e = ComputeExpectation(c.cap, &own_probe);
    ChildResult r = RunKnobChild(c.knob);
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)
        << "child status " << r.status << " stderr: " << r.err;
    char want[128];
    snprintf(want, sizeof want, "mode=%s best=%s registration=%s\n",
             ModeStr(e.mode), ModeStr(e.best_mode), RegStr(e.registration));
    EXPECT_EQ(r.out, want) << Describe(e);
    if (c.warn_invalid) {
      EXPECT_NE(r.err.find("CIDMALLOC_RSEQ_MODE=bogus is not one of "
                           "cid|cpu|none"),
                std::string::npos)
          << "stderr: " << r.err;
    } else if (c.knob != nullptr && *c.knob != '\0' && c.cap > e.best_mode) {
      EXPECT_NE(r.err.find("is not available here"), std::string::npos)
          << "stderr: " << r.err;
    } else if (c.knob == nullptr || *c.knob != '\0') {
      // Unset, or a valid value the kernel supports: nothing to say.  (Not
      // checked for the empty value: the library treats it as "no cap" but
      // still warns "not available" where the kernel lacks mm_cid.)
      EXPECT_EQ(r.err, "");
    }
  }
}

// CIDMALLOC_RSEQ_SOFT in none mode: owner (the default; also unset and
// empty) runs the owner protocol where membarrier allows it, lock does not,
// and anything else warns and keeps the default.
TEST(Detection, SoftKnobHonouredForEveryValue) {
  const bool available = MembarrierPrivateExpeditedSupported();
  struct Case {
    const char* knob;  // nullptr: unset
    bool owner;
    bool warn_invalid;
  };
  const Case cases[] = {
      {nullptr, true, false}, {"owner", true, false}, {"lock", false, false},
      {"", true, false},      {"bogus", true, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("CIDMALLOC_RSEQ_SOFT=") +
                 (c.knob ? c.knob : "(unset)"));
    ChildResult r = RunKnobChild("none", &c.knob);
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)
        << "child status " << r.status << " stderr: " << r.err;
    EXPECT_EQ(r.out, c.owner && available ? "owner_protocol=1\n"
                                          : "owner_protocol=0\n");
    if (c.warn_invalid) {
      EXPECT_NE(r.err.find("CIDMALLOC_RSEQ_SOFT=bogus is not one of "
                           "owner|lock; using owner"),
                std::string::npos)
          << "stderr: " << r.err;
    } else {
      EXPECT_EQ(r.err, "");
    }
  }
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
              if (cid_mode && samples[j].id != samples[j].c1 &&
                  violation.empty()) {
                violation = "cid mode: CurrentId() " +
                            std::to_string(samples[j].id) +
                            " != CurrentCid() " +
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
      int checked = 0;
      for (int i = 0; i < 2000 && checked < 500; ++i) {
        const long sw0 = ThreadSwitches();
        const int c1 = rs::CurrentCid();
        const int node = rs::CurrentNode();
        const uint32_t id = rs::CurrentId();
        const int c2 = rs::CurrentCid();
        if (ThreadSwitches() != sw0 || c1 != c2) continue;
        // Node-qualified: node_id * stride + mm_cid.
        const uint32_t base = p.id_kind == rs::IdKind::kNodeQualified
                                  ? static_cast<uint32_t>(node) * p.cid_stride
                                  : 0;
        ASSERT_EQ(id, base + static_cast<uint32_t>(c1));
        ++checked;
      }
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

// ---- Operation semantics on one ID -----------------------------------------------

// Runs `body(id)` until it ran without the calling thread changing its ID
// or being switched out, then returns its verdict ("" = pass).  `reset`
// restores the data before each attempt.
template <typename Reset, typename Body>
std::string OnStableId(Reset reset, Body body) {
  ScopedAffinity restore;
  const std::vector<int> cpus = AllowedCpus();
  PinToCpu(cpus.back());
  for (int attempt = 0; attempt < 200; ++attempt) {
    reset();
    const long sw0 = ThreadSwitches();
    const uint32_t id0 = rs::CurrentId();
    std::string verdict = body(id0);
    const uint32_t id1 = rs::CurrentId();
    if (ThreadSwitches() == sw0 && id0 == id1) return verdict;
  }
  return "SKIP";
}

TEST(Ops, StackLayoutIsAsDocumented) {
  EXPECT_EQ(sizeof(rs::Stack), 16u);
  alignas(16) rs::Stack s;
  memset(&s, 0, sizeof s);
  s.capacity = 3;
  // The u64 at the limit's offset is capacity << 48 (a push compares it
  // with the top word).
  uint64_t limit;
  memcpy(&limit, reinterpret_cast<char*>(&s) + CIDMALLOC_STACK_OFF_LIMIT,
         sizeof limit);
  EXPECT_EQ(limit, uint64_t{3} << 48);
  void* a = ItemFor(1);
  void* b = ItemFor(2);
  void* c = ItemFor(3);
  void* d = ItemFor(4);
  for (void* p : {a, b, c, d}) static_cast<uint64_t*>(p)[1] = 0x5eed;
  EXPECT_EQ(s.Count(), 0u);
  ASSERT_TRUE(s.PushHeld(a));
  ASSERT_TRUE(s.PushHeld(b));
  // top = item | count << 48; each item's first word links to the top word
  // below it; the bottom one to 0.
  EXPECT_EQ(s.top, rs::Stack::TopWord(b, 2));
  EXPECT_EQ(s.top, reinterpret_cast<uint64_t>(b) | uint64_t{2} << 48);
  EXPECT_EQ(rs::Stack::Link(b), rs::Stack::TopWord(a, 1));
  EXPECT_EQ(rs::Stack::Link(a), 0u);
  EXPECT_EQ(s.Count(), 2u);
  ASSERT_TRUE(s.PushHeld(c));
  static_cast<uint64_t*>(d)[0] = 0xd0d0;
  EXPECT_FALSE(s.PushHeld(d)) << "a push beyond the capacity";
  EXPECT_EQ(static_cast<uint64_t*>(d)[0], 0xd0d0u)
      << "a failed push wrote the item";
  std::vector<void*> seen;
  s.ForEachHeld([&](void* p) { seen.push_back(p); });
  EXPECT_EQ(seen, (std::vector<void*>{c, b, a}));
  void* got = nullptr;
  for (void* want : {c, b, a}) {
    ASSERT_TRUE(s.PopHeld(&got));
    EXPECT_EQ(got, want);
  }
  EXPECT_FALSE(s.PopHeld(&got));
  EXPECT_EQ(s.top, 0u);
  // Only the first word of an item is the stack's.
  for (void* p : {a, b, c, d}) {
    EXPECT_EQ(static_cast<uint64_t*>(p)[1], 0x5eedu);
  }
}

TEST(Ops, AbsentRegionsFailEveryOperation) {
  StackTable stacks(8);
  stacks.UnpublishAll();
  void* out[4] = {};
  void* in[2] = {ItemFor(1), ItemFor(2)};
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(rs::Pop(stacks.table(), stacks.offset()), nullptr);
    EXPECT_FALSE(rs::Push(stacks.table(), stacks.offset(), ItemFor(1)));
    EXPECT_EQ(rs::PopBatch(stacks.table(), stacks.offset(), out, 4), 0u);
    EXPECT_EQ(rs::PushBatch(stacks.table(), stacks.offset(), in, 2), 0u);
  }
  EXPECT_TRUE(stacks.NonEmptyIds().empty());
  EXPECT_EQ(stacks.CheckLayout(), "");
}

TEST(Ops, PushPopAreLifoAndBoundedOnTheCurrentId) {
  constexpr uint32_t kCap = 8;
  StackTable stacks(kCap);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  const std::string verdict = OnStableId(
      [&] { stacks.Clear(); },
      [&](uint32_t id) -> std::string {
        for (uint32_t i = 1; i <= kCap; ++i) {
          if (!rs::Push(table, off, ItemFor(i))) {
            return "push " + std::to_string(i) + " failed";
          }
        }
        if (rs::Push(table, off, ItemFor(99))) return "push beyond capacity";
        void* extra[2] = {ItemFor(98), ItemFor(97)};
        if (rs::PushBatch(table, off, extra, 2) != 0) {
          return "batch push beyond capacity";
        }
        std::vector<void*> want;
        for (uint32_t i = 1; i <= kCap; ++i) want.push_back(ItemFor(i));
        if (stacks.Items(id) != want) return "stack contents after pushes";
        if (stacks.NonEmptyIds() != std::vector<uint32_t>{id}) {
          return "items landed on another ID than CurrentId()";
        }
        if (rs::Pop(table, off) != ItemFor(kCap)) return "pop: not the top";
        void* out[8] = {};
        if (rs::PopBatch(table, off, out, 3) != 3) return "batch pop count";
        if (out[0] != ItemFor(kCap - 1) || out[1] != ItemFor(kCap - 2) ||
            out[2] != ItemFor(kCap - 3)) {
          return "batch pop: not top first";
        }
        if (rs::PopBatch(table, off, out, 0) != 0) return "want 0 popped";
        // 4 left; room for 4 of these 5.
        void* in[5] = {ItemFor(11), ItemFor(12), ItemFor(13), ItemFor(14),
                       ItemFor(15)};
        if (rs::PushBatch(table, off, in, 0) != 0) return "want 0 pushed";
        if (rs::PushBatch(table, off, in, 5) != 4) return "partial batch push";
        want = {ItemFor(1),  ItemFor(2),  ItemFor(3),  ItemFor(4),
                ItemFor(11), ItemFor(12), ItemFor(13), ItemFor(14)};
        if (stacks.Items(id) != want) return "contents after batch push";
        // Popping more than there is returns what there is.
        if (rs::PopBatch(table, off, out, 8) != 8) return "pop all count";
        if (out[0] != ItemFor(14) || out[7] != ItemFor(1)) {
          return "pop all order";
        }
        if (rs::Pop(table, off) != nullptr) return "pop on empty";
        if (rs::PopBatch(table, off, out, 3) != 0) return "batch pop on empty";
        if (stacks.stack(id)->Count() != 0) return "count not 0 at the end";
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  EXPECT_EQ(stacks.CheckLayout(), "");
}

TEST(Ops, CounterAddUpdatesTheCurrentIdsLine) {
  Counters counters;
  const std::string verdict = OnStableId(
      [&] { counters.Clear(); },
      [&](uint32_t id) -> std::string {
        rs::CounterAdd(counters.base(), 5);
        rs::CounterAdd(counters.base(), -2);
        rs::CounterAdd(counters.base(), int64_t{1} << 40);
        if (counters.Get(id) != 3 + (int64_t{1} << 40)) {
          return "counter(" + std::to_string(id) + ") = " +
                 std::to_string(counters.Get(id));
        }
        if (counters.NonZeroIds() != std::vector<uint32_t>{id}) {
          return "another ID's counter changed";
        }
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  EXPECT_EQ(counters.CheckCanaries(), "");
}

TEST(Ops, TryPopTryPushAreTheCriticalSectionsAlone) {
  StackTable stacks(8);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  if (rs::CurrentIdKind() != rs::IdKind::kRaw) {
    // They are the raw-ID sections: in none mode and with node-qualified
    // IDs they always fail, touching nothing.
    for (int i = 0; i < 10; ++i) {
      EXPECT_FALSE(rs::TryPush(table, off, ItemFor(1)));
    }
    ASSERT_TRUE(rs::Push(table, off, ItemFor(1)));  // The soft path works.
    EXPECT_EQ(rs::TryPop(table, off), nullptr);
    std::vector<void*> all;
    stacks.CollectAll(&all);
    EXPECT_EQ(all, std::vector<void*>{ItemFor(1)});
    return;
  }
  // rseq modes: on a thread whose area is registered they are Push and Pop.
  ASSERT_TRUE(rs::Push(table, off, ItemFor(50)));  // Settles the thread.
  const std::string verdict = OnStableId(
      [&] { stacks.Clear(); },
      [&](uint32_t id) -> std::string {
        for (uint32_t i = 1; i <= 8; ++i) {
          if (!rs::TryPush(table, off, ItemFor(i))) return "TryPush failed";
        }
        if (rs::TryPush(table, off, ItemFor(9))) return "TryPush when full";
        if (stacks.Items(id).size() != 8) return "items not on CurrentId()";
        for (uint32_t i = 8; i >= 1; --i) {
          if (rs::TryPop(table, off) != ItemFor(i)) return "TryPop order";
        }
        if (rs::TryPop(table, off) != nullptr) return "TryPop when empty";
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  // Absent regions.
  stacks.UnpublishAll();
  EXPECT_FALSE(rs::TryPush(table, off, ItemFor(1)));
  EXPECT_EQ(rs::TryPop(table, off), nullptr);
}

TEST(Ops, TryPushOnAFreshThreadNeedsARegisteredArea) {
  StackTable stacks(8);
  const Expectation& e = Expected();
  bool first_try = true, slow = false;
  void* back = nullptr;
  std::thread t([&] {
    // Nothing of the library has run on this thread yet.
    first_try = rs::TryPush(stacks.table(), stacks.offset(), ItemFor(1));
    if (!first_try) {
      slow = rs::Push(stacks.table(), stacks.offset(), ItemFor(1));
    }
    back = rs::Pop(stacks.table(), stacks.offset());
  });
  t.join();
  if (e.mode == kModeNone || e.node_qualified) {
    EXPECT_FALSE(first_try) << "TryPush is the raw-ID section";
  } else if (e.registration == kRegGlibc) {
    EXPECT_TRUE(first_try) << "glibc registered the thread at creation";
  } else if (e.registration == kRegOwn) {
    EXPECT_FALSE(first_try)
        << "the library's own area cannot be registered before its first use";
  }
  EXPECT_TRUE(first_try || slow) << "Push must succeed where TryPush did not";
  EXPECT_EQ(back, ItemFor(1));
}

// The allocator's inline sections read the ID's low 16 bits and index a
// table of kWideTableIds entries with no bound check.  A thread whose area
// is not registered yet reads 0xffff (cpu_id -1, our own area's mm_cid ~0)
// and must find that entry null: the push fails, touching nothing.
TEST(Ops, PushUncheckedOnAFreshThreadFindsANullEntry) {
  if (rs::CurrentIdKind() != rs::IdKind::kRaw) {
    GTEST_SKIP() << "PushUnchecked<kRaw> runs only with raw rseq IDs";
  }
  EXPECT_TRUE(rs::RawIdsBelowNumRseqIds());
  StackTable stacks(8);
  const Expectation& e = Expected();
  bool first_try = true, slow = false;
  void* back = nullptr;
  std::thread t([&] {
    first_try = rs::PushUnchecked(stacks.table(), stacks.offset(), ItemFor(1));
    if (!first_try) {
      slow = rs::Push(stacks.table(), stacks.offset(), ItemFor(1));
    }
    if (!rs::PopUnchecked(stacks.table(), stacks.offset(), &back)) {
      back = rs::Pop(stacks.table(), stacks.offset());
    }
  });
  t.join();
  if (e.registration == kRegGlibc) {
    EXPECT_TRUE(first_try) << "glibc registered the thread at creation";
  } else if (e.registration == kRegOwn) {
    EXPECT_FALSE(first_try) << "an unregistered area reads 0xffff: null entry";
  }
  EXPECT_TRUE(first_try || slow);
  EXPECT_EQ(back, ItemFor(1));
  std::vector<void*> all;
  stacks.CollectAll(&all);
  EXPECT_TRUE(all.empty());
  EXPECT_EQ(stacks.CheckLayout(), "");
}

TEST(Ops, NodeQualifiedPushesInsistOnTheNode) {
  if (rs::CurrentIdKind() != rs::IdKind::kNodeQualified) {
    GTEST_SKIP() << "IDs are not node-qualified in this variant";
  }
  StackTable stacks(8);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  ASSERT_TRUE(rs::Push(table, off, ItemFor(50)));  // Settles the thread.
  const std::string verdict = OnStableId(
      [&] { stacks.Clear(); },
      [&](uint32_t id) -> std::string {
        const int node = rs::NodeOfId(id);
        if (node != rs::CurrentNode()) return "NodeOfId is not the thread's node";
        if (rs::Push(table, off, ItemFor(1), node + 1)) {
          return "pushed while not on the requested node";
        }
        if (rs::PushBatch(table, off, std::vector<void*>{ItemFor(2)}.data(), 1,
                          node + 1) != 0) {
          return "batch-pushed while not on the requested node";
        }
        if (!stacks.Items(id).empty()) return "a refused push stored an item";
        if (!rs::Push(table, off, ItemFor(3), node)) return "Push on the node";
        if (!rs::Push(table, off, ItemFor(4))) return "Push with kAnyNode";
        if (stacks.Items(id).size() != 2) return "items not on CurrentId()";
        if (rs::Pop(table, off) != ItemFor(4)) return "Pop order";
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
}

TEST(Ops, AdjustCapacityClampsAndBoundsPushes) {
  constexpr uint32_t kSlots = 16;
  StackTable stacks(kSlots);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  auto reset = [&] {
    stacks.Clear();
    for (uint32_t id = 0; id < stacks.ids(); ++id) {
      stacks.stack(id)->capacity = 8;
    }
  };
  const std::string verdict =
      OnStableId(reset, [&](uint32_t id) -> std::string {
        rs::Stack* s = stacks.stack(id);
        if (rs::AdjustCapacity(table, off, 4, kSlots) != 12) return "8 + 4";
        if (s->capacity != 12) return "capacity not stored";
        if (rs::AdjustCapacity(table, off, 100, kSlots) != kSlots) {
          return "not clamped to the limit";
        }
        if (rs::AdjustCapacity(table, off, -100, kSlots) != 0) {
          return "not clamped to 0";
        }
        if (rs::Push(table, off, ItemFor(1))) return "push with capacity 0";
        if (rs::AdjustCapacity(table, off, 10, kSlots) != 10) return "0 + 10";
        for (uint32_t i = 1; i <= 10; ++i) {
          if (!rs::Push(table, off, ItemFor(i))) return "push under capacity";
        }
        // Shrinking below count: pushes fail until pops bring count under.
        if (rs::AdjustCapacity(table, off, -4, kSlots) != 6) return "10 - 4";
        if (s->Count() != 10) return "shrinking changed count";
        if (rs::Push(table, off, ItemFor(11))) return "push above capacity";
        void* two[2] = {ItemFor(11), ItemFor(12)};
        if (rs::PushBatch(table, off, two, 2) != 0) {
          return "batch push above capacity";
        }
        for (uint32_t i = 10; i > 5; --i) {
          if (rs::Pop(table, off) != ItemFor(i)) return "pop after shrink";
        }
        if (!rs::Push(table, off, ItemFor(6))) return "push under capacity";
        if (rs::Push(table, off, ItemFor(7))) return "push at capacity";
        // A limit below the current capacity clamps even a growth.
        if (rs::AdjustCapacity(table, off, 1, 3) != 3) return "limit 3";
        for (uint32_t other = 0; other < stacks.ids(); ++other) {
          if (other != id && stacks.stack(other)->capacity != 8) {
            return "another ID's capacity changed";
          }
        }
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  EXPECT_EQ(stacks.CheckLayout(true), "");
  stacks.UnpublishAll();
  EXPECT_EQ(rs::AdjustCapacity(table, off, 1, kSlots), -1);
}

}  // namespace

int main(int argc, char** argv) {
  const char* child = getenv("RSEQ_DETECTION_CHILD");
  if (child != nullptr && strcmp(child, "soft") == 0) {
    // For Detection.SoftKnobHonouredForEveryValue.
    rs::EnsureInit();
    printf("owner_protocol=%d\n", rs::g_soft_owner_protocol ? 1 : 0);
    return 0;
  }
  if (child != nullptr) {
    // Knob-printing mode for Detection.ModeKnobHonouredForEveryValue.
    const rs::ProcessState& p = rs::Process();
    printf("mode=%s best=%s registration=%s\n", rs::ModeName(p.mode),
           rs::ModeName(p.best_mode), rs::RegistrationName(p.registration));
    return 0;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
