// tests/rseq/detection_ops_test.cc: the semantics of the per-ID
// operations on one ID (part of the detection_*_test binaries; see
// detection_test.cc).

#include "tests/rseq/detection.h"

namespace {

using namespace cidmalloc_detection;  // NOLINT

// ---- Operation semantics on one ID -----------------------------------------------

// Runs `body(id)` until it ran without the calling thread changing its ID
// or being switched out, then returns its verdict ("" = pass).  `reset`
// restores the data before each attempt.
template <typename Reset, typename Body>
std::string OnStableId(Reset reset, Body body) {
  ScopedAffinity restore;
  const std::vector<int> cpus = AllowedCpus();
  PinToCpu(cpus.back());
  for (int attempt = 0; attempt < 200; ++attempt) {
    reset();
    const long sw0 = ThreadSwitches();
    const uint32_t id0 = rs::CurrentId();
    std::string verdict = body(id0);
    const uint32_t id1 = rs::CurrentId();
    if (ThreadSwitches() == sw0 && id0 == id1) return verdict;
  }
  return "SKIP";
}

TEST(Ops, StackLayoutIsAsDocumented) {
  EXPECT_EQ(sizeof(rs::Stack), 16u);
  alignas(16) rs::Stack s;
  memset(&s, 0, sizeof s);
  s.capacity = 3;
  // The u64 at the limit's offset is capacity << 48 (a push compares it
  // with the top word).
  uint64_t limit;
  memcpy(&limit, reinterpret_cast<char*>(&s) + CIDMALLOC_STACK_OFF_LIMIT,
         sizeof limit);
  EXPECT_EQ(limit, uint64_t{3} << 48);
  void* a = ItemFor(1);
  void* b = ItemFor(2);
  void* c = ItemFor(3);
  void* d = ItemFor(4);
  for (void* p : {a, b, c, d}) static_cast<uint64_t*>(p)[1] = 0x5eed;
  EXPECT_EQ(s.Count(), 0u);
  ASSERT_TRUE(s.PushHeld(a));
  ASSERT_TRUE(s.PushHeld(b));
  // top = item | count << 48; each item's first word links to the top word
  // below it; the bottom one to 0.
  EXPECT_EQ(s.top, rs::Stack::TopWord(b, 2));
  EXPECT_EQ(s.top, reinterpret_cast<uint64_t>(b) | uint64_t{2} << 48);
  EXPECT_EQ(rs::Stack::Link(b), rs::Stack::TopWord(a, 1));
  EXPECT_EQ(rs::Stack::Link(a), 0u);
  EXPECT_EQ(s.Count(), 2u);
  ASSERT_TRUE(s.PushHeld(c));
  static_cast<uint64_t*>(d)[0] = 0xd0d0;
  EXPECT_FALSE(s.PushHeld(d)) << "a push beyond the capacity";
  EXPECT_EQ(static_cast<uint64_t*>(d)[0], 0xd0d0u)
      << "a failed push wrote the item";
  std::vector<void*> seen;
  s.ForEachHeld([&](void* p) { seen.push_back(p); });
  EXPECT_EQ(seen, (std::vector<void*>{c, b, a}));
  void* got = nullptr;
  for (void* want : {c, b, a}) {
    ASSERT_TRUE(s.PopHeld(&got));
    EXPECT_EQ(got, want);
  }
  EXPECT_FALSE(s.PopHeld(&got));
  EXPECT_EQ(s.top, 0u);
  // Only the first word of an item is the stack's.
  for (void* p : {a, b, c, d}) {
    EXPECT_EQ(static_cast<uint64_t*>(p)[1], 0x5eedu);
  }
}

TEST(Ops, AbsentRegionsFailEveryOperation) {
  StackTable stacks(8);
  stacks.UnpublishAll();
  void* out[4] = {};
  void* in[2] = {ItemFor(1), ItemFor(2)};
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(rs::Pop(stacks.table(), stacks.offset()), nullptr);
    EXPECT_FALSE(rs::Push(stacks.table(), stacks.offset(), ItemFor(1)));
    EXPECT_EQ(rs::PopBatch(stacks.table(), stacks.offset(), out, 4), 0u);
    EXPECT_EQ(rs::PushBatch(stacks.table(), stacks.offset(), in, 2), 0u);
  }
  EXPECT_TRUE(stacks.NonEmptyIds().empty());
  EXPECT_EQ(stacks.CheckLayout(), "");
}

TEST(Ops, PushPopAreLifoAndBoundedOnTheCurrentId) {
  constexpr uint32_t kCap = 8;
  StackTable stacks(kCap);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  const std::string verdict = OnStableId(
      [&] { stacks.Clear(); },
      [&](uint32_t id) -> std::string {
        for (uint32_t i = 1; i <= kCap; ++i) {
          if (!rs::Push(table, off, ItemFor(i))) {
            return "push " + std::to_string(i) + " failed";
          }
        }
        if (rs::Push(table, off, ItemFor(99))) return "push beyond capacity";
        void* extra[2] = {ItemFor(98), ItemFor(97)};
        if (rs::PushBatch(table, off, extra, 2) != 0) {
          return "batch push beyond capacity";
        }
        std::vector<void*> want;
        for (uint32_t i = 1; i <= kCap; ++i) want.push_back(ItemFor(i));
        if (stacks.Items(id) != want) return "stack contents after pushes";
        if (stacks.NonEmptyIds() != std::vector<uint32_t>{id}) {
          return "items landed on another ID than CurrentId()";
        }
        if (rs::Pop(table, off) != ItemFor(kCap)) return "pop: not the top";
        void* out[8] = {};
        if (rs::PopBatch(table, off, out, 3) != 3) return "batch pop count";
        if (out[0] != ItemFor(kCap - 1) || out[1] != ItemFor(kCap - 2) ||
            out[2] != ItemFor(kCap - 3)) {
          return "batch pop: not top first";
        }
        if (rs::PopBatch(table, off, out, 0) != 0) return "want 0 popped";
        // 4 left; room for 4 of these 5.
        void* in[5] = {ItemFor(11), ItemFor(12), ItemFor(13), ItemFor(14),
                       ItemFor(15)};
        if (rs::PushBatch(table, off, in, 0) != 0) return "want 0 pushed";
        if (rs::PushBatch(table, off, in, 5) != 4) return "partial batch push";
        want = {ItemFor(1),  ItemFor(2),  ItemFor(3),  ItemFor(4),
                ItemFor(11), ItemFor(12), ItemFor(13), ItemFor(14)};
        if (stacks.Items(id) != want) return "contents after batch push";
        // Popping more than there is returns what there is.
        if (rs::PopBatch(table, off, out, 8) != 8) return "pop all count";
        if (out[0] != ItemFor(14) || out[7] != ItemFor(1)) {
          return "pop all order";
        }
        if (rs::Pop(table, off) != nullptr) return "pop on empty";
        if (rs::PopBatch(table, off, out, 3) != 0) return "batch pop on empty";
        if (stacks.stack(id)->Count() != 0) return "count not 0 at the end";
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  EXPECT_EQ(stacks.CheckLayout(), "");
}

TEST(Ops, CounterAddUpdatesTheCurrentIdsLine) {
  Counters counters;
  const std::string verdict = OnStableId(
      [&] { counters.Clear(); },
      [&](uint32_t id) -> std::string {
        rs::CounterAdd(counters.base(), 5);
        rs::CounterAdd(counters.base(), -2);
        rs::CounterAdd(counters.base(), int64_t{1} << 40);
        if (counters.Get(id) != 3 + (int64_t{1} << 40)) {
          return "counter(" + std::to_string(id) + ") = " +
                 std::to_string(counters.Get(id));
        }
        if (counters.NonZeroIds() != std::vector<uint32_t>{id}) {
          return "another ID's counter changed";
        }
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  EXPECT_EQ(counters.CheckCanaries(), "");
}

TEST(Ops, TryPopTryPushAreTheCriticalSectionsAlone) {
  StackTable stacks(8);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  if (rs::CurrentIdKind() != rs::IdKind::kRaw) {
    // They are the raw-ID sections: in none mode and with node-qualified
    // IDs they always fail, touching nothing.
    for (int i = 0; i < 10; ++i) {
      EXPECT_FALSE(rs::TryPush(table, off, ItemFor(1)));
    }
    ASSERT_TRUE(rs::Push(table, off, ItemFor(1)));  // The soft path works.
    EXPECT_EQ(rs::TryPop(table, off), nullptr);
    std::vector<void*> all;
    stacks.CollectAll(&all);
    EXPECT_EQ(all, std::vector<void*>{ItemFor(1)});
    return;
  }
  // rseq modes: on a thread whose area is registered they are Push and Pop.
  ASSERT_TRUE(rs::Push(table, off, ItemFor(50)));  // Settles the thread.
  const std::string verdict = OnStableId(
      [&] { stacks.Clear(); },
      [&](uint32_t id) -> std::string {
        for (uint32_t i = 1; i <= 8; ++i) {
          if (!rs::TryPush(table, off, ItemFor(i))) return "TryPush failed";
        }
        if (rs::TryPush(table, off, ItemFor(9))) return "TryPush when full";
        if (stacks.Items(id).size() != 8) return "items not on CurrentId()";
        for (uint32_t i = 8; i >= 1; --i) {
          if (rs::TryPop(table, off) != ItemFor(i)) return "TryPop order";
        }
        if (rs::TryPop(table, off) != nullptr) return "TryPop when empty";
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  // Absent regions.
  stacks.UnpublishAll();
  EXPECT_FALSE(rs::TryPush(table, off, ItemFor(1)));
  EXPECT_EQ(rs::TryPop(table, off), nullptr);
}

TEST(Ops, TryPushOnAFreshThreadNeedsARegisteredArea) {
  StackTable stacks(8);
  const Expectation& e = Expected();
  bool first_try = true, slow = false;
  void* back = nullptr;
  std::thread t([&] {
    // Nothing of the library has run on this thread yet.
    first_try = rs::TryPush(stacks.table(), stacks.offset(), ItemFor(1));
    if (!first_try) {
      slow = rs::Push(stacks.table(), stacks.offset(), ItemFor(1));
    }
    back = rs::Pop(stacks.table(), stacks.offset());
  });
  t.join();
  if (e.mode == kModeNone || e.node_qualified) {
    EXPECT_FALSE(first_try) << "TryPush is the raw-ID section";
  } else if (e.registration == kRegGlibc) {
    EXPECT_TRUE(first_try) << "glibc registered the thread at creation";
  } else if (e.registration == kRegOwn) {
    EXPECT_FALSE(first_try)
        << "the library's own area cannot be registered before its first use";
  }
  EXPECT_TRUE(first_try || slow) << "Push must succeed where TryPush did not";
  EXPECT_EQ(back, ItemFor(1));
}

// The allocator's inline sections read the ID's low 16 bits and index a
// table of kWideTableIds entries with no bound check.  A thread whose area
// is not registered yet reads 0xffff (cpu_id -1, our own area's mm_cid ~0)
// and must find that entry null: the push fails, touching nothing.
TEST(Ops, PushUncheckedOnAFreshThreadFindsANullEntry) {
  if (rs::CurrentIdKind() != rs::IdKind::kRaw) {
    GTEST_SKIP() << "PushUnchecked<kRaw> runs only with raw rseq IDs";
  }
  EXPECT_TRUE(rs::RawIdsBelowNumRseqIds());
  StackTable stacks(8);
  const Expectation& e = Expected();
  bool first_try = true, slow = false;
  void* back = nullptr;
  std::thread t([&] {
    first_try = rs::PushUnchecked(stacks.table(), stacks.offset(), ItemFor(1));
    if (!first_try) {
      slow = rs::Push(stacks.table(), stacks.offset(), ItemFor(1));
    }
    if (!rs::PopUnchecked(stacks.table(), stacks.offset(), &back)) {
      back = rs::Pop(stacks.table(), stacks.offset());
    }
  });
  t.join();
  if (e.registration == kRegGlibc) {
    EXPECT_TRUE(first_try) << "glibc registered the thread at creation";
  } else if (e.registration == kRegOwn) {
    EXPECT_FALSE(first_try) << "an unregistered area reads 0xffff: null entry";
  }
  EXPECT_TRUE(first_try || slow);
  EXPECT_EQ(back, ItemFor(1));
  std::vector<void*> all;
  stacks.CollectAll(&all);
  EXPECT_TRUE(all.empty());
  EXPECT_EQ(stacks.CheckLayout(), "");
}

TEST(Ops, NodeQualifiedPushesInsistOnTheNode) {
  if (rs::CurrentIdKind() != rs::IdKind::kNodeQualified) {
    GTEST_SKIP() << "IDs are not node-qualified in this variant";
  }
  StackTable stacks(8);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  ASSERT_TRUE(rs::Push(table, off, ItemFor(50)));  // Settles the thread.
  const std::string verdict = OnStableId(
      [&] { stacks.Clear(); },
      [&](uint32_t id) -> std::string {
        const int node = rs::NodeOfId(id);
        if (node != rs::CurrentNode()) return "NodeOfId is not the thread's node";
        if (rs::Push(table, off, ItemFor(1), node + 1)) {
          return "pushed while not on the requested node";
        }
        if (rs::PushBatch(table, off, std::vector<void*>{ItemFor(2)}.data(), 1,
                          node + 1) != 0) {
          return "batch-pushed while not on the requested node";
        }
        if (!stacks.Items(id).empty()) return "a refused push stored an item";
        if (!rs::Push(table, off, ItemFor(3), node)) return "Push on the node";
        if (!rs::Push(table, off, ItemFor(4))) return "Push with kAnyNode";
        if (stacks.Items(id).size() != 2) return "items not on CurrentId()";
        if (rs::Pop(table, off) != ItemFor(4)) return "Pop order";
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
}

TEST(Ops, AdjustCapacityClampsAndBoundsPushes) {
  constexpr uint32_t kSlots = 16;
  StackTable stacks(kSlots);
  void* const* table = stacks.table();
  const uintptr_t off = stacks.offset();
  auto reset = [&] {
    stacks.Clear();
    for (uint32_t id = 0; id < stacks.ids(); ++id) {
      stacks.stack(id)->capacity = 8;
    }
  };
  const std::string verdict =
      OnStableId(reset, [&](uint32_t id) -> std::string {
        rs::Stack* s = stacks.stack(id);
        if (rs::AdjustCapacity(table, off, 4, kSlots) != 12) return "8 + 4";
        if (s->capacity != 12) return "capacity not stored";
        if (rs::AdjustCapacity(table, off, 100, kSlots) != kSlots) {
          return "not clamped to the limit";
        }
        if (rs::AdjustCapacity(table, off, -100, kSlots) != 0) {
          return "not clamped to 0";
        }
        if (rs::Push(table, off, ItemFor(1))) return "push with capacity 0";
        if (rs::AdjustCapacity(table, off, 10, kSlots) != 10) return "0 + 10";
        for (uint32_t i = 1; i <= 10; ++i) {
          if (!rs::Push(table, off, ItemFor(i))) return "push under capacity";
        }
        // Shrinking below count: pushes fail until pops bring count under.
        if (rs::AdjustCapacity(table, off, -4, kSlots) != 6) return "10 - 4";
        if (s->Count() != 10) return "shrinking changed count";
        if (rs::Push(table, off, ItemFor(11))) return "push above capacity";
        void* two[2] = {ItemFor(11), ItemFor(12)};
        if (rs::PushBatch(table, off, two, 2) != 0) {
          return "batch push above capacity";
        }
        for (uint32_t i = 10; i > 5; --i) {
          if (rs::Pop(table, off) != ItemFor(i)) return "pop after shrink";
        }
        if (!rs::Push(table, off, ItemFor(6))) return "push under capacity";
        if (rs::Push(table, off, ItemFor(7))) return "push at capacity";
        // A limit below the current capacity clamps even a growth.
        if (rs::AdjustCapacity(table, off, 1, 3) != 3) return "limit 3";
        for (uint32_t other = 0; other < stacks.ids(); ++other) {
          if (other != id && stacks.stack(other)->capacity != 8) {
            return "another ID's capacity changed";
          }
        }
        return "";
      });
  if (verdict == "SKIP") GTEST_SKIP() << "never ran without a context switch";
  EXPECT_EQ(verdict, "");
  EXPECT_EQ(stacks.CheckLayout(true), "");
  stacks.UnpublishAll();
  EXPECT_EQ(rs::AdjustCapacity(table, off, 1, kSlots), -1);
}

}  // namespace
