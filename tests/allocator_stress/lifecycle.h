// tests/allocator_stress/lifecycle.h: what the lifecycle test's sources
// share (lifecycle_test.cc, lifecycle_fork_test.cc): blocks with a
// pattern of their tag, and the disjointness check.
#ifndef CIDMALLOC_TESTS_ALLOCATOR_STRESS_LIFECYCLE_H_
#define CIDMALLOC_TESTS_ALLOCATOR_STRESS_LIFECYCLE_H_

#include <gtest/gtest.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace cidmalloc_lifecycle {

using namespace cidmalloc_stress;  // NOLINT

// Fills [p, p + size) with a pattern of `tag`: every byte of blocks up to
// 4 KiB; of larger ones, the first and last 256 bytes and one 8-byte word per
// 4 KiB.  Intact() checks it.
template <typename F>
inline void ForEachPatternWord(size_t size, F f) {
  const size_t words = size / 8;
  if (size <= 4 * kKiB) {
    for (size_t w = 0; w < words; ++w) f(w);
  } else {
    for (size_t w = 0; w < 32; ++w) f(w);
    for (size_t w = 512; w < words - 32; w += 512) f(w);
    for (size_t w = words - 32; w < words; ++w) f(w);
  }
}
inline uint64_t PatternWord(uint64_t tag, size_t w) {
  return tag ^ (w * 0x9E3779B97F4A7C15ull);
}
inline void Fill(void* p, size_t size, uint64_t tag) {
  char* c = static_cast<char*>(p);
  ForEachPatternWord(size, [&](size_t w) {
    const uint64_t v = PatternWord(tag, w);
    memcpy(c + w * 8, &v, 8);
  });
  for (size_t i = size / 8 * 8; i < size; ++i) c[i] = static_cast<char>(tag + i);
}
inline bool Intact(const void* p, size_t size, uint64_t tag) {
  const char* c = static_cast<const char*>(p);
  bool ok = true;
  ForEachPatternWord(size, [&](size_t w) {
    uint64_t v;
    memcpy(&v, c + w * 8, 8);
    ok = ok && v == PatternWord(tag, w);
  });
  for (size_t i = size / 8 * 8; i < size; ++i) {
    ok = ok && c[i] == static_cast<char>(tag + i);
  }
  return ok;
}

struct Block {
  void* p = nullptr;
  size_t size = 0;
  uint64_t tag = 0;
};

// Checks that blocks [p, p + size) of `blocks` are pairwise disjoint.
inline ::testing::AssertionResult Disjoint(std::vector<Block> blocks) {
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) {
    return reinterpret_cast<uintptr_t>(a.p) < reinterpret_cast<uintptr_t>(b.p);
  });
  for (size_t i = 1; i < blocks.size(); ++i) {
    const uintptr_t prev_end =
        reinterpret_cast<uintptr_t>(blocks[i - 1].p) +
        std::max<size_t>(blocks[i - 1].size, 1);
    if (reinterpret_cast<uintptr_t>(blocks[i].p) < prev_end) {
      return ::testing::AssertionFailure()
             << "live blocks overlap: " << blocks[i - 1].p << " ("
             << blocks[i - 1].size << " bytes) and " << blocks[i].p;
    }
  }
  return ::testing::AssertionSuccess();
}

inline size_t SizeFor(uint64_t i) {
  static const size_t kSizes[] = {1,    8,     16,    24,     100,      256,
                                  1000, 4096,  20000, 65536,  70000,    300000,
                                  0,    3 * kMiB};
  return kSizes[i % (sizeof kSizes / sizeof kSizes[0])];
}

}  // namespace cidmalloc_lifecycle

#endif  // CIDMALLOC_TESTS_ALLOCATOR_STRESS_LIFECYCLE_H_
