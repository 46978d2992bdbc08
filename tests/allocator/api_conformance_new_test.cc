// tests/allocator/api_conformance_new_test.cc: every operator new and
// delete form, the new-handler, and impossible sizes (part of the
// api_conformance_*_test binaries; see api_conformance_test.cc).

#include "tests/allocator/api_conformance.h"

namespace {

using namespace cidmalloc_conformance;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------
// operator new and delete.

const size_t kNewSizes[] = {0, 1, 100, 5000, 65536, 100000, 3 * kMiB};

TEST(OperatorNew, EveryFormAllocatesAndEveryDeleteFrees) {
  for (size_t n : kNewSizes) {
    SCOPED_TRACE(testing::Message() << "size " << n);
    void* p;
    p = ::operator new(n);
    CheckBlock(p, n, kMaxAlign, "new");
    ::operator delete(p);
    EXPECT_TRUE(LooksFreed(p));

    p = ::operator new[](n);
    CheckBlock(p, n, kMaxAlign, "new[]");
    ::operator delete[](p);
    EXPECT_TRUE(LooksFreed(p));

    p = ::operator new(n, std::nothrow);
    CheckBlock(p, n, kMaxAlign, "new nothrow");
    ::operator delete(p, std::nothrow);
    EXPECT_TRUE(LooksFreed(p));

    p = ::operator new[](n, std::nothrow);
    CheckBlock(p, n, kMaxAlign, "new[] nothrow");
    ::operator delete[](p, std::nothrow);
    EXPECT_TRUE(LooksFreed(p));

    p = ::operator new(n);
    CheckBlock(p, n, kMaxAlign, "new / sized delete");
    ::operator delete(p, n);
    EXPECT_TRUE(LooksFreed(p));

    p = ::operator new[](n);
    CheckBlock(p, n, kMaxAlign, "new[] / sized delete[]");
    ::operator delete[](p, n);
    EXPECT_TRUE(LooksFreed(p));

    for (size_t a : {size_t{32}, size_t{256}, size_t{8192}, size_t{1} << 16,
                     size_t{1} << 20}) {
      const std::align_val_t al{a};
      p = ::operator new(n, al);
      CheckBlock(p, n, a, "new align");
      ::operator delete(p, al);
      EXPECT_TRUE(LooksFreed(p));

      p = ::operator new[](n, al);
      CheckBlock(p, n, a, "new[] align");
      ::operator delete[](p, al);
      EXPECT_TRUE(LooksFreed(p));

      p = ::operator new(n, al, std::nothrow);
      CheckBlock(p, n, a, "new align nothrow");
      ::operator delete(p, al, std::nothrow);
      EXPECT_TRUE(LooksFreed(p));

      p = ::operator new[](n, al, std::nothrow);
      CheckBlock(p, n, a, "new[] align nothrow");
      ::operator delete[](p, al, std::nothrow);
      EXPECT_TRUE(LooksFreed(p));

      p = ::operator new(n, al);
      CheckBlock(p, n, a, "new align / sized aligned delete");
      ::operator delete(p, n, al);
      EXPECT_TRUE(LooksFreed(p));

      p = ::operator new[](n, al);
      CheckBlock(p, n, a, "new[] align / sized aligned delete[]");
      ::operator delete[](p, n, al);
      EXPECT_TRUE(LooksFreed(p));
    }
  }
}

// Sized operator delete pushes at the stack of the size it is given when
// that is the span tag's; a wrong size must not misfile the object into the
// wrong class (a later, larger request would get a block too small).  Every
// mismatched pair of a few small and mid sizes: after the wrong-size delete,
// the block looks freed, and none of the next kDrain blocks of the other
// size is it.
TEST(OperatorNew, SizedDeleteWithAWrongSizeFreesIntoTheBlocksOwnClass) {
  constexpr size_t kSizes[] = {1, 16, 17, 64, 200, 1000, 1024, 1025, 5000};
  constexpr int kDrain = 2048;
  static void* got[kDrain];  // Static: no allocation while draining.
  for (size_t a : kSizes) {
    for (size_t b : kSizes) {
      void* p = ::operator new(a);
      const size_t usable = malloc_usable_size(p);
      ::operator delete(p, b);
      EXPECT_TRUE(LooksFreed(p)) << a << " deleted as " << b;
      bool found = false;
      for (int i = 0; i < kDrain; ++i) {
        got[i] = ::operator new(b);
        ASSERT_GE(malloc_usable_size(got[i]), b);
        // A block of b's class (all of them have one usable size) that is p,
        // whose class is another.
        if (got[i] == p && malloc_usable_size(got[0]) != usable) found = true;
      }
      EXPECT_FALSE(found) << "a block of " << usable << " bytes came back "
                          << "for " << b << " bytes";
      for (int i = 0; i < kDrain; ++i) ::operator delete(got[i], b);
    }
  }
}

struct alignas(512) Overaligned {
  char bytes[700];
};

TEST(OperatorNew, NewExpressionsUseTheReplacements) {
  int* i = new int(42);
  EXPECT_EQ(KindOf(Opaque(i)), BlockKind::kSmall);
  EXPECT_EQ(*i, 42);
  delete i;
  int* arr = new int[50000];  // 200 KB: a page run.
  EXPECT_EQ(KindOf(Opaque(arr)), BlockKind::kLarge);
  arr[49999] = 1;
  delete[] arr;
  Overaligned* o = new Overaligned;
  EXPECT_TRUE(IsAligned(Opaque(o), 512));
  EXPECT_NE(KindOf(o), BlockKind::kNotOurs);
  o->bytes[699] = 1;
  delete o;
  Overaligned* oa = new Overaligned[7];
  EXPECT_TRUE(IsAligned(Opaque(oa), 512));
  oa[6].bytes[0] = 1;
  delete[] oa;
  std::vector<std::string> strings;
  for (int k = 0; k < 1000; ++k) strings.push_back(std::string(k, 'x'));
  EXPECT_NE(KindOf(strings.data()), BlockKind::kNotOurs);
}

// An alignment that is not a power of two is undefined behaviour for
// operator new; cidmalloc rounds it up to the next power of two, as
// memalign does, instead of handing out a block aligned to neither.
TEST(OperatorNew, ANonPowerOfTwoAlignmentIsRoundedUp) {
  const std::pair<size_t, size_t> cases[] = {
      {24, 32}, {48, 64}, {3000, 4096}, {40000, 65536}, {3 * kMiB, 4 * kMiB}};
  for (const auto& [align, effective] : cases) {
    for (size_t size : {size_t{1}, size_t{100}, size_t{5000}, size_t{300000}}) {
      void* p = ::operator new(size, std::align_val_t{align});
      EXPECT_TRUE(IsAligned(p, effective)) << align << " " << size;
      EXPECT_GE(malloc_usable_size(p), size);
      ::operator delete(p, std::align_val_t{align});
    }
  }
}

TEST(OperatorNew, ImpossibleSizeThrowsOrReturnsNull) {
  for (size_t n : {SIZE_MAX, size_t{PTRDIFF_MAX} + 1, size_t{1} << 62}) {
    const volatile size_t size = n;
    EXPECT_THROW(
        {
          void* volatile p = ::operator new(size);
          ::operator delete(p);
        },
        std::bad_alloc)
        << n;
    EXPECT_THROW(
        {
          void* volatile p = ::operator new[](size);
          ::operator delete[](p);
        },
        std::bad_alloc)
        << n;
    EXPECT_THROW(
        {
          void* volatile p = ::operator new(size, std::align_val_t{64});
          ::operator delete(p, std::align_val_t{64});
        },
        std::bad_alloc)
        << n;
    EXPECT_EQ(::operator new(size, std::nothrow), nullptr) << n;
    EXPECT_EQ(::operator new[](size, std::nothrow), nullptr) << n;
    EXPECT_EQ(::operator new(size, std::align_val_t{4096}, std::nothrow),
              nullptr)
        << n;
    EXPECT_EQ(::operator new[](size, std::align_val_t{4096}, std::nothrow),
              nullptr)
        << n;
  }
}

int g_handler_calls = 0;

void HandlerThatGivesUp() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);
}

void HandlerThatThrows() {
  ++g_handler_calls;
  throw std::bad_alloc();
}

TEST(OperatorNew, NewHandlerIsCalledThenBadAllocWhenItUninstallsItself) {
  const volatile size_t huge = size_t{1} << 62;  // Larger than any heap.
  g_handler_calls = 0;
  std::set_new_handler(HandlerThatGivesUp);
  EXPECT_THROW({ void* volatile p = ::operator new(huge); (void)p; },
               std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 1);
  EXPECT_EQ(std::get_new_handler(), nullptr);

  g_handler_calls = 0;
  std::set_new_handler(HandlerThatGivesUp);
  EXPECT_THROW(
      {
        void* volatile p = ::operator new[](huge, std::align_val_t{128});
        (void)p;
      },
      std::bad_alloc);
  EXPECT_EQ(g_handler_calls, 1);

  // nothrow forms call the handler too, then return null.
  g_handler_calls = 0;
  std::set_new_handler(HandlerThatGivesUp);
  EXPECT_EQ(::operator new(huge, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 1);

  // A handler that throws: the throwing form propagates it, the nothrow
  // form returns null.
  g_handler_calls = 0;
  std::set_new_handler(HandlerThatThrows);
  EXPECT_THROW({ void* volatile p = ::operator new(huge); (void)p; },
               std::bad_alloc);
  EXPECT_EQ(::operator new(huge, std::nothrow), nullptr);
  EXPECT_EQ(::operator new(huge, std::align_val_t{64}, std::nothrow), nullptr);
  EXPECT_EQ(g_handler_calls, 3);
  std::set_new_handler(nullptr);
}

// The reserve-freeing handler needs an allocation that fails for lack of
// memory and can then succeed: that is in oom_test (RLIMIT_AS).

}  // namespace
