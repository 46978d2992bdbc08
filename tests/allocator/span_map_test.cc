// tests/allocator/span_map_test.cc: the page heap's span map
// (allocator/page_heap/pagemap.h), on its own.
//
// The span map never touches the addresses it describes, so the test uses
// made-up chunk addresses far from anything mapped.  The first leaf created
// becomes the primary leaf, found without the root; leaves of other 16 GiB
// regions are found through the root.  Both must give the same answers.
// This binary is not linked with cidmalloc, so nothing else creates a leaf
// first.
#include <stdint.h>

#include "allocator/page_heap/pagemap.h"
#include "gtest/gtest.h"

namespace {

using cidmalloc::page_heap::EnsureSpanTagLeaf;
using cidmalloc::page_heap::g_span_tag_hint;
using cidmalloc::page_heap::kSpanLeafShift;
using cidmalloc::page_heap::LookupSpanTag;
using cidmalloc::page_heap::SetSpanTags;

constexpr uintptr_t kKiB = 1024;
constexpr uintptr_t kRegion = uintptr_t{1} << kSpanLeafShift;  // 16 GiB
// 2 MiB-aligned chunk bases in three different regions.
constexpr uintptr_t kPrimary = uintptr_t{0x500000000000};
constexpr uintptr_t kOther = kPrimary + 3 * kRegion;
constexpr uintptr_t kNeighbour = kPrimary - 2 * 1024 * kKiB;  // Region below.

// Tags `bytes` at `start` and checks every 64 KiB slot of [start - 64 KiB,
// start + bytes + 64 KiB): the tag inside, 0 outside.
void CheckSpan(uintptr_t start, uintptr_t bytes, uint32_t tag) {
  SetSpanTags(start, bytes, tag);
  for (uintptr_t a = start - 64 * kKiB; a < start + bytes + 64 * kKiB;
       a += 16 * kKiB) {
    const bool inside = a >= start && a < start + bytes;
    ASSERT_EQ(LookupSpanTag(a), inside ? tag : 0u) << std::hex << a;
    ASSERT_EQ(LookupSpanTag(a + 16 * kKiB - 1), inside ? tag : 0u)
        << std::hex << a;
  }
  SetSpanTags(start, bytes, 0);
  EXPECT_EQ(LookupSpanTag(start), 0u);
}

TEST(SpanMap, PrimaryAndRootLeavesAgree) {
  ASSERT_EQ(g_span_tag_hint.neg_base.load(), uintptr_t{1} << 63)
      << "a leaf exists already";
  EXPECT_EQ(LookupSpanTag(kPrimary), 0u) << "no leaf yet";
  // The placeholder window (2^63 up) answers 0 too.
  EXPECT_EQ(LookupSpanTag(uintptr_t{1} << 63), 0u);
  EXPECT_EQ(LookupSpanTag((uintptr_t{1} << 63) + kRegion - 1), 0u);
  EXPECT_EQ(LookupSpanTag(0), 0u);
  ASSERT_TRUE(EnsureSpanTagLeaf(kPrimary));
  EXPECT_EQ(0 - g_span_tag_hint.neg_base.load(), kPrimary & ~(kRegion - 1));
  ASSERT_TRUE(EnsureSpanTagLeaf(kPrimary + 64 * 1024 * kKiB));  // Same leaf.
  EXPECT_EQ(0 - g_span_tag_hint.neg_base.load(), kPrimary & ~(kRegion - 1));

  // The primary leaf, without the root.
  CheckSpan(kPrimary + 64 * kKiB, 128 * kKiB, 0x1234);
  CheckSpan(kPrimary, 2 * 1024 * kKiB, 0xabcdef01u);

  // Another region: nothing until its leaf exists, then the root's leaf.
  EXPECT_EQ(LookupSpanTag(kOther + 64 * kKiB), 0u);
  ASSERT_TRUE(EnsureSpanTagLeaf(kOther));
  EXPECT_EQ(0 - g_span_tag_hint.neg_base.load(), kPrimary & ~(kRegion - 1))
      << "the primary leaf never changes";
  CheckSpan(kOther + 192 * kKiB, 64 * kKiB, 7);

  // The last chunk of the region below the primary one (through the root)
  // and the first slot of the primary region (without it), side by side.
  ASSERT_TRUE(EnsureSpanTagLeaf(kNeighbour));
  CheckSpan(kNeighbour + 1024 * kKiB, 1024 * kKiB, 11);
  SetSpanTags(kNeighbour + 1024 * kKiB, 1024 * kKiB, 11);
  SetSpanTags(kPrimary, 64 * kKiB, 9);
  EXPECT_EQ(LookupSpanTag(kPrimary - 1), 11u);
  EXPECT_EQ(LookupSpanTag(kPrimary), 9u);
  SetSpanTags(kPrimary, 64 * kKiB, 0);
  SetSpanTags(kNeighbour + 1024 * kKiB, 1024 * kKiB, 0);
  EXPECT_EQ(LookupSpanTag(kPrimary - 1), 0u);
}

TEST(SpanMap, AddressesOutsideTheMapHaveNoTag) {
  EXPECT_EQ(LookupSpanTag(0), 0u);
  EXPECT_EQ(LookupSpanTag(4096), 0u);
  EXPECT_EQ(LookupSpanTag(uintptr_t{1} << 47), 0u);
  EXPECT_EQ(LookupSpanTag(~uintptr_t{0}), 0u);
  EXPECT_EQ(LookupSpanTag(kPrimary | (uintptr_t{1} << 63)), 0u)
      << "a high bit must not alias the primary region";
}

}  // namespace
