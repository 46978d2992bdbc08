// tests/allocator/huge_cache_test.cc: the page heap's cache of freed
// mappings (allocator/page_heap/huge_cache.h), on its own.
//
// This binary is not linked with cidmalloc: it drives layer 3 directly, with
// the release threshold each test sets, and reads the node's counters: a
// mapping kept in the cache is mapped and free; one unmapped is neither.
// Allocations of more than a chunk (2 MiB) get mappings of their own,
// rounded up to whole chunks.
#include <string.h>

#include <vector>

#include "allocator/os/config.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"

namespace {

namespace ph = ::cidmalloc::page_heap;

constexpr size_t kMiB = size_t{1} << 20;

struct Counters {
  size_t mapped;
  size_t free;
  size_t huge;  // Live mappings of their own.
};
Counters Now() {
  ph::NodeStats s;
  ph::GetNodeStats(0, &s);
  return {s.mapped_bytes, s.free_bytes - s.released_bytes, s.huge_bytes};
}

// A fresh configuration and an empty cache.
cidmalloc::os::Config* Configure(size_t threshold) {
  static cidmalloc::os::Config config;
  config.release_threshold = threshold;
  config.release_delay_ms = 0;
  ph::Init(&config);
  ph::ReleaseFreeMemory(0);
  ph::CheckInvariants();
  return &config;
}

uintptr_t Alloc(size_t bytes, bool* zeroed, size_t align = 16) {
  void* p = ph::AllocLarge(0, 0, bytes, align, zeroed);
  EXPECT_NE(p, nullptr) << bytes;
  return reinterpret_cast<uintptr_t>(p);
}
void Free(uintptr_t p) { ph::FreeLarge(ph::LookupChunk(p), p); }

TEST(HugeCache, AFreedMappingIsReusedWhereItIs) {
  Configure(32 * kMiB);
  bool zeroed;
  const uintptr_t p = Alloc(3 * kMiB, &zeroed);
  EXPECT_TRUE(zeroed);  // A fresh mapping.
  memset(reinterpret_cast<void*>(p), 0x5a, 3 * kMiB);
  const Counters live = Now();
  // The requested size (page-rounded) is usable; the mapping is 4 MiB.
  EXPECT_EQ(ph::LargeUsableSize(ph::LookupChunk(p), p), 3 * kMiB);
  EXPECT_EQ(ph::LookupChunk(p + 4 * kMiB - 1)->huge_bytes, 4 * kMiB);

  Free(p);
  const Counters cached = Now();
  EXPECT_EQ(cached.mapped, live.mapped) << "kept mapped";
  EXPECT_EQ(cached.free, live.free + 4 * kMiB) << "and counted free";
  EXPECT_EQ(cached.huge, live.huge - 4 * kMiB);
  // A freed pointer is not a live block (realloc, malloc_usable_size).
  EXPECT_EQ(ph::LargeUsableSize(ph::LookupChunk(p), p), 0u);
  ph::CheckInvariants();

  const uintptr_t q = Alloc(3 * kMiB + 100, &zeroed);
  EXPECT_EQ(q, p);
  EXPECT_FALSE(zeroed) << "the cached pages keep what was written";
  EXPECT_EQ(reinterpret_cast<unsigned char*>(q)[kMiB], 0x5a);
  const Counters again = Now();
  EXPECT_EQ(again.mapped, live.mapped) << "no new mapping";
  EXPECT_EQ(again.free, live.free);
  EXPECT_EQ(again.huge, live.huge);
  Free(q);
}

TEST(HugeCache, TheSmallestFitIsTakenAndItsTailUnmapped) {
  Configure(32 * kMiB);
  bool zeroed;
  const uintptr_t big = Alloc(10 * kMiB, &zeroed);
  const uintptr_t mid = Alloc(6 * kMiB, &zeroed);
  const uintptr_t small = Alloc(3 * kMiB, &zeroed);  // 4 MiB
  Free(big);
  Free(mid);
  Free(small);
  const Counters before = Now();

  // 5 MiB rounds to 6: exactly the middle one.
  const uintptr_t a = Alloc(5 * kMiB, &zeroed);
  EXPECT_EQ(a, mid);
  // 7 MiB rounds to 8: only the 10 MiB one fits; its last 2 MiB go.
  const uintptr_t b = Alloc(7 * kMiB, &zeroed);
  EXPECT_EQ(b, big);
  EXPECT_EQ(ph::LargeUsableSize(ph::LookupChunk(b), b), 7 * kMiB);
  EXPECT_EQ(ph::LookupChunk(b)->huge_bytes, 8 * kMiB);
  EXPECT_EQ(ph::LookupChunk(big + 9 * kMiB), nullptr)
      << "the trimmed tail left the pagemap";
  const Counters after = Now();
  EXPECT_EQ(after.mapped, before.mapped - 2 * kMiB);
  EXPECT_EQ(after.free, before.free - 16 * kMiB);
  ph::CheckInvariants();
  Free(a);
  Free(b);
}

TEST(HugeCache, AnAlignmentTheCachedBaseLacksGetsAnotherMapping) {
  Configure(32 * kMiB);
  bool zeroed;
  // Keep allocating 3 MiB blocks until one's base is not 8 MiB-aligned.
  std::vector<uintptr_t> held;
  uintptr_t odd = 0;
  for (int i = 0; i < 8 && odd == 0; ++i) {
    const uintptr_t p = Alloc(3 * kMiB, &zeroed);
    if (p % (8 * kMiB) != 0) {
      odd = p;
    } else {
      held.push_back(p);
    }
  }
  ASSERT_NE(odd, 0u);
  Free(odd);
  const uintptr_t q = Alloc(3 * kMiB, &zeroed, 8 * kMiB);
  EXPECT_EQ(q % (8 * kMiB), 0u);
  EXPECT_NE(q, odd);
  EXPECT_TRUE(zeroed);
  // The unaligned one is still there for the next plain request.
  const uintptr_t r = Alloc(3 * kMiB, &zeroed);
  EXPECT_EQ(r, odd);
  Free(q);
  Free(r);
  for (const uintptr_t p : held) Free(p);
}

TEST(HugeCache, TheReleaseThresholdBoundsWhatItKeeps) {
  Configure(8 * kMiB);
  bool zeroed;
  const Counters start = Now();
  // Larger than the threshold on its own: unmapped at once.
  const uintptr_t big = Alloc(10 * kMiB, &zeroed);
  Free(big);
  EXPECT_EQ(Now().mapped, start.mapped);
  EXPECT_EQ(ph::LookupChunk(big), nullptr);

  // Three 4 MiB mappings: the cache keeps two, the oldest goes.
  const uintptr_t m1 = Alloc(4 * kMiB, &zeroed);
  const uintptr_t m2 = Alloc(4 * kMiB, &zeroed);
  const uintptr_t m3 = Alloc(4 * kMiB, &zeroed);
  Free(m1);
  Free(m2);
  Free(m3);
  EXPECT_EQ(Now().mapped, start.mapped + 8 * kMiB);
  EXPECT_EQ(Now().free, start.free + 8 * kMiB);
  EXPECT_EQ(ph::LookupChunk(m1), nullptr) << "the oldest is unmapped";
  ph::CheckInvariants();

  // A mapping larger than the threshold, freed while the cache is full:
  // it goes, and the two cached ones stay (evicting oldest first had
  // emptied the cache before reaching it).
  const uintptr_t big2 = Alloc(10 * kMiB, &zeroed);
  Free(big2);
  EXPECT_EQ(ph::LookupChunk(big2), nullptr);
  EXPECT_EQ(Now().mapped, start.mapped + 8 * kMiB);
  EXPECT_NE(ph::LookupChunk(m2), nullptr) << "a cached mapping was evicted";
  EXPECT_NE(ph::LookupChunk(m3), nullptr) << "a cached mapping was evicted";
  ph::CheckInvariants();

  // malloc_trim's path unmaps the rest.
  const size_t released = ph::ReleaseFreeMemory(0);
  EXPECT_GE(released, 8 * kMiB);
  EXPECT_EQ(Now().mapped, start.mapped);
  EXPECT_EQ(Now().free, 0u);
  ph::CheckInvariants();
}

TEST(HugeCache, FreePagesOfTheBuddyHeapLeaveItLessRoom) {
  cidmalloc::os::Config* config = Configure(8 * kMiB);
  config->release_delay_ms = 60 * 1000;  // The buddy heap keeps its pages.
  bool zeroed;
  // 6 MiB of 64 KiB spans, written, then freed: the buddy heap's
  // committed free pages.
  std::vector<uintptr_t> spans;
  for (int i = 0; i < 96; ++i) {
    const uintptr_t s = ph::AllocSpan(0, 3, &zeroed);
    ASSERT_NE(s, 0u);
    memset(reinterpret_cast<void*>(s), 1, 64 * 1024);
    spans.push_back(s);
  }
  for (const uintptr_t s : spans) ph::FreeSpan(ph::LookupChunk(s), s, 3);
  ASSERT_GE(Now().free, 6 * kMiB);
  const Counters start = Now();
  // 2 MiB left under the threshold: a 4 MiB mapping does not fit.
  const uintptr_t m = Alloc(4 * kMiB, &zeroed);
  Free(m);
  EXPECT_EQ(Now().mapped, start.mapped);
  EXPECT_EQ(ph::LookupChunk(m), nullptr);
  ph::CheckInvariants();
  ph::ReleaseFreeMemory(0);
}

TEST(HugeCacheDeathTest, ADoubleFreeOfACachedMappingAborts) {
  Configure(32 * kMiB);
  bool zeroed;
  const uintptr_t p = Alloc(3 * kMiB, &zeroed);
  Free(p);
  EXPECT_DEATH(Free(p), "double free \\(the block's mapping is cached\\)");
  ph::ReleaseFreeMemory(0);
}

}  // namespace
