// tests/allocator/api_conformance_realloc_test.cc: realloc, reallocarray
// and calloc (part of the api_conformance_*_test binaries; see
// api_conformance_test.cc).

#include <sys/mman.h>

#include "tests/allocator/api_conformance.h"

namespace {

using namespace cidmalloc_conformance;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------
// realloc.

TEST(Realloc, GrowsThroughEveryClassKeepingContents) {
  size_t size = 1;
  void* p = malloc(size);
  ASSERT_NE(p, nullptr);
  FillPattern(p, size, 1);
  std::vector<size_t> targets;
  for (int c = 1; c < kNumClasses; ++c) {
    targets.push_back(Class(c).size);
    targets.push_back(Class(c).size + 1);
  }
  for (size_t s : {100000u, 200000u, 1500000u, 2097152u, 2097153u, 3145728u,
                   7000000u}) {
    targets.push_back(s);
  }
  for (size_t target : targets) {
    void* q = realloc(p, target);
    ASSERT_NE(q, nullptr) << target;
    ASSERT_EQ(FirstPatternMismatch(q, size, 1), size)
        << "grow " << size << " -> " << target;
    EXPECT_TRUE(IsAligned(q, kMaxAlign));
    EXPECT_GE(malloc_usable_size(q), target);
    FillPattern(q, target, 1);
    p = q;
    size = target;
  }
  free(p);
}

TEST(Realloc, ShrinksThroughEveryClassKeepingContents) {
  size_t size = 5 * kMiB;
  void* p = malloc(size);
  ASSERT_NE(p, nullptr);
  FillPattern(p, size, 2);
  std::vector<size_t> targets = {3 * kMiB, 2 * kMiB + 1, 2 * kMiB, 1500000,
                                 300000,   140000};
  for (int c = kNumClasses - 1; c >= 1; --c) targets.push_back(Class(c).size);
  targets.push_back(1);
  for (size_t target : targets) {
    void* q = realloc(p, target);
    ASSERT_NE(q, nullptr) << target;
    ASSERT_EQ(FirstPatternMismatch(q, target, 2), target)
        << "shrink " << size << " -> " << target;
    EXPECT_GE(malloc_usable_size(q), target);
    p = q;
    size = target;
  }
  free(p);
}

TEST(Realloc, SmallToLargeToHugeToSmall) {
  void* p = malloc(1000);
  ASSERT_NE(p, nullptr);
  FillPattern(p, 1000, 3);
  void* large = realloc(p, 200 * kKiB);  // > 128 KiB: a page run.
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(KindOf(large), BlockKind::kLarge);
  EXPECT_EQ(FirstPatternMismatch(large, 1000, 3), 1000u);
  FillPattern(large, 200 * kKiB, 3);
  void* huge = realloc(large, 3 * kMiB);  // > 2 MiB: a mapping of its own.
  ASSERT_NE(huge, nullptr);
  EXPECT_EQ(KindOf(huge), BlockKind::kHuge);
  EXPECT_EQ(FirstPatternMismatch(huge, 200 * kKiB, 3), 200 * kKiB);
  FillPattern(huge, 3 * kMiB, 3);
  void* small = realloc(huge, 100);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(KindOf(small), BlockKind::kSmall);
  EXPECT_EQ(FirstPatternMismatch(small, 100, 3), 100u);
  EXPECT_TRUE(LooksFreed(huge));
  free(small);
}

TEST(Realloc, ShrinkAndModestGrowthStayInPlace) {
  // Small: 1000 bytes live in a 1024-byte object.
  void* p = malloc(1000);
  ASSERT_NE(p, nullptr);
  FillPattern(p, 600, 4);
  EXPECT_EQ(realloc(p, 600), p);
  EXPECT_EQ(realloc(p, malloc_usable_size(p)), p);
  EXPECT_EQ(FirstPatternMismatch(p, 600, 4), 600u);
  free(p);
  // Large: a 200 KiB run shrunk by a quarter.
  p = malloc(200 * kKiB);
  ASSERT_NE(p, nullptr);
  FillPattern(p, 150 * kKiB, 5);
  EXPECT_EQ(realloc(p, 150 * kKiB), p);
  EXPECT_EQ(FirstPatternMismatch(p, 150 * kKiB, 5), 150 * kKiB);
  free(p);
  // Huge: 4 MiB shrunk to 3 MiB.
  p = malloc(4 * kMiB);
  ASSERT_NE(p, nullptr);
  FillPattern(p, 3 * kMiB, 6);
  EXPECT_EQ(realloc(p, 3 * kMiB), p);
  EXPECT_EQ(FirstPatternMismatch(p, 3 * kMiB, 6), 3 * kMiB);
  free(p);
}

TEST(Realloc, NullPointerActsAsMalloc) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{70000},
                      3 * kMiB}) {
    void* p = realloc(nullptr, size);
    CheckBlock(p, size, kMaxAlign, "realloc(NULL, n)");
    free(p);
  }
}

TEST(Realloc, ZeroSizeFreesAndReturnsNull) {
  for (size_t size : {size_t{1}, size_t{100}, size_t{5000}, size_t{300000},
                      3 * kMiB}) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr);
    Dirty(p, 0xee, size);
    errno = 0;
    EXPECT_EQ(realloc(p, 0), nullptr) << size;
    EXPECT_EQ(errno, 0) << size;  // Not a failure: no ENOMEM.
    EXPECT_TRUE(LooksFreed(p)) << size;
  }
}

TEST(Realloc, ImpossibleSizeFailsAndKeepsTheBlock) {
  for (size_t size : {size_t{100}, size_t{300000}, 3 * kMiB}) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr);
    FillPattern(p, size, 7);
    errno = 0;
    const volatile size_t huge = SIZE_MAX - 100;
    EXPECT_EQ(realloc(p, huge), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    EXPECT_EQ(FirstPatternMismatch(p, size, 7), size);
    EXPECT_GE(malloc_usable_size(p), size);
    free(p);
  }
}

TEST(Reallocarray, WorksAndRejectsOverflowKeepingTheBlock) {
  int* a = static_cast<int*>(reallocarray(nullptr, 100, sizeof(int)));
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 100; ++i) a[i] = i * 3;
  int* b = static_cast<int*>(reallocarray(a, 10000, sizeof(int)));
  ASSERT_NE(b, nullptr);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(b[i], i * 3);
  errno = 0;
  const volatile size_t n = SIZE_MAX / 2;
  EXPECT_EQ(reallocarray(b, n, 3), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(b[i], i * 3) << "block damaged";
  EXPECT_GE(malloc_usable_size(b), 10000 * sizeof(int));
  free(b);
}

// ---------------------------------------------------------------------------
// calloc.

TEST(Calloc, ZeroedForEverySampledSize) {
  for (size_t size : SampleSizes()) {
    void* p = calloc(1, size);
    ASSERT_NE(p, nullptr) << size;
    ASSERT_EQ(FirstNonZero(p, size), size) << size;
    free(p);
  }
}

// Dirty a block, free it, calloc the same size: the memory handed back is
// likely the dirty block, and must read as zero.
enum class Between : uint8_t { kNothing, kTrim };
void DirtyThenCalloc(size_t size, int rounds, Between between) {
  for (int r = 0; r < rounds; ++r) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr);
    Dirty(p, 0xff, malloc_usable_size(p));
    free(p);
    if (between == Between::kTrim) malloc_trim(0);
    unsigned char* q = static_cast<unsigned char*>(calloc(1, size));
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(FirstNonZero(q, size), size)
        << "calloc(1, " << size << ") round " << r
        << (between == Between::kTrim ? " after malloc_trim" : "")
        << " returned dirty memory";
    Dirty(q, 0xff, size);
    free(q);
  }
}

TEST(Calloc, ZeroAfterReuseOfDirtySmallObjects) {
  for (size_t size : {size_t{1}, size_t{16}, size_t{100}, size_t{1000},
                      size_t{4096}, size_t{30000}, size_t{65536}}) {
    DirtyThenCalloc(size, 200, Between::kNothing);
  }
  // Many objects at once, so that reuse goes through the central lists.
  std::vector<void*> v;
  for (int i = 0; i < 5000; ++i) {
    void* p = malloc(48);
    ASSERT_NE(p, nullptr);
    Dirty(p, 0xff, 48);
    v.push_back(p);
  }
  for (void* p : v) free(p);
  for (int i = 0; i < 5000; ++i) {
    void* p = calloc(3, 16);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(FirstNonZero(p, 48), 48u);
    v[i] = p;
  }
  for (void* p : v) free(p);
}

TEST(Calloc, ZeroAfterReuseOfDirtyLargeAndHugeBlocks) {
  for (size_t size : {size_t{65537}, size_t{100000}, kMiB, 2 * kMiB,
                      3 * kMiB}) {
    DirtyThenCalloc(size, 20, Between::kNothing);
  }
}

TEST(Calloc, ZeroAfterDirtyPagesWereReturnedToTheOs) {
  // malloc_trim returns the free pages to the OS (madvise); a later calloc
  // may get them back and must still see zeros, whatever the advice was.
  for (size_t size : {size_t{65537}, size_t{200000}, kMiB, 2 * kMiB}) {
    DirtyThenCalloc(size, 10, Between::kTrim);
  }
}

TEST(Calloc, ZeroAfterAutomaticRelease) {
  // Freeing more than CIDMALLOC_RELEASE_BYTES (32 MiB) of dirty pages makes
  // the page heap return some of them to the OS on its own.
  std::vector<void*> v;
  for (int i = 0; i < 48; ++i) {
    void* p = malloc(kMiB);
    ASSERT_NE(p, nullptr);
    Dirty(p, 0xff, kMiB);
    v.push_back(p);
  }
  for (void* p : v) free(p);
  for (int i = 0; i < 48; ++i) {
    void* p = calloc(kMiB / 64, 64);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(FirstNonZero(p, kMiB), kMiB) << "block " << i;
    v[i] = p;
  }
  for (void* p : v) free(p);
}

TEST(Realloc, SuccessLeavesErrnoAlone) {
  // A buffer of its own mapping grown 3 MiB at a time: a growth that cannot
  // stay in place fails an mremap before it moves the pages, and that
  // failure must not show in errno (glibc's realloc leaves it alone).
  size_t size = 3 * kMiB;
  char* p = static_cast<char*>(malloc(size));
  ASSERT_NE(p, nullptr);
  FillPattern(p, size, 7);
  int moves = 0;
  for (int i = 0; i < 8; ++i) {
    const size_t next = size + 3 * kMiB;
    errno = 0;
    char* q = static_cast<char*>(realloc(p, next));
    ASSERT_NE(q, nullptr) << next;
    EXPECT_EQ(errno, 0) << "realloc to " << next << " succeeded";
    if (q != p) ++moves;
    ASSERT_EQ(FirstPatternMismatch(q, size, 7), size);
    FillPattern(q, next, 7);
    p = q;
    size = next;
  }
  // Every growth moved or none did: either way the loop must have reached
  // the path where an in-place attempt fails first.
  EXPECT_GT(moves, 0) << "no growth moved: the failing mremap was not taken";
  free(p);
  // The same for a block aligned beyond its chunk.
  void* a = memalign(size_t{1} << 22, 5 * kMiB);
  ASSERT_NE(a, nullptr);
  errno = 0;
  void* b = realloc(a, 40 * kMiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(errno, 0);
  free(b);
}

TEST(Realloc, GrowsABufferWhoseMappingTheProgramSplit) {
  // madvise on part of a block of its own mapping splits the mapping in
  // two: mremap can then neither grow it in place nor move it (EFAULT),
  // and realloc must copy.
  char* p = static_cast<char*>(malloc(6 * kMiB));
  ASSERT_NE(p, nullptr);
  FillPattern(p, 6 * kMiB, 3);
  ASSERT_EQ(madvise(p + 4 * kMiB, 4096, MADV_DONTDUMP), 0);
  errno = 0;
  char* q = static_cast<char*>(realloc(p, 20 * kMiB));
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(errno, 0);
  EXPECT_EQ(FirstPatternMismatch(q, 6 * kMiB, 3), 6 * kMiB);
  FillPattern(q, 20 * kMiB, 4);
  EXPECT_EQ(FirstPatternMismatch(q, 20 * kMiB, 4), 20 * kMiB);
  free(q);
}

TEST(Calloc, OverflowFailsWithEnomem) {
  const volatile size_t half = SIZE_MAX / 2;
  const std::pair<size_t, size_t> cases[] = {
      {half, 3}, {3, half}, {SIZE_MAX, SIZE_MAX}, {size_t{1} << 32, size_t{1} << 32}};
  for (const auto& [n, size] : cases) {
    errno = 0;
    EXPECT_EQ(calloc(n, size), nullptr) << n << " x " << size;
    EXPECT_EQ(errno, ENOMEM);
  }
  errno = 0;
  const volatile size_t big = size_t{PTRDIFF_MAX} / 2 + 1;
  EXPECT_EQ(calloc(big, 2), nullptr);  // No overflow, but beyond PTRDIFF_MAX.
  EXPECT_EQ(errno, ENOMEM);
}

TEST(Calloc, ZeroCountOrSizeReturnsAUniqueBlock) {
  void* a = calloc(0, 16);
  void* b = calloc(16, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  free(a);
  free(b);
}

}  // namespace
