// tests/rseq/test_util.h: helpers shared by the rseq tests that do not
// depend on the rseq library itself: what the kernel and glibc offer
// (probed independently of the library), cpu pinning, the environment a
// test target was started with, a spin barrier.
//
// The expectations computed here are the tests' own model of
// rseq/registration.cc's contract; they must not call into the library.
#ifndef CIDMALLOC_TESTS_RSEQ_TEST_UTIL_H_
#define CIDMALLOC_TESTS_RSEQ_TEST_UTIL_H_

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/cpus.h"

// glibc 2.35+ exports where it registered each thread's rseq area.  Weak:
// null with an older libc.
extern "C" {
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace cidmalloc_test {

// Mirrors of the library's enums (rseq/state.h) as plain ints, so that this
// header does not depend on the library: 0 none, 1 cpu, 2 cid / 0 none,
// 1 glibc, 2 own.
enum ModeValue { kModeNone = 0, kModeCpu = 1, kModeCid = 2 };
enum RegValue { kRegNone = 0, kRegGlibc = 1, kRegOwn = 2 };

inline const char* ModeStr(int m) {
  return m == kModeCid ? "cid" : m == kModeCpu ? "cpu" : "none";
}
inline const char* RegStr(int r) {
  return r == kRegGlibc ? "glibc" : r == kRegOwn ? "own" : "none";
}

// Kernel ABI facts the tests check the library against (from
// include/uapi/linux/rseq.h and auxvec.h), written out here on purpose
// instead of taken from rseq/abi.h.
inline constexpr unsigned long kAtRseqFeatureSize = 27;
inline constexpr unsigned long kAtRseqAlign = 28;
inline constexpr uint32_t kFeatureEndNodeId = 24;  // node_id ends at 24.
inline constexpr uint32_t kFeatureEndMmCid = 28;   // mm_cid ends at 28.
inline constexpr uint32_t kSoftIds = 1024;         // rseq/state.h contract.

inline std::string Env(const char* name, const char* fallback = "") {
  const char* v = getenv(name);
  return v == nullptr ? std::string(fallback) : std::string(v);
}

inline bool EnvSet(const char* name) { return getenv(name) != nullptr; }

// ---- CPUs -------------------------------------------------------------------

using cidmalloc_testing::AllowedCpus;
using cidmalloc_testing::PinToCpu;

// Restores the calling thread's affinity mask when it goes out of scope.
class ScopedAffinity {
 public:
  ScopedAffinity() {
    CPU_ZERO(&saved_);
    ok_ = sched_getaffinity(0, sizeof saved_, &saved_) == 0;
  }
  ~ScopedAffinity() {
    if (ok_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;

 private:
  cpu_set_t saved_;
  bool ok_;
};

// getcpu(2) as a real system call (not the vDSO, not rseq).
inline bool SyscallGetcpu(unsigned* cpu, unsigned* node) {
  return syscall(SYS_getcpu, cpu, node, nullptr) == 0;
}

// Number of possible CPU numbers (highest possible cpu + 1), parsed here
// independently of the library.  0 if unknown.
// One more than the highest number in a sysfs cpu/node list file, or 0.
inline uint32_t SysfsListCount(const char* path);

inline uint32_t PossibleCpuCount() {
  return SysfsListCount("/sys/devices/system/cpu/possible");
}

// Possible NUMA nodes (1 where the kernel has no NUMA support).
inline uint32_t PossibleNodeCount() {
  const uint32_t n = SysfsListCount("/sys/devices/system/node/possible");
  return n > 0 ? n : 1;
}

inline uint32_t SysfsListCount(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == nullptr) return 0;
  char buf[256] = {0};
  const bool got = fgets(buf, sizeof buf, f) != nullptr;
  fclose(f);
  if (!got) return 0;
  long highest = -1;
  const char* p = buf;
  while (*p != '\0' && *p != '\n') {
    char* end = nullptr;
    long lo = strtol(p, &end, 10);
    if (end == p) return 0;
    long hi = lo;
    p = end;
    if (*p == '-') {
      ++p;
      hi = strtol(p, &end, 10);
      if (end == p) return 0;
      p = end;
    }
    if (hi > highest) highest = hi;
    if (*p == ',') ++p;
  }
  return highest < 0 ? 0 : static_cast<uint32_t>(highest + 1);
}

// Context switches of the calling thread so far (voluntary + involuntary).
// Unchanged across an interval: the thread was not switched out in it.
inline long ThreadSwitches() {
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return -1;
  return ru.ru_nvcsw + ru.ru_nivcsw;
}

// ---- What glibc and the kernel offer, probed without the library ------------

inline bool GlibcExportsRseq() { return &__rseq_size != nullptr; }

inline unsigned GlibcRseqSize() { return GlibcExportsRseq() ? __rseq_size : 0; }

// cpu_id of glibc's area for the calling thread (-2 / -1 when glibc's
// registration failed or is disabled); only meaningful if __rseq_size > 0.
inline int32_t GlibcAreaCpuId() {
  char* tp = static_cast<char*>(__builtin_thread_pointer());
  int32_t v;
  memcpy(&v, tp + __rseq_offset + 4, sizeof v);
  return v;
}

// Registers a private area with rseq(2) on a fresh thread (one the library
// never touched), then unregisters it.  True if the kernel accepted it.
// Only meaningful when glibc did not register the thread itself.
inline bool KernelAcceptsOwnRseqArea() {
  bool ok = false;
  std::thread t([&ok] {
    struct alignas(32) Area {
      uint32_t cpu_id_start;
      int32_t cpu_id;
      uint64_t rseq_cs;
      uint32_t flags;
      uint32_t node_id;
      uint32_t mm_cid;
      uint32_t pad;
    };
    static thread_local Area area = {0, -1, 0, 0, 0, 0, 0};
    constexpr uint32_t kSig = 0x0badc0deu;
    if (syscall(SYS_rseq, &area, sizeof area, 0, kSig) == 0) {
      ok = area.cpu_id >= 0;
      syscall(SYS_rseq, &area, sizeof area, 1 /* RSEQ_FLAG_UNREGISTER */,
              kSig);
    }
  });
  t.join();
  return ok;
}

// True if the calling thread already has an rseq area registered (by
// anyone): registering a second, different area then fails with EINVAL
// (EBUSY would mean the same area).  If the probe area gets registered the
// thread had none; it is unregistered again.
inline bool ThreadHasRseqRegistered() {
  struct alignas(32) Area {
    char bytes[32];
  };
  static thread_local Area probe = {};
  constexpr uint32_t kSig = 0x0badc0deu;
  const long r = syscall(SYS_rseq, &probe, sizeof probe, 0, kSig);
  if (r == 0) {
    syscall(SYS_rseq, &probe, sizeof probe, 1, kSig);
    return false;
  }
  return errno == EINVAL || errno == EBUSY;
}

inline bool MembarrierRseqSupported() {
  const long mask = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return mask > 0 && (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) != 0;
}

// membarrier's plain PRIVATE_EXPEDITED command (the soft IDs' owner
// protocol needs it).
inline bool MembarrierPrivateExpeditedSupported() {
  const long mask = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return mask > 0 && (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0;
}

// The fence command itself; succeeds only once the process (mm) registered
// for it.
inline bool RawRseqFenceWorks() {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0,
                 0) == 0;
}

// ---- What a test target expects ---------------------------------------------

inline int ParseMode(const std::string& v) {
  if (v == "none") return kModeNone;
  if (v == "cpu") return kModeCpu;
  return kModeCid;  // cid, empty, unset and anything invalid: no cap.
}

// The mode cap: EXPECT_MODE (set by the BUILD target) if present, else what
// CIDMALLOC_RSEQ_MODE asks for.
inline int ExpectedCap() {
  if (EnvSet("EXPECT_MODE")) return ParseMode(Env("EXPECT_MODE"));
  return ParseMode(Env("CIDMALLOC_RSEQ_MODE"));
}

// Which registration the target asks for: EXPECT_REGISTRATION if present,
// else inferred from GLIBC_TUNABLES.
inline int RequestedRegistration() {
  std::string v = Env("EXPECT_REGISTRATION");
  if (v == "own") return kRegOwn;
  if (v == "glibc") return kRegGlibc;
  return Env("GLIBC_TUNABLES").find("glibc.pthread.rseq=0") !=
                 std::string::npos
             ? kRegOwn
             : kRegGlibc;
}

struct Expectation {
  int cap = kModeCid;
  int registration = kRegNone;
  int best_mode = kModeNone;
  int mode = kModeNone;
  bool has_node_id = false;
  bool cid_readable = false;  // CurrentCid() >= 0
  bool fence = false;
  uint32_t feature_size = 0;
  uint32_t rseq_align = 0;
  uint32_t possible_cpus = 0;
  uint32_t num_rseq_ids = 0;
  uint32_t num_ids = 0;
  bool kernel_rseq = false;  // rseq(2) works for some registrant.
  // cid mode with node_id, and several nodes or CIDMALLOC_RSEQ_NODE_IDS=on
  // (and not =off): IDs are node_id * possible_cpus + mm_cid.
  bool node_qualified = false;
  uint32_t nodes = 1;  // Possible nodes.
};

// The state the library must report, for mode cap `cap`, computed from
// auxv, glibc's exported symbols and kernel probes.  `own_probe` caches
// KernelAcceptsOwnRseqArea() (-1: not probed yet).  `node_ids` is the value
// of CIDMALLOC_RSEQ_NODE_IDS the library sees (nullptr: unset), by default
// this process's.
inline Expectation ComputeExpectation(
    int cap, int* own_probe = nullptr,
    const char* node_ids_knob = getenv("CIDMALLOC_RSEQ_NODE_IDS")) {
  Expectation e;
  e.cap = cap;
  e.feature_size = static_cast<uint32_t>(getauxval(kAtRseqFeatureSize));
  e.rseq_align = static_cast<uint32_t>(getauxval(kAtRseqAlign));
  e.possible_cpus = PossibleCpuCount();
  if (GlibcRseqSize() > 0) {
    // glibc registered every thread; the library uses that (or nothing, if
    // glibc's own attempt failed) and never registers another area.
    e.registration = GlibcAreaCpuId() >= 0 ? kRegGlibc : kRegNone;
    e.kernel_rseq = e.registration != kRegNone;
  } else {
    int probe = own_probe != nullptr ? *own_probe : -1;
    if (probe < 0) probe = KernelAcceptsOwnRseqArea() ? 1 : 0;
    if (own_probe != nullptr) *own_probe = probe;
    e.kernel_rseq = probe == 1;
    // The library only registers its own area when it may use it.
    e.registration = (probe == 1 && cap != kModeNone) ? kRegOwn : kRegNone;
  }
  if (e.registration != kRegNone) {
    e.best_mode = e.feature_size >= kFeatureEndMmCid ? kModeCid : kModeCpu;
    e.has_node_id = e.feature_size >= kFeatureEndNodeId;
    e.cid_readable = e.feature_size >= kFeatureEndMmCid;
  }
  e.mode = cap < e.best_mode ? cap : e.best_mode;
  e.fence = e.mode != kModeNone && MembarrierRseqSupported();
  e.nodes = PossibleNodeCount();
  // Anything but on and off means auto (an invalid value with a warning).
  const std::string node_ids = node_ids_knob != nullptr ? node_ids_knob : "";
  e.node_qualified = e.mode == kModeCid && e.has_node_id &&
                     node_ids != "off" &&
                     (node_ids == "on" || e.nodes >= 2) &&
                     e.nodes * e.possible_cpus <= 8192;
  e.num_rseq_ids = e.mode != kModeNone ? e.possible_cpus : 0;
  if (e.node_qualified) e.num_rseq_ids *= e.nodes;
  e.num_ids = e.num_rseq_ids + kSoftIds;
  return e;
}

inline Expectation ExpectedForThisProcess() {
  return ComputeExpectation(ExpectedCap());
}

// ---- Synchronisation ----------------------------------------------------------

// A spin-wait hint: `pause` on x86-64, `yield` on AArch64.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A reusable spin barrier for `n` threads (spins, then yields).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void Wait() {
    const uint32_t gen = gen_.load(std::memory_order_acquire);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      waiting_.store(0, std::memory_order_relaxed);
      gen_.store(gen + 1, std::memory_order_release);
      return;
    }
    int spins = 0;
    while (gen_.load(std::memory_order_acquire) == gen) {
      if (++spins > 2000) {
        sched_yield();
        spins = 0;
      } else {
        CpuRelax();
      }
    }
  }

 private:
  const int n_;
  std::atomic<int> waiting_{0};
  std::atomic<uint32_t> gen_{0};
};

// A small deterministic PRNG (xorshift64*), one per thread.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 2685821657736338717ull;
  }
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(Next() % n); }

 private:
  uint64_t s_;
};

}  // namespace cidmalloc_test

#endif  // CIDMALLOC_TESTS_RSEQ_TEST_UTIL_H_
