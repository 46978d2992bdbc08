// tests/allocator/api_conformance.h: what the api_conformance sources
// share (api_conformance_test.cc, api_conformance_realloc_test.cc,
// api_conformance_glibc_test.cc, api_conformance_new_test.cc): glibc's
// internal names, the sizes the tests walk, and the checks of one block.
// The sources build into one binary per environment (see BUILD).
#ifndef CIDMALLOC_TESTS_ALLOCATOR_API_CONFORMANCE_H_
#define CIDMALLOC_TESTS_ALLOCATOR_API_CONFORMANCE_H_

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "allocator/central/size_classes.h"
#include "allocator/os/topology.h"
#include "gtest/gtest.h"
#include "rseq/rseq.h"
#include "tests/allocator/alloc_probe.h"
#include "tests/allocator/test_util.h"

// glibc's internal names, which cidmalloc defines as aliases.  Declared
// here: no public header does.
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
int __posix_memalign(void**, size_t, size_t);
void cfree(void*);
// C23, not yet in glibc 2.36's headers.
void free_sized(void*, size_t);
void free_aligned_sized(void*, size_t, size_t);
}

// These tests look at blocks after freeing them (and free them twice) on
// purpose; the pointers also go through Opaque() so the optimiser cannot
// reason about them.
#pragma GCC diagnostic ignored "-Wuse-after-free"

namespace cidmalloc_conformance {

using cidmalloc::central::Class;
using cidmalloc::central::ClassOf;
using cidmalloc::central::kMaxSmallSize;
using cidmalloc::central::kNumClasses;
using cidmalloc_test::BlockKind;
using cidmalloc_test::Dirty;
using cidmalloc_test::FillPattern;
using cidmalloc_test::FirstNonZero;
using cidmalloc_test::FirstPatternMismatch;
using cidmalloc_test::IsAligned;
using cidmalloc_test::KindOf;
using cidmalloc_test::LooksFreed;
using cidmalloc_test::Opaque;

constexpr size_t kMaxAlign = alignof(max_align_t);
constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kPage = 4096;

static_assert(kMaxAlign == 16);

// Sizes that a malloc-family test walks: every size up to 2 KiB, each class
// size and its neighbours, a stride through the rest of the small range,
// and large and huge sizes around the page, chunk and small-limit edges.
inline std::vector<size_t> SampleSizes() {
  std::set<size_t> s;
  for (size_t i = 0; i <= 2048; ++i) s.insert(i);
  for (int c = 1; c < kNumClasses; ++c) {
    const size_t n = Class(c).size;
    for (size_t d = 0; d <= 2; ++d) {
      s.insert(n - d);
      s.insert(n + d);
    }
  }
  for (size_t i = 2048; i <= 70000; i += 61) s.insert(i);
  for (size_t n : {size_t{65535}, size_t{65536}, size_t{65537}, size_t{69999},
                   size_t{70000}}) {
    s.insert(n);
  }
  return {s.begin(), s.end()};
}

// Checks one block returned for a request of `size` bytes: non-null,
// aligned, usable size, and writable over its whole usable size.
inline void CheckBlock(void* p, size_t size, size_t align, const char* what) {
  SCOPED_TRACE(testing::Message() << what << " size " << size << " align "
                                  << align);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(IsAligned(p, align)) << p;
  const size_t usable = malloc_usable_size(p);
  EXPECT_GE(usable, size);
  unsigned char* b = static_cast<unsigned char*>(p);
  if (usable > 0) {
    b[0] = 0x5a;
    b[usable - 1] = 0xa5;
  }
  if (size > 0) b[size - 1] = 0x3c;
}

// Blocks [p, p + usable) must not overlap.
inline void ExpectDisjoint(std::vector<std::pair<uintptr_t, size_t>> blocks) {
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_LE(blocks[i - 1].first + blocks[i - 1].second, blocks[i].first)
        << "blocks " << i - 1 << " and " << i << " overlap";
  }
}

inline cidmalloc_stats Stats() {
  cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  return s;
}

inline unsigned long long TotalOf(const unsigned long long (&per_node)[CIDMALLOC_MAX_NODES],
                           unsigned nodes) {
  unsigned long long t = 0;
  for (unsigned n = 0; n < nodes; ++n) t += per_node[n];
  return t;
}

}  // namespace cidmalloc_conformance

#endif  // CIDMALLOC_TESTS_ALLOCATOR_API_CONFORMANCE_H_
