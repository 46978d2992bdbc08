// tests/allocator/huge_pages_test.cc: CIDMALLOC_HUGE_PAGES.
//
// An allocation over 2 MiB gets a mapping of its own, rounded up to 2 MiB.
// With the knob on (the default) a mapping that realloc grows, or that
// realloc moves a growing buffer into, is advised MADV_HUGEPAGE, which
// /proc/self/smaps shows as the "hg" VmFlag, and keeps it across mremap;
// a last chunk the requested size fills only in part is advised
// MADV_NOHUGEPAGE ("nh") instead.
// A fresh malloc is not advised, nor are page-heap chunks (small and large
// allocations).  With the knob off no mapping of the heap carries the flag.
//
// Built twice (BUILD): huge_pages_on_test (no knob) and huge_pages_off_test
// (CIDMALLOC_HUGE_PAGES=off); EXPECT_HUGE says which this binary is.
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "tests/allocator/alloc_probe.h"
#include "tests/allocator/test_util.h"

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

// The VMA (first and last address) that contains `p`, {0, 0} if none.
std::pair<uintptr_t, uintptr_t> VmaOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == nullptr) return {0, 0};
  char line[512];
  std::pair<uintptr_t, uintptr_t> vma{0, 0};
  while (fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && a >= lo && a < hi) {
      vma = {lo, hi};
      break;
    }
  }
  fclose(f);
  return vma;
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

// A buffer realloc grows to 5 MiB + 1: its mapping has 3 chunks, of which
// the last holds 1 MiB + 1 of it.  Only the first two are advised; the
// last gets MADV_NOHUGEPAGE ("nh"), so that its first touch does not make
// 2 MiB resident, and the mapping is two VMAs.  Growing it again joins
// them for mremap, which moves the pages without copying (a mapping whose
// halves could not be joined again made mremap fail and realloc copy), and
// splits it anew.  First in this file: a fresh process's first mapping,
// whose VMA no neighbour lends a record of anonymous pages (an anon_vma)
// before its split, which is the case the join needs care for.
TEST_F(HugePagesTest, ReallocGrowthLeavesAPartlyFilledLastChunkUnadvised) {
  malloc_trim(0);  // A fresh mapping, not one the huge cache kept.
  // A hole fenced by PROT_NONE mappings, where the kernel places the next
  // mapping (top down, the first gap that fits), so that the block's VMA
  // merges with no neighbour, whose anon_vma it would share.
  char* fence = static_cast<char*>(mmap(nullptr, 64 * kMiB, PROT_NONE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(fence, MAP_FAILED);
  ASSERT_EQ(munmap(fence + 48 * kMiB, 12 * kMiB), 0);
  char* p = static_cast<char*>(malloc(3 * kMiB));
  ASSERT_NE(p, nullptr);
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(VmaOf(p), std::make_pair(at, at + 4 * kMiB))
      << "not the lone VMA this test needs (fence at " << (void*)fence << ")";
  p = static_cast<char*>(realloc(p, 5 * kMiB + 1));
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(KindOf(p), BlockKind::kHuge);
  memset(p, 0x66, 5 * kMiB + 1);
  const auto check_split = [&](size_t mapping, size_t advised) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(Advised(p), EXPECT_HUGE == 1) << "VmFlags:" << VmFlagsOf(p);
    const char* last = p + mapping - 1;
    EXPECT_FALSE(Advised(last)) << "VmFlags:" << VmFlagsOf(last);
    // A VMA may extend past the mapping where the kernel merged it with a
    // neighbour of the same flags.
    const auto head = VmaOf(p), tail = VmaOf(last);
    if (EXPECT_HUGE == 1) {
      EXPECT_NE(VmFlagsOf(last).find(" nh"), std::string::npos)
          << "VmFlags:" << VmFlagsOf(last);
      EXPECT_LE(head.first, base);
      EXPECT_EQ(head.second, base + advised) << "the advised chunks";
      EXPECT_EQ(tail.first, base + advised) << "the last chunk";
      EXPECT_GE(tail.second, base + mapping);
    } else {
      EXPECT_EQ(head, tail) << "one VMA";
    }
  };
  check_split(6 * kMiB, 4 * kMiB);

  const long before = ThreadMinorFaults();
  p = static_cast<char*>(realloc(p, 9 * kMiB + 1));
  const long faults = ThreadMinorFaults() - before;
  ASSERT_NE(p, nullptr);
  // Copying 5 MiB would fault at least its two huge pages and 256 small.
  EXPECT_LT(faults, 3) << "realloc faulted " << faults << " pages";
  for (size_t i = 0; i < 5 * kMiB + 1; i += 4096) ASSERT_EQ(p[i], 0x66) << i;
  check_split(10 * kMiB, 8 * kMiB);
  // Grown within the mapping until it fills the last chunk: all advised,
  // one VMA again.
  ASSERT_EQ(realloc(p, 10 * kMiB), p);
  EXPECT_EQ(Advised(p + 10 * kMiB - 1), EXPECT_HUGE == 1)
      << "VmFlags:" << VmFlagsOf(p + 10 * kMiB - 1);
  EXPECT_EQ(VmaOf(p).second, VmaOf(p + 10 * kMiB - 1).second) << "one VMA";
  free(p);
  malloc_trim(0);  // No advised mapping left in the cache for the others.
  munmap(fence, 64 * kMiB);
}

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
