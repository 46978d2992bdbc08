// tests/allocator/release_decay_test.cc: the release delay's bookkeeping
// (allocator/page_heap/release_decay.h), with explicit times.
//
// A delay of 800 ms makes epochs of 100 ms.  "Idle" is the count of
// committed free pages that have stayed free through the last delay; the
// page heap releases only those.
#include "allocator/page_heap/release_decay.h"

#include "gtest/gtest.h"

namespace {

using cidmalloc::page_heap::ReleaseDecay;

constexpr uint32_t kDelay = 800;
constexpr uint64_t kEpoch = kDelay / ReleaseDecay::kEpochs;  // 100 ms
constexpr uint64_t kStart = 1000000;  // An arbitrary clock reading.

// Calls Idle once an epoch for two delays from kStart, with `count` pages
// free throughout; returns the time of the last call.
uint64_t Settle(ReleaseDecay* d, size_t count) {
  uint64_t t = kStart;
  for (; t + kEpoch <= kStart + 2 * kDelay; t += kEpoch) {
    d->Idle(t, kDelay, count);
  }
  d->Idle(t, kDelay, count);
  return t;
}

// Calls Idle once an epoch from `t` for a delay less an epoch, with `count`
// pages free, and expects exactly `idle` of them idle each time; returns
// the time after the last call.
uint64_t ExpectIdleForADelay(ReleaseDecay* d, uint64_t t, size_t count,
                             size_t idle) {
  for (const uint64_t end = t + kDelay - kEpoch; t <= end; t += kEpoch) {
    EXPECT_EQ(d->Idle(t, kDelay, count), idle) << "at +" << t - kStart;
  }
  return t;
}

TEST(ReleaseDecay, NothingIsIdleUntilAWholeDelayHasBeenSeen) {
  ReleaseDecay d;
  EXPECT_EQ(d.Idle(kStart, kDelay, 500), 0u);
  EXPECT_EQ(d.Idle(kStart + kDelay / 2, kDelay, 500), 0u);
  EXPECT_EQ(d.Idle(kStart + kDelay - kEpoch, kDelay, 500), 0u);
  // Every epoch since the first call has seen 500 free pages.
  EXPECT_EQ(d.Idle(kStart + kDelay + kEpoch, kDelay, 500), 500u);
}

TEST(ReleaseDecay, PagesFreedRecentlyAreNotIdle) {
  ReleaseDecay d;
  // Stays at 100 for two delays: all 100 idle.
  uint64_t t = Settle(&d, 100);
  EXPECT_EQ(d.Idle(t, kDelay, 100), 100u);
  // 400 more are freed: only the old 100 are idle, for a whole delay.
  t = ExpectIdleForADelay(&d, t, 500, 100);
  // Soon after a whole delay, all 500 are.
  t += 2 * kEpoch;
  EXPECT_EQ(d.Idle(t, kDelay, 500), 500u);
}

TEST(ReleaseDecay, PagesTakenWithinTheDelayAreNotIdle) {
  ReleaseDecay d;
  uint64_t t = Settle(&d, 600);
  ASSERT_EQ(d.Idle(t, kDelay, 600), 600u);
  // Most of them are taken (Note, from the allocation path, with no clock)
  // and freed again before the next Idle call, in the same epoch: the
  // count is back at 600, but only 50 stayed free throughout.
  d.Note(50);
  EXPECT_EQ(d.Idle(t + 1, kDelay, 600), 50u);
  // The same dip seen only at the next call, several epochs later, is
  // charged to every epoch in between: still 20 for a whole delay after it.
  t += 3 * kEpoch;
  d.Note(20);
  EXPECT_EQ(d.Idle(t, kDelay, 600), 20u);
  t = ExpectIdleForADelay(&d, t, 600, 20);
  t += 2 * kEpoch;
  EXPECT_EQ(d.Idle(t, kDelay, 600), 600u);
}

TEST(ReleaseDecay, ReleasedPagesLeaveEveryEpoch) {
  ReleaseDecay d;
  uint64_t t = Settle(&d, 1000) + kEpoch;
  ASSERT_EQ(d.Idle(t, kDelay, 1000), 1000u);
  // The page heap releases 900 of them: 100 committed free pages are left,
  // and they are all that can be idle now.
  d.Released(900);
  EXPECT_EQ(d.Idle(t, kDelay, 100), 100u);
  // Releasing more than an epoch saw (malloc_trim) floors at 0.
  d.Released(5000);
  EXPECT_EQ(d.Idle(t + 1, kDelay, 0), 0u);
  // 300 freed afterwards become idle a delay later, not at once.
  t += kEpoch;
  EXPECT_EQ(d.Idle(t, kDelay, 300), 0u);
  t += kDelay + kEpoch;
  EXPECT_EQ(d.Idle(t, kDelay, 300), 300u);
}

TEST(ReleaseDecay, NeverMoreThanTheCountNow) {
  ReleaseDecay d;
  const uint64_t t = Settle(&d, 700);
  // Pages taken and the count seen lower by Idle itself.
  EXPECT_EQ(d.Idle(t + 1, kDelay, 300), 300u);
}

TEST(ReleaseDecay, ALongGapRefillsEveryEpoch) {
  ReleaseDecay d;
  d.Idle(kStart, kDelay, 10);
  // No call for an hour, then 10 free: they were free all along (the count
  // only rises on frees, which would have called Idle).
  EXPECT_EQ(d.Idle(kStart + 3600 * 1000, kDelay, 10), 10u);
}

TEST(ReleaseDecay, TinyDelaysUseOneMillisecondEpochs) {
  ReleaseDecay d;
  d.Idle(kStart, 3, 40);
  EXPECT_EQ(d.Idle(kStart + 1, 3, 40), 0u);
  EXPECT_EQ(d.Idle(kStart + ReleaseDecay::kEpochs, 3, 40), 40u);
}

}  // namespace
