// tests/allocator/death_test: misuse of the heap must stop the program with
// a clear "cidmalloc: ..." message on stderr and SIGABRT, never corrupt it
// silently.
//
// Death tests run "threadsafe" (each one re-executes this binary), so every
// child starts from a fresh heap.  Core dumps are turned off in main(): an
// abort that dumps core is slow and litters the sandbox.
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <vector>

#include "gtest/gtest.h"
#include "tests/allocator/alloc_probe.h"
#include "tests/allocator/test_util.h"

extern "C" void free_sized(void*, size_t);
extern "C" void free_aligned_sized(void*, size_t, size_t);

// These tests look at blocks after freeing them (and free them twice) on
// purpose; the pointers also go through Opaque() so the optimiser cannot
// reason about them.
#pragma GCC diagnostic ignored "-Wuse-after-free"

namespace {

using cidmalloc_test::BlockKind;
using cidmalloc_test::KindOf;
using cidmalloc_test::Opaque;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

#define EXPECT_ABORT(statement, regex) \
  EXPECT_EXIT(statement, testing::KilledBySignal(SIGABRT), regex)

// Message shapes (a hex address ends every one).
constexpr char kHex[] = "0x[0-9a-f]+";

std::string Re(const char* prefix) {
  return std::string("cidmalloc: ") + prefix + ".*" + kHex;
}

// ---- Pointers the heap never returned --------------------------------------

TEST(DeathTest, FreeOfAStackPointer) {
  EXPECT_ABORT(
      {
        char buf[64];
        memset(buf, 1, sizeof buf);
        free(Opaque(static_cast<void*>(buf)));
      },
      Re("free\\(\\): invalid pointer"));
}

TEST(DeathTest, FreeOfAGlobal) {
  static char global[128];
  EXPECT_ABORT(free(Opaque(static_cast<void*>(global))),
               Re("free\\(\\): invalid pointer"));
}

TEST(DeathTest, FreeOfAnMmapPointer) {
  EXPECT_ABORT(
      {
        void* m = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) free(m);
      },
      Re("free\\(\\): invalid pointer"));
}

TEST(DeathTest, FreeOfANonCanonicalAddress) {
  EXPECT_ABORT(free(Opaque(reinterpret_cast<void*>(uintptr_t{0xdead} << 48))),
               Re("free\\(\\): invalid pointer"));
}

// ---- Pointers into blocks --------------------------------------------------

TEST(DeathTest, FreeInsideASmallObject) {
  for (size_t offset : {size_t{8}, size_t{16}, size_t{63}}) {
    EXPECT_ABORT(
        {
          char* p = static_cast<char*>(malloc(64));
          free(Opaque(p + offset));
        },
        Re("free\\(\\): invalid pointer \\(not the start of an object\\)"))
        << "offset " << offset;
  }
}

TEST(DeathTest, FreeInsideALargeBlock) {
  // 200 KiB: a page run.  +4096 is inside its first 8 KiB page, +8192 and
  // +100000 inside later pages.
  for (size_t offset : {size_t{16}, size_t{4096}, size_t{8192}, size_t{100000}}) {
    EXPECT_ABORT(
        {
          char* p = static_cast<char*>(malloc(200 * kKiB));
          if (KindOf(p) == BlockKind::kLarge) free(Opaque(p + offset));
        },
        Re("free\\(\\): invalid pointer"))
        << "offset " << offset;
  }
}

TEST(DeathTest, FreeInsideAHugeBlock) {
  for (size_t offset : {size_t{4096}, 2 * kMiB}) {
    EXPECT_ABORT(
        {
          char* p = static_cast<char*>(malloc(5 * kMiB));
          if (KindOf(p) == BlockKind::kHuge) free(Opaque(p + offset));
        },
        Re("free\\(\\): invalid pointer"))
        << "offset " << offset;
  }
}

// The start of an object the heap has not handed out yet: not caught at
// free (the cache takes it), but when it goes back to its span (README.md,
// "Behaviour on bad input").  A fresh span hands out its objects a batch at
// a time, so after one malloc its last object was never carved.
TEST(DeathTest, FreeOfAnObjectNeverHandedOutIsCaughtAtItsSpan) {
  const size_t size = 3000;
  const cidmalloc::central::SizeClassInfo& k =
      cidmalloc::central::Class(cidmalloc::central::ClassOf(size));
  const uint32_t objects = k.span_bytes / k.size;
  ASSERT_GT(objects, 2u * k.batch) << "one batch carves the whole span";
  EXPECT_ABORT(
      {
        void* p = malloc(size);
        const uintptr_t start =
            reinterpret_cast<uintptr_t>(p) & ~uintptr_t{k.span_bytes - 1};
        void* last =
            reinterpret_cast<void*>(start + uintptr_t{objects - 1} * k.size);
        if (last != p) {
          free(Opaque(last));
          malloc_trim(0);  // The caches drained: to the span it goes.
        }
      },
      Re("free\\(\\): invalid pointer \\(an object never handed out\\)"));
}

// ---- Double frees ----------------------------------------------------------

TEST(DeathTest, DoubleFreeOfASmallObjectImmediately) {
  for (size_t size : {size_t{1}, size_t{64}, size_t{1000}, size_t{65536}}) {
    EXPECT_ABORT(
        {
          void* p = malloc(size);
          free(p);
          free(Opaque(p));
        },
        Re("free\\(\\): double free of")) << "size " << size;
  }
}

TEST(DeathTest, DoubleFreeOfASmallObjectSittingInTheCache) {
  EXPECT_ABORT(
      {
        void* a = malloc(64);
        void* others[10];
        for (void*& o : others) o = malloc(64);
        free(a);
        for (void* o : others) free(o);  // a is now deep in the cache.
        free(Opaque(a));
      },
      Re("free\\(\\): double free of"));
}

// A double free the free cookie cannot see: the object went back to its
// span, and then a use-after-free write overwrote its second word (the
// cookie).  The second free is taken into a cache; when it goes back to
// the span, the span's bitmap shows the object free already.
TEST(DeathTest, DoubleFreeOfASmallObjectBackInItsSpan) {
  EXPECT_ABORT(
      {
        const uintptr_t span_bytes =
            cidmalloc::central::Class(cidmalloc::central::ClassOf(96))
                .span_bytes;
        std::vector<void*> v;
        for (int i = 0; i < 100; ++i) v.push_back(malloc(96));
        void* victim = v[10];
        // The others stay live, so the victim's span (shared with one of
        // its neighbours) stays with its list and keeps its bitmap.
        const auto span_of = [&](void* p) {
          return reinterpret_cast<uintptr_t>(p) & ~(span_bytes - 1);
        };
        bool shared = false;
        for (void* p : v) shared |= p != victim && span_of(p) == span_of(victim);
        free(victim);
        malloc_trim(0);  // Caches drained: victim is free in its span.
        memset(Opaque(victim), 0x5a, 16);  // The write erases the cookie.
        if (shared) {
          free(Opaque(victim));  // Taken: no cookie.
          malloc_trim(0);        // Back to the span: caught.
        }
      },
      Re("free\\(\\): double free \\(the object is free in its span\\)"));
}

TEST(DeathTest, DoubleFreeOfALargeBlock) {
  EXPECT_ABORT(
      {
        void* p = malloc(300 * kKiB);  // Above the run stacks' 256 KiB.
        free(p);
        free(Opaque(p));
      },
      Re("free\\(\\): invalid pointer or double free"));
}

TEST(DeathTest, DoubleFreeOfAHugeBlock) {
  // Kept in its node's cache of mappings for reuse (within the 32 MiB
  // release threshold): the second free finds it there.
  EXPECT_ABORT(
      {
        void* p = malloc(3 * kMiB);
        free(p);
        free(Opaque(p));
      },
      Re("free\\(\\): double free \\(the block's mapping is cached\\)"));
  // Larger than the threshold: unmapped at once, so no longer the heap's.
  EXPECT_ABORT(
      {
        void* p = malloc(40 * kMiB);
        free(p);
        free(Opaque(p));
      },
      Re("free\\(\\): invalid pointer"));
}

TEST(DeathTest, DoubleDeleteAndMismatchedSizedDelete) {
  EXPECT_ABORT(
      {
        int* p = new int[16];
        delete[] p;
        delete[] Opaque(p);
      },
      Re("free\\(\\): double free of"));
  EXPECT_ABORT(
      {
        void* p = ::operator new(100, std::align_val_t{256});
        ::operator delete(p, std::align_val_t{256});
        ::operator delete(Opaque(p), std::align_val_t{256});
      },
      Re("free\\(\\): double free of"));
  // Sized delete, the second time with another size (whose stack is not
  // the object's): the mark is checked before the size is used.
  EXPECT_ABORT(
      {
        void* p = ::operator new(64);
        ::operator delete(p, 64);
        ::operator delete(Opaque(p), 16);
      },
      Re("free\\(\\): double free of"));
}

// ---- realloc and malloc_usable_size ----------------------------------------

TEST(DeathTest, ReallocOfAFreedPointer) {
  EXPECT_ABORT(
      {
        void* p = malloc(100);
        free(p);
        void* q = realloc(Opaque(p), 200);
        free(q);
      },
      Re("realloc\\(\\).*double free"));
  EXPECT_ABORT(
      {
        void* p = malloc(300 * kKiB);
        free(p);
        void* q = realloc(Opaque(p), 400 * kKiB);
        free(q);
      },
      Re("realloc\\(\\): invalid pointer"));
  EXPECT_ABORT(
      {
        void* p = malloc(3 * kMiB);
        free(p);
        void* q = realloc(Opaque(p), 10);
        free(q);
      },
      Re("realloc\\(\\): invalid pointer"));
}

TEST(DeathTest, ReallocOfAnInvalidPointer) {
  EXPECT_ABORT(
      {
        char buf[32];
        void* q = realloc(Opaque(static_cast<void*>(buf)), 64);
        free(q);
      },
      Re("realloc\\(\\): invalid pointer"));
  EXPECT_ABORT(
      {
        char* p = static_cast<char*>(malloc(64));
        void* q = realloc(Opaque(p + 16), 128);
        free(q);
      },
      Re("realloc\\(\\): invalid pointer"));
}

TEST(DeathTest, MallocUsableSizeOfAnInvalidPointer) {
  EXPECT_ABORT(
      {
        char buf[32];
        malloc_usable_size(Opaque(static_cast<void*>(buf)));
      },
      Re("malloc_usable_size\\(\\): invalid pointer"));
  EXPECT_ABORT(
      {
        char* p = static_cast<char*>(malloc(64));
        malloc_usable_size(Opaque(p + 8));
      },
      Re("malloc_usable_size\\(\\): invalid pointer"));
  EXPECT_ABORT(
      {
        char* p = static_cast<char*>(malloc(200 * kKiB));
        malloc_usable_size(Opaque(p + 8192));
      },
      Re("malloc_usable_size\\(\\): invalid pointer"));
  EXPECT_ABORT(
      {
        void* p = malloc(64);
        free(p);
        malloc_usable_size(Opaque(p));
      },
      Re("malloc_usable_size\\(\\).*double free"));
}

// ---- C23 sized frees -------------------------------------------------------

TEST(DeathTest, FreeSizedWithASizeLargerThanTheBlock) {
  EXPECT_ABORT(
      {
        void* p = malloc(100);
        free_sized(p, 5000);
      },
      Re("free_sized\\(\\): size larger than the block"));
  EXPECT_ABORT(
      {
        void* p = aligned_alloc(64, 100);
        free_aligned_sized(static_cast<char*>(p) + 16, 64, 100);
      },
      Re("free_aligned_sized\\(\\): pointer not aligned as promised"));
}

}  // namespace

int main(int argc, char** argv) {
  // No core files from the expected aborts.
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
