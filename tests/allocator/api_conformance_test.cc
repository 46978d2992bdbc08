// tests/allocator/api_conformance_test: the C malloc family, glibc's
// extensions and __libc_* names, every operator new/delete form, and the
// statistics of cidmalloc.h, against what C, C++, POSIX and glibc 2.36
// promise (where the standards leave room, glibc's choice).
//
// The binary links //:cidmalloc, so malloc/free/new/delete here are
// cidmalloc's.  It is built into several targets that differ only in their
// environment (see BUILD): CIDMALLOC_RSEQ_MODE=cid|cpu|none,
// CIDMALLOC_STATS=1, CIDMALLOC_RELEASE_METHOD=free.
//
// This file: malloc and the aligned allocations.  The other sources of
// the same binary: api_conformance_realloc_test.cc (realloc,
// reallocarray, calloc), api_conformance_glibc_test.cc (glibc's
// extensions and names, cidmalloc.h), api_conformance_new_test.cc
// (operator new and delete).

#include "tests/allocator/api_conformance.h"

namespace {

using namespace cidmalloc_conformance;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------
// malloc: alignment, usable size, distinct blocks.

TEST(Malloc, EverySampledSizeIsAlignedUsableAndDisjoint) {
  const std::vector<size_t> sizes = SampleSizes();
  std::vector<void*> live;
  std::vector<std::pair<uintptr_t, size_t>> blocks;
  for (size_t size : sizes) {
    void* p = malloc(size);
    CheckBlock(p, size, kMaxAlign, "malloc");
    if (p == nullptr) continue;
    live.push_back(p);
    blocks.emplace_back(reinterpret_cast<uintptr_t>(p), malloc_usable_size(p));
  }
  ExpectDisjoint(blocks);
  for (void* p : live) free(p);
}

TEST(Malloc, SmallUsableSizeIsExactlyTheClassSize) {
  for (size_t size = 0; size <= kMaxSmallSize; size += (size < 4096 ? 1 : 17)) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(malloc_usable_size(p), Class(ClassOf(size)).size) << size;
    EXPECT_EQ(KindOf(p), BlockKind::kSmall) << size;
    free(p);
  }
}

TEST(Malloc, LargeAndHugeBlocks) {
  const size_t sizes[] = {128 * kKiB + 1, 200000,        256 * kKiB,
                          kMiB - 1,      kMiB,           2 * kMiB - 1,
                          2 * kMiB,      2 * kMiB + 1,   3 * kMiB,
                          5 * kMiB + 17, 16 * kMiB};
  for (size_t size : sizes) {
    void* p = malloc(size);
    CheckBlock(p, size, kMaxAlign, "malloc");
    if (p == nullptr) continue;
    // Large runs are whole 8 KiB pages, huge blocks whole 2 MiB chunks:
    // no more than one unit of slack.
    const size_t usable = malloc_usable_size(p);
    if (size <= 2 * kMiB) {
      EXPECT_EQ(KindOf(p), BlockKind::kLarge) << size;
      EXPECT_LT(usable - size, 8 * kKiB) << size;
    } else {
      EXPECT_EQ(KindOf(p), BlockKind::kHuge) << size;
      EXPECT_LT(usable - size, 2 * kMiB) << size;
    }
    Dirty(p, 0x77, usable);
    free(p);
    EXPECT_TRUE(LooksFreed(p)) << size;
  }
}

// Objects from a fresh span come out in ascending addresses, one object
// apart, as from a bump allocator (the refill pushes its batch so that the
// pops follow the span's order): a program that walks its objects in
// allocation order then walks memory forward.  A class this test binary
// uses nowhere else (2.5 KiB), so that its spans are fresh; the few jumps
// are batch and span boundaries.
TEST(Malloc, FreshObjectsComeInAscendingAddresses) {
  constexpr int kN = 512;
  static char* p[kN];  // Static: no allocation of its own.
  for (int i = 0; i < kN; ++i) p[i] = static_cast<char*>(malloc(2500));
  const ptrdiff_t step = static_cast<ptrdiff_t>(malloc_usable_size(p[0]));
  int forward = 0;
  for (int i = 1; i < kN; ++i) forward += (p[i] - p[i - 1] == step);
  EXPECT_GE(forward, kN * 9 / 10) << "of " << kN - 1 << " steps of " << step;
  for (int i = 0; i < kN; ++i) free(p[i]);
}

TEST(Malloc, ZeroReturnsUniqueNonNullPointers) {
  std::set<void*> seen;
  std::vector<void*> live;
  for (int i = 0; i < 1000; ++i) {
    void* p = malloc(0);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, kMaxAlign));
    EXPECT_TRUE(seen.insert(p).second) << "malloc(0) returned " << p
                                       << " twice";
    live.push_back(p);
  }
  for (void* p : live) free(p);
}

TEST(Malloc, FreeNullAndUsableSizeOfNull) {
  free(nullptr);
  EXPECT_EQ(malloc_usable_size(nullptr), 0u);
}

TEST(Malloc, ImpossibleSizesFailWithEnomem) {
  const volatile size_t sizes[] = {SIZE_MAX,
                                   size_t{PTRDIFF_MAX} + 1,
                                   size_t{PTRDIFF_MAX},
                                   size_t{1} << 62,
                                   SIZE_MAX - 4095};
  for (size_t size : sizes) {
    errno = 0;
    void* p = malloc(size);
    EXPECT_EQ(p, nullptr) << size;
    EXPECT_EQ(errno, ENOMEM) << size;
  }
}

TEST(Malloc, SuccessLeavesErrnoAlone) {
  for (size_t size : {size_t{0}, size_t{24}, size_t{5000}, size_t{300000},
                      size_t{3 * kMiB}}) {
    errno = 12345;
    void* p = malloc(size);
    EXPECT_NE(p, nullptr);
    EXPECT_EQ(errno, 12345) << size;
    free(p);
    EXPECT_EQ(errno, 12345) << size;
  }
}

// ---------------------------------------------------------------------------
// Aligned allocation.

// Size 0 has a test of its own (Aligned.ZeroSize*).
const size_t kAlignedSizes[] = {1,        7,           16,       24,
                                100,      1000,        4095,     4096,
                                4097,     8192,        65535,    65536,
                                65537,    200000,      kMiB,     2 * kMiB - 1,
                                2 * kMiB, 2 * kMiB + 1, 3 * kMiB};

// Every aligned-allocation function with size 0 and every power-of-two
// alignment up to 4 MiB: a unique, live, aligned block each time (they are
// all kept live until the end, so a block handed out twice shows).
//
// A regression test: for an alignment above 64 KiB, a zero-byte request
// once reached page_heap::AllocLarge with bytes == 0, which computed a run
// of 0 pages, took the aligned block and freed it again whole, so that the
// caller got a pointer into free pages (fixed in 35e3ca8).
TEST(Aligned, ZeroSizeWithEveryAlignment) {
  std::vector<std::pair<uintptr_t, size_t>> blocks;
  std::vector<std::pair<void*, size_t>> live;  // (block, alignment)
  for (size_t align = 1; align <= 4 * kMiB; align *= 2) {
    SCOPED_TRACE(testing::Message() << "align " << align);
    void* ps[5] = {memalign(align, 0), aligned_alloc(align, 0), nullptr,
                   ::operator new(0, std::align_val_t{align}),
                   ::operator new[](0, std::align_val_t{align}, std::nothrow)};
    if (align >= sizeof(void*)) {
      EXPECT_EQ(posix_memalign(&ps[2], align, 0), 0);
    } else {
      ps[2] = memalign(align, 0);
    }
    for (void* p : ps) {
      ASSERT_NE(p, nullptr);
      EXPECT_TRUE(IsAligned(p, align)) << p;
      EXPECT_NE(KindOf(p), BlockKind::kFreePages)
          << p << " points into free pages";
      EXPECT_NE(KindOf(p), BlockKind::kNotOurs) << p;
      if (KindOf(p) == BlockKind::kFreePages) return;  // free() would abort.
      blocks.emplace_back(reinterpret_cast<uintptr_t>(p),
                          std::max<size_t>(malloc_usable_size(p), 1));
      live.emplace_back(p, align);
    }
  }
  ExpectDisjoint(blocks);
  for (const auto& [p, align] : live) free(p);
}

TEST(Aligned, MemalignEveryPowerOfTwoTo2MiB) {
  for (size_t align = 1; align <= 2 * kMiB; align *= 2) {
    std::vector<std::pair<uintptr_t, size_t>> blocks;
    std::vector<void*> live;
    for (size_t size : kAlignedSizes) {
      void* p = memalign(align, size);
      CheckBlock(p, size, std::max(align, kMaxAlign), "memalign");
      if (p == nullptr) continue;
      live.push_back(p);
      blocks.emplace_back(reinterpret_cast<uintptr_t>(p),
                          malloc_usable_size(p));
    }
    ExpectDisjoint(blocks);
    for (void* p : live) free(p);
  }
}

TEST(Aligned, PosixMemalignEveryPowerOfTwoTo2MiB) {
  for (size_t align = sizeof(void*); align <= 2 * kMiB; align *= 2) {
    for (size_t size : kAlignedSizes) {
      void* p = nullptr;
      errno = 4321;
      ASSERT_EQ(posix_memalign(&p, align, size), 0) << align << " " << size;
      EXPECT_EQ(errno, 4321);
      CheckBlock(p, size, std::max(align, kMaxAlign), "posix_memalign");
      free(p);
    }
  }
}

TEST(Aligned, AlignedAllocEveryPowerOfTwoTo2MiB) {
  for (size_t align = 1; align <= 2 * kMiB; align *= 2) {
    for (size_t size : kAlignedSizes) {
      void* p = aligned_alloc(align, size);
      CheckBlock(p, size, std::max(align, kMaxAlign), "aligned_alloc");
      free(p);
    }
  }
}

TEST(Aligned, AlignedOperatorNewEveryPowerOfTwoTo2MiB) {
  for (size_t align = 1; align <= 2 * kMiB; align *= 2) {
    for (size_t size : kAlignedSizes) {
      void* p = ::operator new(size, std::align_val_t{align});
      CheckBlock(p, size, align, "operator new(align_val_t)");
      ::operator delete(p, std::align_val_t{align});
      EXPECT_TRUE(LooksFreed(p)) << align << " " << size;
      void* q = ::operator new[](size, std::align_val_t{align}, std::nothrow);
      CheckBlock(q, size, align, "operator new[](align_val_t, nothrow)");
      ::operator delete[](q, size, std::align_val_t{align});
      EXPECT_TRUE(LooksFreed(q)) << align << " " << size;
    }
  }
}

TEST(Aligned, FourMiBAlignmentForAHugeBlock) {
  constexpr size_t kAlign = 4 * kMiB;
  for (size_t size : {size_t{100}, 3 * kMiB, 9 * kMiB + 1}) {
    void* a = memalign(kAlign, size);
    CheckBlock(a, size, kAlign, "memalign 4 MiB");
    void* b = aligned_alloc(kAlign, size);
    CheckBlock(b, size, kAlign, "aligned_alloc 4 MiB");
    void* c = nullptr;
    ASSERT_EQ(posix_memalign(&c, kAlign, size), 0);
    CheckBlock(c, size, kAlign, "posix_memalign 4 MiB");
    void* d = ::operator new(size, std::align_val_t{kAlign});
    CheckBlock(d, size, kAlign, "operator new 4 MiB");
    ExpectDisjoint({{reinterpret_cast<uintptr_t>(a), malloc_usable_size(a)},
                    {reinterpret_cast<uintptr_t>(b), malloc_usable_size(b)},
                    {reinterpret_cast<uintptr_t>(c), malloc_usable_size(c)},
                    {reinterpret_cast<uintptr_t>(d), malloc_usable_size(d)}});
    free(a);
    free(b);
    free(c);
    ::operator delete(d, size, std::align_val_t{kAlign});
    EXPECT_TRUE(LooksFreed(d));
  }
}

TEST(Aligned, VallocAndPvalloc) {
  for (size_t size : kAlignedSizes) {
    void* p = valloc(size);
    CheckBlock(p, size, kPage, "valloc");
    free(p);
    void* q = pvalloc(size);
    const size_t rounded = size == 0 ? kPage : (size + kPage - 1) / kPage * kPage;
    CheckBlock(q, rounded, kPage, "pvalloc");
    free(q);
  }
}

TEST(Aligned, PvallocZeroReturnsAWholePage) {
  void* p = pvalloc(0);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(IsAligned(p, kPage));
  EXPECT_GE(malloc_usable_size(p), kPage);
  Dirty(p, 1, kPage);
  free(p);
}

TEST(Aligned, PosixMemalignRejectsBadAlignmentsWithoutTouchingOut) {
  const size_t bad[] = {0, 1, 2, 3, 4, 12, 24, 48, 100, 4097,
                        (SIZE_MAX >> 1) + 2};
  for (size_t align : bad) {
    void* sentinel = reinterpret_cast<void*>(uintptr_t{0xdeadbeef});
    void* out = sentinel;
    errno = 777;
    EXPECT_EQ(posix_memalign(&out, align, 16), EINVAL) << align;
    EXPECT_EQ(out, sentinel) << align;
    EXPECT_EQ(errno, 777) << align;  // The error is returned, not set.
  }
}

TEST(Aligned, PosixMemalignImpossibleSizeReturnsEnomem) {
  void* sentinel = reinterpret_cast<void*>(uintptr_t{0xdeadbeef});
  void* out = sentinel;
  errno = 777;
  const volatile size_t huge = SIZE_MAX - 64;
  EXPECT_EQ(posix_memalign(&out, 64, huge), ENOMEM);
  EXPECT_EQ(out, sentinel);
  EXPECT_EQ(errno, 777);
}

TEST(Aligned, AlignedAllocRejectsNonPowerOfTwo) {
  for (size_t align : {size_t{0}, size_t{3}, size_t{24}, size_t{48}}) {
    errno = 0;
    EXPECT_EQ(aligned_alloc(align, 16), nullptr) << align;
    EXPECT_EQ(errno, EINVAL) << align;
  }
}

TEST(Aligned, MemalignRoundsANonPowerOfTwoUp) {
  // glibc rounds the alignment up to the next power of two.
  const std::pair<size_t, size_t> cases[] = {
      {24, 32}, {48, 64}, {100, 128}, {3000, 4096}, {40000, 65536},
      {3 * kMiB, 4 * kMiB}};
  for (const auto& [align, effective] : cases) {
    for (size_t size : {size_t{1}, size_t{100}, size_t{5000}, size_t{300000}}) {
      void* p = memalign(align, size);
      CheckBlock(p, size, effective, "memalign non-power-of-two");
      free(p);
    }
  }
}

TEST(Aligned, ImpossibleAlignmentsFailCleanly) {
  // Valid powers of two that no address space can honour.
  for (size_t align : {size_t{1} << 46, size_t{1} << 62, size_t{1} << 63}) {
    SCOPED_TRACE(testing::Message() << "align 2^" << __builtin_ctzll(align));
    const volatile size_t a = align;
    errno = 0;
    EXPECT_EQ(aligned_alloc(a, 16), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    errno = 0;
    EXPECT_EQ(memalign(a, 16), nullptr);
    EXPECT_EQ(errno, ENOMEM);
    void* out = reinterpret_cast<void*>(uintptr_t{0xdeadbeef});
    EXPECT_EQ(posix_memalign(&out, a, 16), ENOMEM);
    EXPECT_EQ(out, reinterpret_cast<void*>(uintptr_t{0xdeadbeef}));
    EXPECT_EQ(::operator new(16, std::align_val_t{a}, std::nothrow), nullptr);
    EXPECT_THROW(
        {
          void* volatile p = ::operator new(16, std::align_val_t{a});
          (void)p;
        },
        std::bad_alloc);
  }
}

TEST(Aligned, VallocAndPvallocImpossibleSizes) {
  for (size_t size : {SIZE_MAX, SIZE_MAX - 4095, size_t{PTRDIFF_MAX} + 1}) {
    const volatile size_t n = size;
    errno = 0;
    EXPECT_EQ(valloc(n), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM) << size;
    errno = 0;
    EXPECT_EQ(pvalloc(n), nullptr) << size;
    EXPECT_EQ(errno, ENOMEM) << size;
  }
}

TEST(Aligned, MemalignImpossibleAlignmentOrSize) {
  errno = 0;
  const volatile size_t too_aligned = (SIZE_MAX >> 1) + 2;
  EXPECT_EQ(memalign(too_aligned, 16), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  const volatile size_t huge = SIZE_MAX - 4096;
  EXPECT_EQ(memalign(64, huge), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

}  // namespace
