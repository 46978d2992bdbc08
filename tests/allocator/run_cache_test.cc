// tests/allocator/run_cache_test.cc: the per-ID cache of freed page runs
// (allocator/front_end/run_cache.h) in a process that runs on cidmalloc:
// which allocation gets a cached run, when a run goes back to its heap,
// and that the cache holds only runs that are freed and marked so.
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <thread>

#include "allocator/api/cidmalloc.h"
#include "allocator/front_end/front_end.h"
#include "allocator/front_end/run_cache.h"
#include "gtest/gtest.h"

namespace {

namespace fe = ::cidmalloc::front_end;

constexpr size_t kKiB = 1024;
constexpr size_t kPage = 8 * kKiB;  // The page heap's page.

// Keeps the compiler from pairing a malloc with its free, from taking
// stores before a free for dead ones, or from seeing a freed pointer used
// again.
void* Opaque(void* p) {
  asm volatile("" : "+r"(p) : : "memory");
  return p;
}
// A pointer's address, to compare with later allocations once it is freed.
uintptr_t Addr(void* p) { return reinterpret_cast<uintptr_t>(Opaque(p)); }
void* At(uintptr_t a) { return Opaque(reinterpret_cast<void*>(a)); }

uint64_t CachedBytes() {
  cidmalloc_stats s;
  EXPECT_GE(cidmalloc_get_stats_sized(&s, sizeof s), sizeof s);
  return s.cached_bytes;
}

// The tests below look at the calling thread's run stack: they start from
// an empty one (a run another test left goes back with the trim).  They run
// on one cpu (and the threads they start with them): with several nodes the
// IDs are node-qualified, and a run freed on another node than the one it
// came from goes back to its heap instead of the stack (seen in the 2-node
// AArch64 VM).
class RunCache : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof saved_, &saved_), 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    malloc_trim(0);
  }
  void TearDown() override {
    fe::CheckInvariants();
    EXPECT_EQ(sched_setaffinity(0, sizeof saved_, &saved_), 0);
  }

 private:
  cpu_set_t saved_;
};

TEST_F(RunCache, AFreedRunGoesToTheNextAllocationOfItsLength) {
  const uint64_t before = CachedBytes();
  char* p = static_cast<char*>(malloc(196 * kKiB));  // 25 pages.
  ASSERT_NE(p, nullptr);
  memset(p, 0x5a, 196 * kKiB);
  const uintptr_t pa = Addr(p);
  free(Opaque(p));
  EXPECT_EQ(CachedBytes(), before + 25 * kPage);
  fe::CheckInvariants();  // With a run cached.
  // Another size of the same length in pages.
  char* q = static_cast<char*>(malloc(25 * kPage - 100));
  EXPECT_EQ(Addr(q), pa);
  EXPECT_EQ(CachedBytes(), before);
  EXPECT_EQ(malloc_usable_size(q), 25 * kPage);
  // The header the cache wrote is gone from the bytes the program can see
  // as freed-run marks; the rest of the contents are the old ones.
  EXPECT_FALSE(fe::IsCachedRun(q));
  EXPECT_EQ(static_cast<unsigned char>(q[196 * kKiB - 1]), 0x5a);
  free(q);
}

TEST_F(RunCache, CallocOfACachedRunReadsAsZero) {
  char* p = static_cast<char*>(malloc(180 * kKiB));
  ASSERT_NE(p, nullptr);
  memset(p, 0xff, 180 * kKiB);
  const uintptr_t pa = Addr(p);
  free(Opaque(p));
  char* q = static_cast<char*>(calloc(1, 180 * kKiB));
  ASSERT_EQ(Addr(q), pa);  // The cached run: zeroed by calloc, not by the OS.
  for (size_t i = 0; i < 180 * kKiB; ++i) {
    ASSERT_EQ(q[i], 0) << "byte " << i;
  }
  free(q);
}

TEST_F(RunCache, AnotherLengthSendsTheRunBackFirst) {
  const uint64_t before = CachedBytes();
  void* p = malloc(200 * kKiB);
  const uintptr_t pa = Addr(p);
  free(p);
  ASSERT_EQ(CachedBytes(), before + 25 * kPage);
  void* q = malloc(144 * kKiB);  // 18 pages: the 25-page run goes back.
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(CachedBytes(), before);
  // Its mark is gone (unless q took its pages and the mark with them).
  EXPECT_TRUE(Addr(q) == pa || !fe::IsCachedRun(At(pa)));
  free(q);  // Now the 18-page run is the cached one.
  EXPECT_EQ(CachedBytes(), before + 18 * kPage);
}

TEST_F(RunCache, OnlyRunsUpTo256KiBAndAlignedToAPageAreCached) {
  const uint64_t before = CachedBytes();
  free(Opaque(malloc(257 * kKiB)));  // 33 pages.
  EXPECT_EQ(CachedBytes(), before);
  // A run allocated at a larger alignment is cached once freed (its start
  // is aligned to a page too), but an allocation at such an alignment
  // never takes a cached run: it may not be aligned enough.
  void* aligned = nullptr;
  ASSERT_EQ(posix_memalign(&aligned, 64 * kKiB, 200 * kKiB), 0);
  const uintptr_t aa = Addr(aligned);
  free(aligned);
  EXPECT_EQ(CachedBytes(), before + 25 * kPage);
  void* p = malloc(200 * kKiB);
  EXPECT_EQ(Addr(p), aa);
  free(p);
  void* q = nullptr;
  ASSERT_EQ(posix_memalign(&q, 256 * kKiB, 200 * kKiB), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % (256 * kKiB), 0u);
  free(q);
}

TEST_F(RunCache, TrimAndReallocGrowthGiveTheRunBack) {
  const uint64_t before = CachedBytes();
  free(Opaque(malloc(160 * kKiB)));
  ASSERT_EQ(CachedBytes(), before + 20 * kPage);
  malloc_trim(0);
  EXPECT_EQ(CachedBytes(), before);

  // realloc growing a run in place first gives the ID's cached run back to
  // its heap, whose pages the growth may need.
  void* a = malloc(144 * kKiB);
  free(Opaque(malloc(144 * kKiB)));
  ASSERT_EQ(CachedBytes(), before + 18 * kPage);
  const uintptr_t aa = Addr(a);
  void* grown = realloc(a, 240 * kKiB);
  ASSERT_NE(grown, nullptr);
  // Grown in place, or moved: then a, freed, is the cached run.
  EXPECT_EQ(CachedBytes(), before + (Addr(grown) == aa ? 0 : 18 * kPage));
  free(grown);
}

TEST_F(RunCache, ARunFreedOnAnotherThreadGoesToThatThreadsCache) {
  void* p = malloc(200 * kKiB);
  std::thread([p] {
    const uintptr_t pa = Addr(p);
    free(p);
    // This thread's ID holds it: its next allocation of the length gets it.
    void* q = malloc(200 * kKiB);
    EXPECT_EQ(Addr(q), pa);
    free(q);
  }).join();
  fe::CheckInvariants();
}

// ---- Misuse ----------------------------------------------------------------

// run_cache_none_test runs these tests in none mode.
TEST(RunCacheMode, IsTheOneTheTargetAskedFor) {
  const char* mode = getenv("CIDMALLOC_RSEQ_MODE");
  if (mode == nullptr) GTEST_SKIP() << "the default mode";
  ASSERT_STREQ(mode, "none");
  EXPECT_EQ(cidmalloc::rseq::Process().mode, cidmalloc::rseq::Mode::kNone);
}

TEST(RunCacheDeathTest, DoubleFreeOfACachedRun) {
  EXPECT_DEATH(
      {
        const uintptr_t pa = Addr(malloc(200 * kKiB));
        free(At(pa));
        free(At(pa));
      },
      "free\\(\\): double free \\(a cached page run\\)");
}

TEST(RunCacheDeathTest, ReallocAndUsableSizeOfACachedRun) {
  EXPECT_DEATH(
      {
        const uintptr_t pa = Addr(malloc(200 * kKiB));
        free(At(pa));
        free(realloc(At(pa), 240 * kKiB));
      },
      "realloc\\(\\).*double free");
  EXPECT_DEATH(
      {
        const uintptr_t pa = Addr(malloc(200 * kKiB));
        free(At(pa));
        fprintf(stderr, "%zu\n", malloc_usable_size(At(pa)));
      },
      "malloc_usable_size\\(\\).*double free");
}

TEST(RunCacheDeathTest, CheckInvariantsRefusesAnUnmarkedRun) {
  EXPECT_DEATH(
      {
        const uintptr_t pa = Addr(malloc(200 * kKiB));
        free(At(pa));
        // A use after free that overwrites the cached run's mark.
        static_cast<fe::RunHeader*>(At(pa))->mark = 0;
        fe::CheckInvariants();
      },
      "a cached run that is no marked live run");
}

}  // namespace
