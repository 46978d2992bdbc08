// tests/rseq_cs/section_ops_test.cc: the critical sections run, through
// the probes and through rseq/rseq.h's public operations, on per-ID data
// (part of the section_test and section_comdat_test binaries; see
// section_test.cc).
#include <gtest/gtest.h>
#include <stdint.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "rseq/rseq.h"
#include "tests/rseq_cs/section_test.h"

namespace {

using ::cidmalloc::rseq::Stack;

// The sections are real code: run them, through the probes and through the
// public operations of rseq/rseq.h, on per-ID data.  The thread may change
// ID between two operations, so only totals are checked.  Every push takes
// a fresh item: a stack links through its items, and an item may still be
// on another ID's stack.
class RseqCsOps : public ::testing::Test {
 protected:
  static constexpr uint32_t kCapacity = 64;
  struct alignas(64) Counter {
    int64_t v;
  };

  void SetUp() override {
    ids_ = ::cidmalloc::rseq::NumIds();
    const size_t words = sizeof(Stack) / sizeof(uint64_t);
    regions_.resize(ids_);
    table_.resize(ids_);
    for (uint32_t i = 0; i < ids_; ++i) {
      regions_[i].reset(new uint64_t[words]());
      Stack* st = reinterpret_cast<Stack*>(regions_[i].get());
      st->capacity = kCapacity;
      table_[i] = st;
    }
    counters_.resize(ids_);
  }

  uint64_t StackedItems() const {
    uint64_t n = 0;
    for (void* t : table_) n += static_cast<Stack*>(t)->Count();
    return n;
  }
  int64_t CounterSum() const {
    int64_t sum = 0;
    for (const Counter& c : counters_) sum += c.v;
    return sum;
  }
  uintptr_t CounterBase() const {
    return reinterpret_cast<uintptr_t>(counters_.data());
  }

  uint32_t ids_ = 0;
  std::vector<std::unique_ptr<uint64_t[]>> regions_;
  std::vector<void*> table_;
  std::vector<Counter> counters_;
  void* Item() {
    EXPECT_LT(next_item_, kItems);
    return &items_[next_item_++];
  }
  static constexpr int kItems = 64;
  uint64_t items_[kItems] = {};
  int next_item_ = 0;
};

TEST_F(RseqCsOps, Probes) {
  namespace r = ::cidmalloc::rseq;
  // The sections arm rseq_cs in the rseq area: only where there is one.
  if (r::CurrentMode() == r::Mode::kNone) GTEST_SKIP() << "no rseq";
  void* const* t = table_.data();
  // The wide sections index a table of kWideTableIds entries: the same
  // regions, null beyond them.
  std::vector<void*> wide(r::kWideTableIds, nullptr);
  std::copy(table_.begin(), table_.end(), wide.begin());
  int64_t stored = 0, taken = 0, added = 0;
  for (int round = 0; round < 3; ++round) {
    // Raw-ID modes only: with node-qualified IDs they fail (the allocator
    // does not run them there).
    for (int i = 0; i < 2; ++i) {
      stored += probes::PushWide(wide.data(), 0, Item());
    }
    void* w = nullptr;
    taken += probes::PopWide(wide.data(), 0, &w);
    // The mm_cid sections: cid mode only (in cpu mode mm_cid is no ID).
    if (r::RawIdIsMmCid()) {
      for (int i = 0; i < 2; ++i) {
        stored += probes::PushMmCid(wide.data(), 0, Item());
      }
      taken += probes::PopMmCid(wide.data(), 0, &w);
    }
    for (int i = 0; i < 4; ++i) stored += probes::Push(t, 0, Item());
    void* in[4] = {Item(), Item(), Item(), Item()};
    stored += probes::PushBatch(t, 0, in, 4);
    void* item = nullptr;
    taken += probes::Pop(t, 0, &item);
    void* out[8] = {};
    taken += probes::PopBatch(t, 0, out, 8);
    // want == 0 fails in the section itself (the rseq.h wrappers return
    // before it), on a stack that is not empty: nothing popped or pushed.
    stored += probes::Push(t, 0, Item());
    EXPECT_EQ(probes::PopBatch(t, 0, out, 0), 0u);
    void* none[1] = {Item()};
    EXPECT_EQ(probes::PushBatch(t, 0, none, 0), 0u);
    taken += probes::Pop(t, 0, &item);
    for (int i = 0; i < 100; ++i)
      added += probes::CounterAdd(CounterBase(), 3) ? 3 : 0;
  }
  EXPECT_GT(stored, 0);
  EXPECT_EQ(StackedItems(), static_cast<uint64_t>(stored - taken));
  EXPECT_GT(added, 0);
  EXPECT_EQ(CounterSum(), added);
  if (r::Process().has_node_id) {
    int32_t cpu = -1, node = -1;
    probes::CpuNode(&cpu, &node);
    EXPECT_GE(cpu, 0);
    EXPECT_GE(node, 0);
  }
}

// The node-qualified sections of the allocator's inline paths: with
// node-qualified IDs (section_qualified_test) they push only with the
// node the thread runs on; with raw IDs they always fail, and store
// nothing (num_nodes is 0).
TEST_F(RseqCsOps, QualifiedOnceProbes) {
  namespace r = ::cidmalloc::rseq;
  if (r::CurrentMode() == r::Mode::kNone) GTEST_SKIP() << "no rseq";
  void* const* t = table_.data();
  const bool qualified = r::CurrentIdKind() == r::IdKind::kNodeQualified;
  int64_t stored = 0, taken = 0, wrong_node = 0;
  for (int round = 0; round < 25; ++round) {  // 50 of the kItems items
    int32_t cpu = -1, node = -1;
    probes::CpuNode(&cpu, &node);
    // The thread may move to another node between the two calls: only
    // totals are checked, and a push with the current node fails then.
    stored += probes::PushQualifiedOnce(t, 0, Item(), node);
    wrong_node += probes::PushQualifiedOnce(t, 0, Item(), node + 1);
    void* item = nullptr;
    taken += probes::PopQualifiedOnce(t, 0, &item);
    if (round % 2 == 0) {
      void* more = nullptr;
      taken += probes::PopQualifiedOnce(t, 0, &more);
    }
  }
  if (qualified) {
    EXPECT_GT(stored, 20);
    EXPECT_GT(taken, 20);
  } else {
    EXPECT_EQ(stored, 0);
    EXPECT_EQ(taken, 0);
  }
  // node + 1 is no node the thread runs on; with several nodes, unless it
  // moved there between the two calls.
  if (r::Process().num_nodes <= 1) {
    EXPECT_EQ(wrong_node, 0);
  } else {
    EXPECT_LE(wrong_node, 2);
  }
  EXPECT_EQ(StackedItems(),
            static_cast<uint64_t>(stored + wrong_node - taken));
}

TEST_F(RseqCsOps, PublicOperations) {
  namespace r = ::cidmalloc::rseq;
  void* const* t = table_.data();
  int64_t stored = 0, taken = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) stored += r::Push(t, 0, Item());
    void* in[4] = {Item(), Item(), Item(), Item()};
    stored += r::PushBatch(t, 0, in, 4);
    taken += r::Pop(t, 0) != nullptr;
    void* out[8] = {};
    taken += r::PopBatch(t, 0, out, 8);
    for (int i = 0; i < 100; ++i) r::CounterAdd(CounterBase(), 3);
  }
  EXPECT_EQ(stored, 3 * 8);  // never full, and every ID has a region
  EXPECT_EQ(StackedItems(), static_cast<uint64_t>(stored - taken));
  EXPECT_EQ(CounterSum(), 3 * 100 * 3);
  unsigned cpu = ~0u, node = ~0u;
  ASSERT_EQ(r::GetCpu(&cpu, &node), 0);
  EXPECT_LT(cpu, r::Process().possible_cpus);
}

}  // namespace
