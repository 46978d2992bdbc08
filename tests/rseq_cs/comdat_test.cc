// tests/rseq_cs/comdat_test.cc: the out-of-line copies of comdat_a.cc and
// comdat_b.cc were folded into one; section_test.cc, linked into the same
// binary, then checks every descriptor, including those of the copies.
#include <gtest/gtest.h>

#include "tests/rseq_cs/comdat_ops.h"

namespace {

TEST(RseqCsComdat, OneCopyOfEachInlineOperation) {
  const InlineOps a = InlineOpsA(), b = InlineOpsB();
  EXPECT_EQ(a.counter_add, b.counter_add);
  EXPECT_EQ(a.pop, b.pop);
  EXPECT_EQ(a.push, b.push);
  EXPECT_EQ(a.pop_batch, b.pop_batch);
  EXPECT_EQ(a.push_batch, b.push_batch);
  EXPECT_EQ(a.get_cpu, b.get_cpu);
}

}  // namespace
