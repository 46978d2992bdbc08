// tests/allocator/size_class_test: the size-class table
// (allocator/central/size_classes.h).
//
// Prints the whole table (class, size, span bytes, objects per span, batch,
// max capacity, worst-case and average internal fragmentation over the
// request sizes that map to the class) and asserts the worst waste above
// 128 bytes, then checks the lookups against brute force and the table
// against its documented invariants.
#include <stdint.h>
#include <stdio.h>

#include "allocator/central/size_classes.h"
#include "gtest/gtest.h"

namespace {

using cidmalloc::central::Class;
using cidmalloc::central::ClassOf;
using cidmalloc::central::IsObjectStart;
using cidmalloc::central::kMaxSmallSize;
using cidmalloc::central::kMinAlign;
using cidmalloc::central::kNumClasses;
using cidmalloc::central::SizeClassInfo;

// The smallest class whose size is >= s (class 1 for s == 0), by search.
int BruteForceClassOf(size_t s) {
  for (int c = 1; c < kNumClasses; ++c) {
    if (Class(c).size >= s) return c;
  }
  return 0;
}

// Request sizes [first, last] that map to class c (by brute force).
void RequestRange(int c, size_t* first, size_t* last) {
  *first = c == 1 ? 0 : Class(c - 1).size + 1;
  *last = Class(c).size;
}

// Prints the table, and asserts what it prints: each class's worst and
// average waste over its request sizes, and the worst waste above 128 bytes
// within the bound size_classes.h documents (1/9 of the object, so within
// the 20% the table was built for).
TEST(SizeClasses, PrintTable) {
  printf("%5s %7s %9s %8s %6s %8s %9s %9s\n", "class", "size", "span", "objs",
         "batch", "max_cap", "worst%", "avg%");
  // The worst request above 128 bytes: worst_s of a worst_size-byte object.
  size_t worst_s = 0;
  uint32_t worst_size = 0;
  for (int c = 1; c < kNumClasses; ++c) {
    const SizeClassInfo& k = Class(c);
    size_t first, last;
    RequestRange(c, &first, &last);
    ASSERT_LE(first, last) << "class " << c << " serves no request size";
    double worst = 0, sum = 0;
    size_t count = 0;
    for (size_t s = first == 0 ? 1 : first; s <= last; ++s) {
      const double waste = static_cast<double>(k.size - s) / k.size;
      if (waste > worst) worst = waste;
      sum += waste;
      ++count;
      // (size - s) / size > (worst_size - worst_s) / worst_size, in integers.
      if (s > 128 && (worst_size == 0 || (k.size - s) * worst_size >
                                             (worst_size - worst_s) * k.size)) {
        worst_s = s;
        worst_size = k.size;
      }
    }
    const double avg = count != 0 ? sum / count : 0.0;
    // The smallest request of the class wastes the most; the average less.
    EXPECT_EQ(worst, static_cast<double>(k.size - (first == 0 ? 1 : first)) /
                         k.size)
        << "class " << c;
    EXPECT_LE(avg, worst) << "class " << c;
    printf("%5d %7u %9u %8u %6u %8u %8.1f%% %8.1f%%\n", c, k.size,
           k.span_bytes, k.span_bytes / k.size, k.batch, k.max_capacity,
           100 * worst, 100 * avg);
  }
  ASSERT_NE(worst_size, 0u);
  const size_t wasted = worst_size - worst_s;
  printf("worst internal fragmentation above 128 bytes: %.1f%% "
         "(%zu bytes of %u for a request of %zu)\n",
         100.0 * static_cast<double>(wasted) / worst_size, wasted, worst_size,
         worst_s);
  EXPECT_LE(5 * wasted, worst_size) << "more than 20% wasted";
  EXPECT_LE(9 * wasted, worst_size) << "more than size_classes.h's 1/9";
}

TEST(SizeClasses, ClassOfIsTheSmallestClassThatFits) {
  for (size_t s = 0; s <= kMaxSmallSize; ++s) {
    const int c = ClassOf(s);
    ASSERT_EQ(c, BruteForceClassOf(s)) << "size " << s;
    ASSERT_GE(Class(c).size, s);
  }
  EXPECT_EQ(ClassOf(0), 1);
  EXPECT_EQ(ClassOf(kMaxSmallSize), kNumClasses - 1);
  // 1 KiB and a header (sqlite3's 1032-byte blocks) has a class of its own.
  EXPECT_EQ(Class(ClassOf(1032)).size, 1040u);
  EXPECT_EQ(Class(ClassOf(1041)).size, 1152u);
}

TEST(SizeClasses, SizesAreIncreasingMultiplesOfSixteen) {
  EXPECT_EQ(Class(0).size, 0u);
  for (int c = 1; c < kNumClasses; ++c) {
    EXPECT_EQ(Class(c).size % kMinAlign, 0u) << "class " << c;
    if (c > 1) {
      EXPECT_GT(Class(c).size, Class(c - 1).size) << "class " << c;
    }
  }
  EXPECT_EQ(Class(kNumClasses - 1).size, kMaxSmallSize);
}

TEST(SizeClasses, NoSizeAbove128WastesMoreThanTwentyPercent) {
  for (size_t s = 129; s <= kMaxSmallSize; ++s) {
    const uint32_t size = Class(ClassOf(s)).size;
    // (size - s) / size <= 1/5, in integers.
    ASSERT_LE(5 * (size - s), size) << "size " << s << " -> class size "
                                    << size;
  }
}

TEST(SizeClasses, DocumentedWasteBoundOfOneNinth) {
  // size_classes.h: "no size above 128 bytes wastes more than 1/9 of its
  // object".
  for (size_t s = 129; s <= kMaxSmallSize; ++s) {
    const uint32_t size = Class(ClassOf(s)).size;
    ASSERT_LE(9 * (size - s), size) << "size " << s << " -> class size "
                                    << size;
  }
}

TEST(SizeClasses, SpansAndTransferParameters) {
  for (int c = 1; c < kNumClasses; ++c) {
    SCOPED_TRACE(testing::Message() << "class " << c);
    const SizeClassInfo& k = Class(c);
    // A power of two in [64 KiB, 2 MiB].
    EXPECT_EQ(k.span_bytes & (k.span_bytes - 1), 0u);
    EXPECT_GE(k.span_bytes, 64u * 1024);
    EXPECT_LE(k.span_bytes, 2u * 1024 * 1024);
    const uint32_t objects = k.span_bytes / k.size;
    EXPECT_EQ(k.limit, objects * k.size);
    // At least 8 objects, and at most 1/32 of the span left over; above
    // 64 KiB at least 4 and at most 1/16.
    const bool big = k.size > 64 * 1024;
    EXPECT_GE(objects, big ? 4u : 8u);
    EXPECT_LE((big ? 16u : 32u) * (k.span_bytes - k.limit), k.span_bytes);
    // The object-start test's entry: magic = floor(2^64 / size) + 1,
    // e = size * magic - 2^64 in [1, size], bound = objects * e, and
    // bound < magic (what keeps a non-start offset above the bound).
    const cidmalloc::central::ObjectStartCheck s =
        cidmalloc::central::kObjectStarts.Check(c);
    const unsigned __int128 two64 = static_cast<unsigned __int128>(1) << 64;
    EXPECT_EQ(s.magic, static_cast<uint64_t>(two64 / k.size + 1));
    const uint64_t e = static_cast<uint64_t>(
        static_cast<unsigned __int128>(s.magic) * k.size - two64);
    EXPECT_GE(e, 1u);
    EXPECT_LE(e, k.size);
    EXPECT_EQ(s.bound, objects * e);
    EXPECT_LT(uint64_t{s.bound}, s.magic);
    EXPECT_EQ(s.span_mask, k.span_bytes - 1);
    EXPECT_GE(k.batch, 2u);
    EXPECT_LE(k.batch, 32u);
    EXPECT_GE(k.max_capacity, k.batch);
    EXPECT_GE(k.max_capacity, 8u);
  }
}

// free() sends a pointer with no span tag (class 0) to its slow path
// through the object-start test's failure branch: class 0 has no start.
TEST(SizeClasses, Class0HasNoObjectStart) {
  for (uintptr_t p : {uintptr_t{0}, uintptr_t{16}, uintptr_t{1} << 20,
                      uintptr_t{0x7f0000001000}, ~uintptr_t{15}}) {
    EXPECT_FALSE(IsObjectStart(p, 0)) << std::hex << p;
  }
}

TEST(SizeClasses, IsObjectStartAgreesWithModuloOverAWholeSpan) {
  for (int c = 1; c < kNumClasses; ++c) {
    const SizeClassInfo& k = Class(c);
    const uint32_t objects = k.span_bytes / k.size;
    // Spans are aligned to their size; put one at a high, odd multiple so
    // that the bits above the span mask are set.
    const uintptr_t base = (uintptr_t{0x7f12345} * 2 + 1) * k.span_bytes;
    for (uintptr_t off = 0; off < k.span_bytes; ++off) {
      const bool expected = off % k.size == 0 && off / k.size < objects;
      if (IsObjectStart(base + off, c) != expected) {
        FAIL() << "class " << c << " (size " << k.size << ") offset " << off
               << ": IsObjectStart says " << !expected;
      }
    }
    // The first offset of the next span is an object start again.
    EXPECT_TRUE(IsObjectStart(base + k.span_bytes, c)) << "class " << c;
  }
}

}  // namespace
