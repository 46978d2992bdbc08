// tests/allocator/huge_pages_test.cc: CIDMALLOC_HUGE_PAGES.
//
// An allocation over 2 MiB gets a mapping of its own, rounded up to 2 MiB.
// With the knob on (the default) a mapping that realloc grows, or that
// realloc moves a growing buffer into, is advised MADV_HUGEPAGE, which
// /proc/self/smaps shows as the "hg" VmFlag, and keeps it across mremap.
// A fresh malloc is not advised, nor are page-heap chunks (small and large
// allocations).  With the knob off no mapping of the heap carries the flag.
//
// Built twice (BUILD): huge_pages_on_test (no knob) and huge_pages_off_test
// (CIDMALLOC_HUGE_PAGES=off); EXPECT_HUGE says which this binary is.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/allocator/alloc_probe.h"

namespace {

using namespace cidmalloc_test;

constexpr size_t kMiB = size_t{1} << 20;

// Whether the kernel accepts MADV_HUGEPAGE at all (THP compiled in).
bool KernelHasThp() {
  void* p = mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, 4 * kMiB, MADV_HUGEPAGE) == 0;
  munmap(p, 4 * kMiB);
  return ok;
}

// The VmFlags line of the mapping that contains `p`, "" if none.
std::string VmFlagsOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  char line[512];
  bool inside = false;
  std::string flags;
  while (fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // A mapping's first line.
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      break;
    }
  }
  fclose(f);
  return flags;
}

bool Advised(const void* p) {
  return VmFlagsOf(p).find(" hg") != std::string::npos;
}

#ifndef EXPECT_HUGE
#error "EXPECT_HUGE must be 0 or 1 (see BUILD)"
#endif

class HugePagesTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!KernelHasThp()) GTEST_SKIP() << "kernel without THP";
  }
};

TEST_F(HugePagesTest, FreshMappingIsNotAdvised) {
  for (size_t n : {6 * kMiB, 5 * kMiB}) {
    SCOPED_TRACE(n);
    void* p = malloc(n);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(KindOf(p), BlockKind::kHuge);
    ASSERT_NE(VmFlagsOf(p), "") << "no mapping found for " << p;
    EXPECT_FALSE(Advised(p)) << "VmFlags:" << VmFlagsOf(p);
    free(p);
  }
}

TEST_F(HugePagesTest, ReallocGrowthOfAMappingAdvisesIt) {
  void* p = malloc(3 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(KindOf(p), BlockKind::kHuge);
  EXPECT_FALSE(Advised(p)) << "VmFlags:" << VmFlagsOf(p);
  memset(p, 0x44, 3 * kMiB);
  // In place or moved by mremap, the mapping is advised and stays so.
  for (size_t n = 6 * kMiB; n <= 48 * kMiB; n *= 2) {
    p = realloc(p, n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Advised(p), EXPECT_HUGE == 1)
        << n / kMiB << " MiB, VmFlags:" << VmFlagsOf(p);
    EXPECT_EQ(static_cast<unsigned char*>(p)[3 * kMiB - 1], 0x44);
  }
  free(p);
}

TEST_F(HugePagesTest, ReallocMovingARunIntoAMappingAdvisesIt) {
  void* p = malloc(kMiB);  // A page run of the page heap.
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(KindOf(p), BlockKind::kLarge);
  memset(p, 0x55, kMiB);
  p = realloc(p, 4 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(KindOf(p), BlockKind::kHuge);
  EXPECT_EQ(Advised(p), EXPECT_HUGE == 1) << "VmFlags:" << VmFlagsOf(p);
  EXPECT_EQ(static_cast<unsigned char*>(p)[kMiB - 1], 0x55);
  free(p);
}

TEST_F(HugePagesTest, PageHeapIsNotAdvised) {
  void* small = malloc(100);
  void* large = malloc(1 * kMiB);
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  ASSERT_EQ(KindOf(large), BlockKind::kLarge);
  EXPECT_FALSE(Advised(small)) << "VmFlags:" << VmFlagsOf(small);
  EXPECT_FALSE(Advised(large)) << "VmFlags:" << VmFlagsOf(large);
  free(small);
  free(large);
}

}  // namespace
