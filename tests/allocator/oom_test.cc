// tests/allocator/oom_test: running out of memory without crashing.
//
// The address space limit (RLIMIT_AS, soft limit only, so it can be raised
// again) is lowered to a little above what the process uses; then
// allocations must fail cleanly (NULL + ENOMEM, std::bad_alloc, nothrow
// nullptr), a new-handler that frees a reserve must let operator new
// succeed, and once the limit is raised everything must work again.
//
// While the limit is low the tests only record results; gtest's assertions
// (which allocate) run after it is raised.
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <new>
#include <vector>

#include "gtest/gtest.h"
#include "tests/allocator/alloc_probe.h"
#include "tests/allocator/test_util.h"

// These tests look at blocks after freeing them (and free them twice) on
// purpose; the pointers also go through Opaque() so the optimiser cannot
// reason about them.
#pragma GCC diagnostic ignored "-Wuse-after-free"

namespace {

using cidmalloc_test::Dirty;
using cidmalloc_test::FillPattern;
using cidmalloc_test::FirstPatternMismatch;
using cidmalloc_test::Opaque;
using cidmalloc_test::VmSizeBytes;

constexpr size_t kMiB = 1024 * 1024;

// Lowers RLIMIT_AS's soft limit to VmSize + headroom while alive.
class ScopedAddressSpaceLimit {
 public:
  explicit ScopedAddressSpaceLimit(size_t headroom) {
    ok_ = getrlimit(RLIMIT_AS, &saved_) == 0;
    const size_t vm = VmSizeBytes();
    ok_ = ok_ && vm > 0;
    if (!ok_) return;
    struct rlimit low = saved_;
    low.rlim_cur = vm + headroom;
    if (saved_.rlim_max != RLIM_INFINITY && low.rlim_cur > saved_.rlim_max) {
      ok_ = false;
      return;
    }
    ok_ = setrlimit(RLIMIT_AS, &low) == 0;
  }
  ~ScopedAddressSpaceLimit() { Restore(); }
  void Restore() {
    if (ok_) setrlimit(RLIMIT_AS, &saved_);
    ok_ = false;
  }
  bool ok() const { return ok_; }

 private:
  struct rlimit saved_;
  bool ok_ = false;
};

TEST(OutOfMemory, AllocationsFailCleanlyAndRecover) {
  // Room for the pointers, reserved before the limit: pushing must not
  // allocate while memory is short.
  std::vector<void*> small;
  small.reserve(1 << 20);
  void* keep = malloc(300);  // A live block to realloc under pressure.
  ASSERT_NE(keep, nullptr);
  FillPattern(keep, 300, 21);

  void* big = reinterpret_cast<void*>(1);
  int big_errno = 0;
  void* huge = reinterpret_cast<void*>(1);
  int huge_errno = 0;
  bool small_failed = false;
  int small_errno = 0;
  bool new_threw = false;
  bool new_array_threw = false;
  void* nothrow_result = reinterpret_cast<void*>(1);
  void* calloc_result = reinterpret_cast<void*>(1);
  int calloc_errno = 0;
  void* realloc_result = reinterpret_cast<void*>(1);
  int realloc_errno = 0;
  int memalign_rc = 0;
  void* memalign_out = reinterpret_cast<void*>(1);
  {
    ScopedAddressSpaceLimit limit(64 * kMiB);
    ASSERT_TRUE(limit.ok());
    errno = 0;
    big = malloc(512 * kMiB);  // A page heap reservation cannot fit.
    big_errno = errno;
    errno = 0;
    huge = malloc(8 * kMiB + 1);  // May fit; it just must not crash.
    huge_errno = errno;
    // Small objects until the heap cannot grow any more.
    for (size_t i = 0; i < small.capacity(); ++i) {
      errno = 0;
      void* p = malloc(4000);
      if (p == nullptr) {
        small_failed = true;
        small_errno = errno;
        break;
      }
      static_cast<char*>(p)[0] = 1;
      small.push_back(p);
    }
    // No span could be had: no page run can either.
    try {
      void* volatile p = ::operator new(kMiB);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      new_threw = true;
    }
    try {
      char* volatile p = new char[2 * kMiB];
      delete[] p;
    } catch (const std::bad_alloc&) {
      new_array_threw = true;
    }
    nothrow_result = ::operator new(kMiB, std::nothrow);
    errno = 0;
    calloc_result = calloc(kMiB, 1);
    calloc_errno = errno;
    errno = 0;
    realloc_result = realloc(keep, 4 * kMiB);
    realloc_errno = errno;
    memalign_rc = posix_memalign(&memalign_out, 4096, 3 * kMiB);
  }

  EXPECT_EQ(big, nullptr);
  EXPECT_EQ(big_errno, ENOMEM);
  if (huge == nullptr) {
    EXPECT_EQ(huge_errno, ENOMEM);
  } else {
    free(huge);
  }
  ASSERT_TRUE(small_failed) << "no failure after " << small.size()
                            << " small allocations";
  EXPECT_EQ(small_errno, ENOMEM);
  EXPECT_GT(small.size(), 0u);
  EXPECT_TRUE(new_threw);
  EXPECT_TRUE(new_array_threw);
  EXPECT_EQ(nothrow_result, nullptr);
  EXPECT_EQ(calloc_result, nullptr);
  EXPECT_EQ(calloc_errno, ENOMEM);
  EXPECT_EQ(realloc_result, nullptr);
  EXPECT_EQ(realloc_errno, ENOMEM);
  EXPECT_EQ(FirstPatternMismatch(keep, 300, 21), 300u)
      << "failed realloc damaged the block";
  EXPECT_EQ(memalign_rc, ENOMEM);
  EXPECT_EQ(memalign_out, reinterpret_cast<void*>(1)) << "out was written";

  // Everything the program got is intact and can be freed.
  for (void* p : small) EXPECT_EQ(static_cast<char*>(p)[0], 1);
  for (void* p : small) free(p);
  free(keep);

  // With the limit back, memory works again, at every size.
  for (size_t size : {size_t{16}, size_t{4000}, size_t{60000}, kMiB,
                      512 * kMiB}) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr) << size;
    Dirty(p, 0x5c, size < 64 * kMiB ? size : 64 * kMiB);
    free(p);
  }
  std::vector<void*> again;
  for (int i = 0; i < 20000; ++i) {
    void* p = malloc(4000);
    ASSERT_NE(p, nullptr) << i;
    again.push_back(p);
  }
  for (void* p : again) free(p);
}

void* g_reserve = nullptr;
int g_handler_calls = 0;

// Frees the reserve on the first call; gives up (uninstalls itself) on the
// next, so a second call ends in bad_alloc instead of a loop.
void FreeReserve() {
  ++g_handler_calls;
  if (g_reserve != nullptr) {
    free(g_reserve);
    g_reserve = nullptr;
  } else {
    std::set_new_handler(nullptr);
  }
}

// Allocates `count` blocks of `bytes`, writes them and frees them all.
void AllocateAndFree(int count, size_t bytes) {
  std::vector<void*> blocks(static_cast<size_t>(count));
  for (void*& b : blocks) {
    b = malloc(bytes);
    ASSERT_NE(b, nullptr) << bytes;
    Dirty(b, 1, bytes);
  }
  for (void* b : blocks) free(b);
}

// malloc(bytes) with only 8 MiB of address space to spare: it succeeds
// only where the heap gives back what it keeps mapped but free.  Must leave
// errno alone, and the block must be usable.
void ExpectFitsIn8MiBOfRoom(size_t bytes) {
  void* big = nullptr;
  int big_errno = 0;
  {
    ScopedAddressSpaceLimit limit(8 * kMiB);
    ASSERT_TRUE(limit.ok());
    errno = 0;
    big = malloc(bytes);
    big_errno = errno;
  }
  ASSERT_NE(big, nullptr) << "malloc(" << bytes / kMiB << " MiB) failed";
  EXPECT_EQ(big_errno, 0);
  Dirty(big, 2, bytes);
  free(big);
}

// Freed mappings of their own stay mapped in the huge cache; when the OS
// refuses a new mapping (here the address-space limit), the cache must
// give them back rather than fail the allocation.
TEST(OutOfMemory, CachedMappingsMakeWayForANewMapping) {
  malloc_trim(0);               // An empty cache, and no free pages held.
  AllocateAndFree(4, 4 * kMiB);  // 16 MiB of mappings, cached.
  ExpectFitsIn8MiBOfRoom(20 * kMiB);
}

// The buddy heap's chunks stay mapped once reserved; when the OS refuses a
// mapping, the wholly free ones must go back, address space and all.
TEST(OutOfMemory, FreeChunksMakeWayForANewMapping) {
  AllocateAndFree(96, kMiB);  // Page runs: 96 MiB of chunks, free.
  ExpectFitsIn8MiBOfRoom(64 * kMiB);
  AllocateAndFree(8, kMiB);  // The heap grows again afterwards.
}

// Unmaps what the heap keeps mapped but free (free chunks, cached
// mappings), as a refused mapping does, so that a test's address-space
// headroom is what it says.
void DropWhatTheHeapKeepsFree() {
  ScopedAddressSpaceLimit limit(0);
  void* p = malloc(64 * kMiB);  // Refused: the heap gives back what it can.
  free(Opaque(p));
}

TEST(OutOfMemory, NewHandlerThatFreesAReserveLetsNewSucceed) {
  struct Case {
    const char* what;
    size_t align;  // 0: plain new
    bool nothrow;
  };
  for (const Case& c : {Case{"new", 0, false}, Case{"new nothrow", 0, true},
                        Case{"new align", 4096, false},
                        Case{"new align nothrow", 1 << 21, true}}) {
    SCOPED_TRACE(c.what);
    DropWhatTheHeapKeepsFree();  // Else 64 MiB might fit without the reserve.
    g_reserve = malloc(96 * kMiB);  // Its own mapping: freeing unmaps it.
    ASSERT_NE(g_reserve, nullptr);
    g_handler_calls = 0;
    void* p = nullptr;
    bool threw = false;
    {
      ScopedAddressSpaceLimit limit(16 * kMiB);
      ASSERT_TRUE(limit.ok());
      std::set_new_handler(FreeReserve);
      const size_t n = 64 * kMiB;  // Does not fit until the reserve goes.
      try {
        if (c.align == 0) {
          p = c.nothrow ? ::operator new(n, std::nothrow) : ::operator new(n);
        } else {
          const std::align_val_t a{c.align};
          p = c.nothrow ? ::operator new(n, a, std::nothrow)
                        : ::operator new(n, a);
        }
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      std::set_new_handler(nullptr);
    }
    EXPECT_FALSE(threw);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(g_handler_calls, 1);
    EXPECT_EQ(g_reserve, nullptr);
    if (c.align != 0) {
      EXPECT_TRUE(cidmalloc_test::IsAligned(p, c.align));
    }
    FillPattern(p, 64 * kMiB, 22);
    EXPECT_EQ(FirstPatternMismatch(p, 64 * kMiB, 22), 64 * kMiB);
    if (c.align == 0) {
      ::operator delete(p);
    } else {
      ::operator delete(p, std::align_val_t{c.align});
    }
    EXPECT_TRUE(cidmalloc_test::LooksFreed(p));
  }
}

TEST(OutOfMemory, NewHandlerWithoutAReserveEndsInBadAlloc) {
  g_reserve = nullptr;
  g_handler_calls = 0;
  bool threw = false;
  void* nothrow_result = reinterpret_cast<void*>(1);
  {
    ScopedAddressSpaceLimit limit(16 * kMiB);
    ASSERT_TRUE(limit.ok());
    std::set_new_handler(FreeReserve);
    try {
      void* volatile p = ::operator new(64 * kMiB);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    std::set_new_handler(FreeReserve);
    nothrow_result = ::operator new(64 * kMiB, std::nothrow);
    std::set_new_handler(nullptr);
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(nothrow_result, nullptr);
  EXPECT_EQ(g_handler_calls, 2);
}

}  // namespace
