// Shared helpers of the benchmark workloads (bench/workloads/README.md).
//
// Header-only on purpose: every workload is one cc_binary that links
// nothing but libc, libstdc++ and pthread, so that the same binary can be
// measured under glibc malloc and under any allocator preloaded with
// LD_PRELOAD.
//
// What is here:
//   - Fail(): print "FAIL <workload>: <message>" on stderr and exit 1.
//   - Args: "--quick", "--threads=N" and "--key=value" flags; unknown flags
//     are an error (exit 2).
//   - Rng: a xorshift64* generator seeded through splitmix64.  Fixed seeds
//     make every run do exactly the same work.
//   - Object stamps: a self-describing header (id, size, check bits) in the
//     first word(s) of an object and a tail word, so that whoever frees an
//     object, on whatever thread, can check that it is intact.
//   - Escape(): an opaque barrier that keeps the compiler from eliding a
//     malloc/free pair.
//   - Cpu pinning and VmHWM / VmRSS from /proc/self/status.
#ifndef CIDMALLOC_BENCH_WORKLOADS_COMMON_H_
#define CIDMALLOC_BENCH_WORKLOADS_COMMON_H_

#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

namespace wl {

// The workload's name, for messages ("micro", "server", ...).
inline const char* g_name = "workload";

// Prints "FAIL <name>: <message>" on stderr and exits with status 1.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void Fail(
    const char* fmt, ...) {
  fflush(stdout);
  fprintf(stderr, "FAIL %s: ", g_name);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  _exit(1);
}

// Prints "skip: <reason>" on stdout and exits with status 77.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void Skip(
    const char* fmt, ...) {
  printf("skip: ");
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
  _exit(77);
}

// Command-line flags: "--quick", "--threads=N" and the "--key=value" flags
// named in `allowed` (a space-separated list of keys, without "--").
class Args {
 public:
  Args(int argc, char** argv, std::string_view allowed) {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a == "--quick") {
        quick_ = true;
        continue;
      }
      if (a == "--help" || a == "-h") {
        printf("usage: %s [--quick] [--threads=N]", g_name);
        PrintAllowed(allowed);
        printf("\n");
        exit(0);
      }
      size_t eq = a.find('=');
      if (a.substr(0, 2) != "--" || eq == std::string_view::npos) {
        Usage(a, allowed);
      }
      std::string_view key = a.substr(2, eq - 2);
      if (key != "threads" && !Contains(allowed, key)) Usage(a, allowed);
      keys_.emplace_back(key);
      values_.emplace_back(a.substr(eq + 1));
    }
  }

  bool quick() const { return quick_; }

  std::string Get(std::string_view key, std::string_view dflt) const {
    for (size_t i = keys_.size(); i-- > 0;) {
      if (keys_[i] == key) return values_[i];
    }
    return std::string(dflt);
  }

  // An integer flag in [lo, hi].
  long GetInt(std::string_view key, long dflt, long lo, long hi) const {
    std::string v = Get(key, "");
    if (v.empty()) return dflt;
    char* end = nullptr;
    long n = strtol(v.c_str(), &end, 10);
    if (*end != '\0' || n < lo || n > hi) {
      fprintf(stderr, "%s: bad --%.*s=%s (want an integer in [%ld, %ld])\n",
              g_name, static_cast<int>(key.size()), key.data(), v.c_str(),
              lo, hi);
      exit(2);
    }
    return n;
  }

  int Threads(int dflt) const {
    return static_cast<int>(GetInt("threads", dflt, 1, 4096));
  }

  // A flag whose value must be one of `choices` (space-separated).
  std::string GetChoice(std::string_view key, std::string_view choices,
                        std::string_view dflt) const {
    std::string v = Get(key, dflt);
    if (!Contains(choices, v)) {
      fprintf(stderr, "%s: bad --%.*s=%s (one of: %.*s)\n", g_name,
              static_cast<int>(key.size()), key.data(), v.c_str(),
              static_cast<int>(choices.size()), choices.data());
      exit(2);
    }
    return v;
  }

 private:
  static bool Contains(std::string_view list, std::string_view word) {
    size_t pos = 0;
    while (pos < list.size()) {
      size_t sp = list.find(' ', pos);
      if (sp == std::string_view::npos) sp = list.size();
      if (list.substr(pos, sp - pos) == word) return true;
      pos = sp + 1;
    }
    return false;
  }

  static void PrintAllowed(std::string_view allowed) {
    size_t pos = 0;
    while (pos < allowed.size()) {
      size_t sp = allowed.find(' ', pos);
      if (sp == std::string_view::npos) sp = allowed.size();
      if (sp > pos) {
        printf(" [--%.*s=...]", static_cast<int>(sp - pos),
               allowed.data() + pos);
      }
      pos = sp + 1;
    }
  }

  [[noreturn]] static void Usage(std::string_view arg,
                                 std::string_view allowed) {
    fprintf(stderr, "%s: unknown argument '%.*s'\nusage: %s [--quick] "
            "[--threads=N]", g_name, static_cast<int>(arg.size()),
            arg.data(), g_name);
    fflush(stderr);
    size_t pos = 0;
    while (pos < allowed.size()) {
      size_t sp = allowed.find(' ', pos);
      if (sp == std::string_view::npos) sp = allowed.size();
      if (sp > pos) {
        fprintf(stderr, " [--%.*s=...]", static_cast<int>(sp - pos),
                allowed.data() + pos);
      }
      pos = sp + 1;
    }
    fputc('\n', stderr);
    exit(2);
  }

  bool quick_ = false;
  std::vector<std::string> keys_;
  std::vector<std::string> values_;
};

// ---- Random numbers -------------------------------------------------------

// splitmix64: turns any 64-bit value into a well-mixed one.  Used to derive
// seeds and as the hash behind object stamps.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The fixed base seed of every workload; per-thread seeds are derived from
// it with Mix64(kBaseSeed + stream).
inline constexpr uint64_t kBaseSeed = 0x63696d616c6c6f63ULL;  // "cidmalloc"

// xorshift64* (Marsaglia's xorshift, multiplied on output).
class Rng {
 public:
  explicit Rng(uint64_t stream) : s_(Mix64(kBaseSeed + stream) | 1) {}

  uint64_t Next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545f4914f6cdd1dULL;
  }

  // Uniform in [0, n), n > 0 (multiply-shift; the bias is negligible here).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>(
        (static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

  // Uniform in [lo, hi].
  uint64_t Range(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }

  // True with probability num/den.
  bool Chance(uint64_t num, uint64_t den) { return Below(den) < num; }

  // Log-uniform in [lo, hi] (lo >= 1): as many values in [16, 32) as in
  // [512, 1024), the shape of real object-size distributions.
  uint64_t LogRange(uint64_t lo, uint64_t hi) {
    int lo_bit = 63 - __builtin_clzll(lo);
    int hi_bit = 63 - __builtin_clzll(hi);
    int bit = lo_bit + static_cast<int>(Below(hi_bit - lo_bit + 1));
    uint64_t base = 1ULL << bit;
    uint64_t v = base + Below(base);
    return v < lo ? lo : (v > hi ? hi : v);
  }

 private:
  uint64_t s_;
};

// ---- Object stamps --------------------------------------------------------
//
// An object of `size` bytes (8 <= size <= kMaxStampSize) carries:
//   word 0:           id (36 bits) | size - 1 (13 bits) | check (15 bits)
//   word 1 (size>=16): Mix64(word 0)
//   last word (size>=24, at size - 8, unaligned): ~Mix64(word 0)
// so the object itself says what it is, and whoever frees it can check it
// without any side table.  Larger objects carry FillPattern (below), which
// the caller checks with CheckPattern and the size it kept.

inline constexpr size_t kMaxStampSize = 8192;
inline constexpr uint64_t kIdMask = (1ULL << 36) - 1;

inline uint64_t StampWord(uint64_t id, size_t size) {
  uint64_t head = ((id & kIdMask) << 28) | ((size - 1) << 15);
  return head | (Mix64(head) & 0x7fff);
}

inline void StoreWord(void* p, size_t offset, uint64_t v) {
  memcpy(static_cast<char*>(p) + offset, &v, 8);
}

inline uint64_t LoadWord(const void* p, size_t offset) {
  uint64_t v;
  memcpy(&v, static_cast<const char*>(p) + offset, 8);
  return v;
}

// Writes the stamp of object `id` into p[0, size).
inline void Stamp(void* p, size_t size, uint64_t id) {
  uint64_t w = StampWord(id, size);
  StoreWord(p, 0, w);
  if (size >= 16) StoreWord(p, 8, Mix64(w));
  if (size >= 24) StoreWord(p, size - 8, ~Mix64(w));
}

// Checks the stamp of p and returns its id and size; Fail()s with `where`
// in the message when the object is corrupt.
inline void CheckStamp(const void* p, const char* where, uint64_t* id,
                       size_t* size) {
  uint64_t w = LoadWord(p, 0);
  uint64_t head = w & ~0x7fffULL;
  size_t n = ((w >> 15) & 0x1fff) + 1;
  if ((Mix64(head) & 0x7fff) != (w & 0x7fff)) {
    Fail("%s: object %p: bad stamp word 0x%016llx", where, p,
         static_cast<unsigned long long>(w));
  }
  if (n >= 16 && LoadWord(p, 8) != Mix64(w)) {
    Fail("%s: object %p (size %zu): second word corrupt", where, p, n);
  }
  if (n >= 24 && LoadWord(p, n - 8) != ~Mix64(w)) {
    Fail("%s: object %p (size %zu): last word corrupt", where, p, n);
  }
  *id = w >> 28;
  *size = n;
}

// The checksum contribution of object `id`: sums of these over allocated
// and over freed objects must match at the end.
inline uint64_t IdSum(uint64_t id) { return Mix64(id ^ 0x5bd1e995ULL); }

// Fills p[0, size) with a byte pattern derived from `cookie`.
inline void FillPattern(void* p, size_t size, uint64_t cookie) {
  unsigned char* b = static_cast<unsigned char*>(p);
  uint64_t w = Mix64(cookie);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    memcpy(b + i, &w, 8);
    w += 0x9e3779b97f4a7c15ULL;
  }
  for (; i < size; ++i) b[i] = static_cast<unsigned char>(w >> (8 * (i & 7)));
}

// True if p[0, size) holds FillPattern(cookie).
inline bool CheckPattern(const void* p, size_t size, uint64_t cookie) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t w = Mix64(cookie);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    if (LoadWord(b, i) != w) return false;
    w += 0x9e3779b97f4a7c15ULL;
  }
  for (; i < size; ++i) {
    if (b[i] != static_cast<unsigned char>(w >> (8 * (i & 7)))) return false;
  }
  return true;
}

// FNV-1a over bytes, for content checksums.
inline uint64_t Fnv1a(const void* p, size_t n,
                      uint64_t h = 0xcbf29ce484222325ULL) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

// Opaque to the optimiser: the compiler must assume that `p` escapes and
// that memory may be read or written, so it can neither drop a malloc/free
// pair nor the stores into the object.
inline void Escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// ---- Time, cpus, memory ---------------------------------------------------

inline double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The lowest-numbered cpu in the process's allowed set, or -1.
inline int FirstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) return c;
  }
  return -1;
}

// Pins the calling thread to `cpu`; false on failure (errno set).
inline bool PinCallingThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

// The value in kB of a "Key:   N kB" line of /proc/self/status, or -1.
// Reads with stdio on a stack buffer: a few small allocations at most, and
// outside any measured loop.
inline long StatusKb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  size_t klen = strlen(key);
  long kb = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
      kb = strtol(line + klen + 1, nullptr, 10);
      break;
    }
  }
  fclose(f);
  return kb;
}

// Prints the standard trailing lines: "metric wall_ms=..." for the measured
// phase, then "ok <name> <summary>".
__attribute__((format(printf, 2, 3))) inline void Ok(double seconds,
                                                     const char* fmt, ...) {
  printf("metric wall_ms=%.1f\n", seconds * 1e3);
  printf("ok %s ", g_name);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

}  // namespace wl

#endif  // CIDMALLOC_BENCH_WORKLOADS_COMMON_H_
