// tests/allocator/transfer_cache_test.cc: the central lists' transfer cache
// (allocator/central/central_list.cc), driven through RemoveBatch and
// InsertBatch in a process that runs on cidmalloc.
//
// Whole batches flushed by one ID's cache wait there, as pointers, for the
// next refill, and the objects are not touched on the way; past four
// batches they go back to their spans (a bit each in the span's bitmap,
// still untouched), where a second return of one is a double free;
// malloc_trim empties it so that empty spans can go back to the page heap.
// The class used (objects of 20000 bytes) is one nothing else here uses.
// Objects of an idle cache go to their spans instead, and a list nobody
// refilled from for an interval lets its spans go (ReleaseIdleLists).
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include <vector>

#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "gtest/gtest.h"

namespace {

namespace c = ::cidmalloc::central;

uintptr_t& Word0(void* p) { return *static_cast<uintptr_t*>(p); }

TEST(TransferCache, KeepsWholeBatchesUntouchedAndTrimEmptiesIt) {
  free(malloc(16));  // Initialises the allocator.
  const int cls = c::ClassOf(20000);
  const uint32_t batch = c::Class(cls).batch;
  const uint32_t limit = 4 * batch;  // kTransferBatches batches.

  std::vector<void*> objs(limit + batch);
  ASSERT_EQ(c::RemoveBatch(0, cls, objs.data(), limit + batch), limit + batch);
  for (uint32_t i = 0; i < objs.size(); ++i) Word0(objs[i]) = 0x5eed0000 + i;
  c::ClassStats before;
  c::GetClassStats(0, cls, &before);

  // Four batches fit, and their objects are not written.
  for (uint32_t b = 0; b < 4; ++b) c::InsertBatch(cls, &objs[b * batch], batch);
  for (uint32_t i = 0; i < limit; ++i) {
    EXPECT_EQ(Word0(objs[i]), 0x5eed0000 + i) << "object " << i << " touched";
  }
  c::ClassStats mid;
  c::GetClassStats(0, cls, &mid);
  EXPECT_EQ(mid.free_objects, before.free_objects + limit);
  EXPECT_EQ(mid.spans, before.spans) << "no span changed hands";

  // A fifth goes to the spans, whose bitmaps take it: not written either.
  c::InsertBatch(cls, &objs[limit], batch);
  for (uint32_t i = limit; i < limit + batch; ++i) {
    EXPECT_EQ(Word0(objs[i]), 0x5eed0000 + i) << "object " << i << " touched";
  }
  c::ClassStats spans;
  c::GetClassStats(0, cls, &spans);
  EXPECT_EQ(spans.free_objects, before.free_objects + limit + batch);
  c::CheckInvariants();

  // A refill takes the most recently flushed batch back, last object first.
  std::vector<void*> back(batch);
  ASSERT_EQ(c::RemoveBatch(0, cls, back.data(), batch), batch);
  for (uint32_t k = 0; k < batch; ++k) EXPECT_EQ(back[k], objs[limit - 1 - k]);
  c::CheckInvariants();

  // Everything back; malloc_trim empties the transfer cache into the spans
  // and gives every span of the class, now empty, to the page heap.
  c::InsertBatch(cls, back.data(), batch);
  malloc_trim(0);
  c::CheckInvariants();
  c::ClassStats after;
  c::GetClassStats(0, cls, &after);
  EXPECT_EQ(after.spans, 0u);
  EXPECT_EQ(after.free_objects, 0u);
}

// Objects of an idle cache skip the transfer cache (Via::kSpans), so that
// their spans can empty; ReleaseIdleLists gives back the empty span a list
// keeps, but only once no refill took from the list for a whole interval
// (two calls).  Objects of 30000 bytes: a class nothing else here uses.
TEST(TransferCache, IdleObjectsGoToTheirSpansAndIdleListsLetGo) {
  free(malloc(16));  // Initialises the allocator.
  const int cls = c::ClassOf(30000);
  ASSERT_NE(cls, c::ClassOf(20000));
  const uint32_t batch = c::Class(cls).batch;
  c::ClassStats before;
  c::GetClassStats(0, cls, &before);
  ASSERT_EQ(before.spans, 0u) << "the class is in use elsewhere";

  std::vector<void*> objs(batch);
  ASSERT_EQ(c::RemoveBatch(0, cls, objs.data(), batch), batch);
  for (uint32_t i = 0; i < batch; ++i) Word0(objs[i]) = 0x1d1e0000 + i;
  c::InsertBatch(cls, objs.data(), batch, c::Via::kSpans);
  for (uint32_t i = 0; i < batch; ++i) {
    EXPECT_EQ(Word0(objs[i]), 0x1d1e0000 + i) << "object " << i << " touched";
  }
  c::CheckInvariants();
  c::ClassStats mid;
  c::GetClassStats(0, cls, &mid);
  // The span is empty, and the list keeps it (the only one it has).
  EXPECT_EQ(mid.spans, 1u);
  EXPECT_EQ(mid.free_objects, mid.total_objects);

  // The first call sees the refill above and only notes it; the second
  // finds the list idle and lets its empty span go.
  c::ReleaseIdleLists();
  c::ReleaseIdleLists();
  c::CheckInvariants();
  c::ClassStats after;
  c::GetClassStats(0, cls, &after);
  EXPECT_EQ(after.spans, 0u);
  EXPECT_EQ(after.free_objects, 0u);

  // A list that is refilled from keeps its span.
  ASSERT_EQ(c::RemoveBatch(0, cls, objs.data(), batch), batch);
  c::InsertBatch(cls, objs.data(), batch, c::Via::kSpans);
  c::ReleaseIdleLists();
  c::GetClassStats(0, cls, &after);
  EXPECT_EQ(after.spans, 1u) << "a list refilled from since the last call";
}

// Objects returned to a span come back from it in ascending addresses,
// whatever order they were returned in, and untouched; returning one that
// is already free in its span is a double free, caught there.  Objects of
// 40000 bytes: a class nothing else here uses.
TEST(SpanBitmap, RefillsInAscendingOrderAndCatchesADoubleReturn) {
  free(malloc(16));  // Initialises the allocator.
  const int cls = c::ClassOf(40000);
  const uint32_t n = c::Class(cls).limit / c::Class(cls).size;  // One span.
  std::vector<void*> objs(n);
  ASSERT_EQ(c::RemoveBatch(0, cls, objs.data(), n), n);
  for (uint32_t i = 0; i < n; ++i) Word0(objs[i]) = 0xb17a0000 + i;
  // Every other object back, last first; the rest stay out.
  std::vector<void*> back;
  for (uint32_t i = n; i-- > 0;) {
    if (i % 2 == 0) back.push_back(objs[i]);
  }
  c::InsertBatch(cls, back.data(), static_cast<uint32_t>(back.size()),
                 c::Via::kSpans);
  c::CheckInvariants();
  std::vector<void*> again(back.size());
  ASSERT_EQ(c::RemoveBatch(0, cls, again.data(),
                           static_cast<uint32_t>(again.size())),
            again.size());
  for (size_t k = 0; k < again.size(); ++k) {
    EXPECT_EQ(again[k], objs[2 * k]) << "refill " << k;
    EXPECT_EQ(Word0(again[k]), 0xb17a0000 + 2 * k) << "object touched";
  }
  c::CheckInvariants();

  c::InsertBatch(cls, &objs[1], 1, c::Via::kSpans);
  EXPECT_DEATH(c::InsertBatch(cls, &objs[1], 1, c::Via::kSpans),
               "double free \\(the object is free in its span\\)");

  // Everything back; trim gives the span to the page heap.
  for (uint32_t i = 0; i < n; ++i) {
    if (i != 1) c::InsertBatch(cls, &objs[i], 1, c::Via::kSpans);
  }
  malloc_trim(0);
  c::CheckInvariants();
  c::ClassStats after;
  c::GetClassStats(0, cls, &after);
  EXPECT_EQ(after.spans, 0u);
}

}  // namespace
