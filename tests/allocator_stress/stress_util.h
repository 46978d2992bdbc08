// tests/allocator_stress/stress_util.h: helpers shared by the allocator
// stress tests: a deterministic PRNG, a blocking barrier, cpu pinning, the
// process's resident set size, the mode a target asked for (BUILD sets
// EXPECT_MODE / EXPECT_REGISTRATION next to the CIDMALLOC_* knobs), and a
// fork helper whose children report through their exit status and a pipe.
//
// Everything here is the tests' own code; it only talks to the allocator
// through the public interface (malloc & co, cidmalloc.h).
#ifndef CIDMALLOC_TESTS_ALLOCATOR_STRESS_STRESS_UTIL_H_
#define CIDMALLOC_TESTS_ALLOCATOR_STRESS_STRESS_UTIL_H_

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/common/cpus.h"

namespace cidmalloc_stress {

// ---- Randomness -----------------------------------------------------------

// splitmix64: every seed gives an independent, reproducible stream.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed ^ 0x5DEECE66Dull) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0.
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Uniform in [lo, hi].
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
  // True with probability num/den.
  bool Chance(uint64_t num, uint64_t den) { return Below(den) < num; }

 private:
  uint64_t s_;
};

// A 64-bit mix of two words (for cookies and tags).
inline uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
  z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 32);
}

// ---- Threads ----------------------------------------------------------------

// A reusable blocking barrier (threads sleep, so 32 threads on 2 cpus do
// not starve the one that has to arrive last).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t gen = gen_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(l, [&] { return gen_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int waiting_ = 0;
  uint64_t gen_ = 0;
};

using cidmalloc_testing::AllowedCpus;
using cidmalloc_testing::PinToCpu;

// ---- Memory -------------------------------------------------------------------

// Reads the start of a small file (of /proc) into buf, NUL-terminated,
// with open/read: no stdio buffer, no allocation.  Returns the bytes read,
// 0 if unreadable.
inline size_t ReadSmallFile(const char* path, char* buf, size_t size) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return static_cast<size_t>(n);
}

// Resident set size of the process in bytes, from /proc/self/statm,
// without allocating.  0 if unreadable.
inline size_t ResidentBytes() {
  char buf[128];
  if (ReadSmallFile("/proc/self/statm", buf, sizeof buf) == 0) return 0;
  unsigned long size = 0, resident = 0;
  if (sscanf(buf, "%lu %lu", &size, &resident) != 2) return 0;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Allocates `count` objects of 16 B - 1 KiB (each written) and frees them
// in a random order: the calling thread's cache keeps as many as its
// capacity allows.
inline void AllocateAndFreeSmall(uint64_t seed, size_t count) {
  Rng rng(seed);
  std::vector<void*> objs(count);
  for (void*& p : objs) {
    const size_t size = rng.Range(16, 1024);
    p = malloc(size);
    ASSERT_NE(p, nullptr);
    memset(p, 0x5a, size);
  }
  for (size_t i = objs.size(); i > 1; --i) {
    std::swap(objs[i - 1], objs[rng.Below(i)]);
  }
  for (void* p : objs) free(p);
}

inline constexpr size_t kKiB = 1024;
inline constexpr size_t kMiB = 1024 * 1024;

inline double ToMiB(size_t bytes) { return static_cast<double>(bytes) / kMiB; }

// Slow paths on the calling thread (which run the front end's idle scan
// and sweeps when due): 64 objects of 40 KiB, more than the class's stack
// holds (8; a batch is 2), so that their mallocs refill and their frees
// find the stack full.
inline void RunSlowPaths() {
  void* p[64];
  for (void*& q : p) {
    q = malloc(40 * kKiB);
    ASSERT_NE(q, nullptr);
  }
  for (void* q : p) free(q);
}

inline cidmalloc_stats Stats() {
  cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  return s;
}

// Bytes in use according to the allocator (program + front-end caches).
inline size_t InUseBytes(const cidmalloc_stats& s) {
  size_t total = 0;
  for (unsigned n = 0; n < s.num_nodes; ++n) total += s.node_in_use[n];
  return total;
}

// ---- What the target asked for --------------------------------------------------

inline std::string Env(const char* name, const char* fallback = "") {
  const char* v = getenv(name);
  return v == nullptr ? std::string(fallback) : std::string(v);
}

// The integer in environment variable `name` if it is in [lo, hi], else
// `fallback` (unset, not a number, out of range).
inline long EnvInRange(const char* name, long lo, long hi, long fallback) {
  const std::string v = Env(name);
  const long n = strtol(v.c_str(), nullptr, 10);
  return n >= lo && n <= hi ? n : fallback;
}

// The mode this process must run in: EXPECT_MODE (the cap the BUILD target
// set), lowered to what the kernel offers (mm_cid needs an rseq feature
// size of at least 28, rseq itself a feature size or a working glibc
// registration).  Kernel 6.18 offers cid; older kernels lower it.
inline std::string ExpectedMode() {
  const std::string cap = Env("EXPECT_MODE", "cid");
  const unsigned long feature_size = getauxval(27 /* AT_RSEQ_FEATURE_SIZE */);
  // mm_cid ends at byte 28 of struct rseq, node_id at 24.
  std::string best = feature_size >= 28 ? "cid" : feature_size > 0 ? "cpu" : "";
  if (best.empty()) return "";  // Unknown: the caller does not check.
  if (cap == "none") return "none";
  if (cap == "cpu" || best == "cpu") return "cpu";
  return "cid";
}

inline std::string ExpectedRegistration() {
  if (ExpectedMode() == "none" && Env("EXPECT_REGISTRATION") == "own") {
    return "none";  // No own area is registered in none mode.
  }
  return Env("EXPECT_REGISTRATION", "glibc");
}

// Checks that cidmalloc runs in the mode and with the registration the
// target asked for (so an environment lost on the way fails loudly; it also
// caught the library initialising twice, which fell back to none mode under
// GLIBC_TUNABLES=glibc.pthread.rseq=0).
inline void CheckTargetMode() {
  const cidmalloc_stats s = Stats();
  const std::string want_mode = ExpectedMode();
  if (want_mode.empty()) return;  // Kernel without rseq feature size.
  EXPECT_STREQ(s.mode, want_mode.c_str());
  // In none mode the registration is checked only where the target denied
  // rseq altogether (TEST_DENY_RSEQ, //tests/common:deny_rseq): then none
  // was registered, neither by glibc nor by cidmalloc.
  if (want_mode != "none" || Env("EXPECT_REGISTRATION") == "none") {
    EXPECT_STREQ(s.registration, ExpectedRegistration().c_str());
  }
}

// ---- fork ---------------------------------------------------------------------

// Failures of a fork child, written one line each into a pipe; the child
// never touches gtest.
class ChildReport {
 public:
  explicit ChildReport(int fd) : fd_(fd) {}
  void Check(bool ok, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    if (ok) return;
    ++failures_;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n > static_cast<int>(sizeof buf) - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t unused = write(fd_, buf, static_cast<size_t>(n));
    (void)unused;
  }
  int failures() const { return failures_; }

 private:
  int fd_;
  int failures_ = 0;
};

// CIDMALLOC_TEST_TIMEOUT_SCALE=N (an integer from 1 to 100; default 1)
// multiplies the watchdog timeouts of these tests, for emulated machines
// (tests/vm's AArch64 scenarios run under qemu's TCG, several times slower
// than the x86-64 ones).
inline unsigned TimeoutScale() {
  return static_cast<unsigned>(
      EnvInRange("CIDMALLOC_TEST_TIMEOUT_SCALE", 1, 100, 1));
}

// Forks; the child arms alarm(timeout * TimeoutScale()), runs body(report)
// and _exits 0 iff
// every check passed.  The parent waits.  Returns "" if the child exited
// normally with status 0 and reported nothing, else a description.
// If `in_fork` is given, it is true while this thread is inside fork().
template <typename Body>
std::string RunInChild(int timeout_seconds, Body body,
                       std::atomic<bool>* in_fork = nullptr) {
  // Before the fork: the child arms its watchdog before it allocates.
  const unsigned alarm_seconds =
      static_cast<unsigned>(timeout_seconds) * TimeoutScale();
  int p[2];
  if (pipe(p) != 0) return "pipe failed";
  if (in_fork != nullptr) in_fork->store(true);
  const pid_t pid = fork();
  if (in_fork != nullptr) in_fork->store(false);
  if (pid < 0) return std::string("fork failed: ") + strerror(errno);
  if (pid == 0) {
    close(p[0]);
    alarm(alarm_seconds);
    ChildReport report(p[1]);
    body(report);
    _exit(report.failures() == 0 ? 0 : 1);
  }
  close(p[1]);
  std::string msgs;
  char buf[4096];
  for (;;) {
    const ssize_t r = read(p[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    msgs.append(buf, static_cast<size_t>(r));
  }
  close(p[0]);
  int status = 0;
  pid_t w;
  do {
    w = waitpid(pid, &status, 0);
  } while (w < 0 && errno == EINTR);
  if (w != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) {
    return "child killed by signal " + std::to_string(WTERMSIG(status)) +
           (WTERMSIG(status) == SIGALRM ? " (timed out: deadlock?)" : "") +
           "; " + msgs;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !msgs.empty()) {
    return "child exit status " + std::to_string(WEXITSTATUS(status)) + ": " +
           msgs;
  }
  return "";
}

// ---- Running a test in a subprocess ------------------------------------------

// Set in the environment of a subprocess started by RunTestInSubprocess.
inline constexpr char kSubprocessEnv[] = "CIDMALLOC_STRESS_SUBPROCESS";

inline bool InSubprocess() { return getenv(kSubprocessEnv) != nullptr; }

// Runs this test binary again, restricted to the gtest `filter`, with the
// same environment plus kSubprocessEnv=1, and waits for it.  Started with
// posix_spawn, which runs no fork handlers: a test that may hang in fork()
// itself is isolated this way.  Returns the wait status, or -1.
inline int RunTestInSubprocess(const std::string& filter) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.push_back(*e);
  env_strings.push_back(std::string(kSubprocessEnv) + "=1");
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string flag = "--gtest_filter=" + filter;
  char* argv[] = {exe.data(), flag.data(), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) {
    return -1;
  }
  int status = 0;
  pid_t w;
  do {
    w = waitpid(pid, &status, 0);
  } while (w < 0 && errno == EINTR);
  return w == pid ? status : -1;
}

inline std::string DescribeWaitStatus(int status) {
  if (status == -1) return "no subprocess";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "wait status " + std::to_string(status);
}

// Exit status of a subprocess that saw a known bug its target declares
// (see KnownBug): the parent turns it into a skip.
inline constexpr int kKnownBugExit = 42;

inline void ExitWithKnownBug(const std::string& what) {
  fprintf(stderr, "known bug: %s\n", what.c_str());
  fflush(stdout);
  fflush(stderr);
  _exit(kKnownBugExit);
}

// What a known bug looks like from outside the subprocess.
struct KnownBug {
  const char* env = nullptr;  // Target env var that says "present": "1".
  int exit_status = -1;       // The subprocess exits with this status...
  int signal = -1;            // ...or dies of this signal.
  const char* summary = "";
};

// Runs the current test again in a subprocess (RunTestInSubprocess) and
// expects it to pass.  Call from the test body when !InSubprocess(), then
// return.  If the target sets bug.env=1 and the subprocess fails the way
// `bug` describes, the test is skipped; if it passes, the test fails so
// that the stale marker gets removed from BUILD.
inline void RunThisTestInSubprocess(const KnownBug& bug = KnownBug()) {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      std::string(info->test_suite_name()) + "." + info->name();
  const int status = RunTestInSubprocess(filter);
  ASSERT_NE(status, -1) << "could not start the subprocess";
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const bool looks_like_bug =
      (bug.exit_status >= 0 && WIFEXITED(status) &&
       WEXITSTATUS(status) == bug.exit_status) ||
      (bug.signal >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == bug.signal);
  if (bug.env != nullptr && Env(bug.env) == "1") {
    if (looks_like_bug) {
      GTEST_SKIP() << bug.env << " (known bug): " << bug.summary << " ["
                   << DescribeWaitStatus(status) << "]";
    }
    if (ok) {
      ADD_FAILURE() << bug.env << " seems fixed: remove " << bug.env
                    << " from this target in tests/allocator_stress/BUILD";
    }
  }
  EXPECT_TRUE(ok) << filter << " in a subprocess: "
                  << DescribeWaitStatus(status)
                  << (looks_like_bug ? std::string(": ") + bug.summary : "");
}

}  // namespace cidmalloc_stress

#endif  // CIDMALLOC_TESTS_ALLOCATOR_STRESS_STRESS_UTIL_H_
