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
//
// This file: the environment and feature detection (and main(), whose
// child modes the knob tests run).  detection_ids_test.cc: fast reads,
// cids, IDs and threads; detection_ops_test.cc: the operations on one ID.

#include "tests/rseq/detection.h"

extern char** environ;

namespace {

using namespace cidmalloc_detection;  // NOLINT

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
// CIDMALLOC_RSEQ_SOFT=*soft, unset if *soft is null.  With `node_ids` (then
// the child prints only its ID kind and count), CIDMALLOC_RSEQ_NODE_IDS=
// *node_ids, unset if *node_ids is null; without, the variable is passed on
// as this process has it.
ChildResult RunKnobChild(const char* knob, const char* const* soft = nullptr,
                         const char* const* node_ids = nullptr) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, "CIDMALLOC_RSEQ_MODE=", 20) == 0) continue;
    if (strncmp(*e, "CIDMALLOC_RSEQ_SOFT=", 20) == 0) continue;
    if (node_ids != nullptr &&
        strncmp(*e, "CIDMALLOC_RSEQ_NODE_IDS=", 24) == 0) {
      continue;
    }
    env.push_back(*e);
  }
  env.push_back(soft       ? "RSEQ_DETECTION_CHILD=soft"
                : node_ids ? "RSEQ_DETECTION_CHILD=ids"
                           : "RSEQ_DETECTION_CHILD=1");
  if (knob != nullptr) env.push_back(std::string("CIDMALLOC_RSEQ_MODE=") + knob);
  if (soft != nullptr && *soft != nullptr) {
    env.push_back(std::string("CIDMALLOC_RSEQ_SOFT=") + *soft);
  }
  if (node_ids != nullptr && *node_ids != nullptr) {
    env.push_back(std::string("CIDMALLOC_RSEQ_NODE_IDS=") + *node_ids);
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

// CIDMALLOC_RSEQ_NODE_IDS in the best mode: on makes cid mode's IDs
// node-qualified even on one node, off keeps raw cids, auto (also unset
// and empty) qualifies them on a machine with several nodes, and anything
// else warns in one line and means auto.  Where the kernel has no node_id
// (or the mode is not cid) every value gives raw IDs, but the warning
// stays.
TEST(Detection, NodeIdsKnobHonouredForEveryValue) {
  int own_probe = -1;
  struct Case {
    const char* knob;  // nullptr: unset
    bool warn_invalid;
  };
  const Case cases[] = {
      {nullptr, false}, {"auto", false}, {"on", false},
      {"off", false},   {"", false},     {"bogus", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("CIDMALLOC_RSEQ_NODE_IDS=") +
                 (c.knob ? c.knob : "(unset)"));
    const Expectation e = ComputeExpectation(kModeCid, &own_probe, c.knob);
    ChildResult r = RunKnobChild(nullptr, nullptr, &c.knob);
    ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)
        << "child status " << r.status << " stderr: " << r.err;
    const rs::IdKind kind = e.mode == kModeNone ? rs::IdKind::kNone
                            : e.node_qualified  ? rs::IdKind::kNodeQualified
                                                : rs::IdKind::kRaw;
    char want[128];
    snprintf(want, sizeof want, "id_kind=%d num_rseq_ids=%u\n",
             static_cast<int>(kind), e.num_rseq_ids);
    EXPECT_EQ(r.out, want) << Describe(e);
    if (c.warn_invalid) {
      EXPECT_EQ(r.err,
                "cidmalloc: CIDMALLOC_RSEQ_NODE_IDS=bogus is not one of "
                "auto|on|off; using auto\n");
    } else {
      EXPECT_EQ(r.err, "");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* child = getenv("RSEQ_DETECTION_CHILD");
  if (child != nullptr && strcmp(child, "ids") == 0) {
    // For Detection.NodeIdsKnobHonouredForEveryValue.
    const rs::ProcessState& p = rs::Process();
    printf("id_kind=%d num_rseq_ids=%u\n", static_cast<int>(p.id_kind),
           p.num_rseq_ids);
    return 0;
  }
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
