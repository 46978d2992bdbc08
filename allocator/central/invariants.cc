// allocator/central/invariants.cc: central::CheckInvariants, the central
// lists' consistency check (debug builds and tests).
#include "allocator/central/central_list.h"
#include "allocator/central/span_list.h"
#include "allocator/os/check.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"

namespace cidmalloc::central {

namespace {

using internal::CentralList;
using internal::Span;

// Checks one span of (node, cls), on its partial list or being purged;
// called with the list's lock.  A span being purged is read as it is: its
// purge reads the bitmap but does not change it.
void CheckSpan(const Span* s, int node, int cls, internal::Place place) {
  CIDMALLOC_CHECK(s->place == place && s->cls == cls, "span on the wrong list");
  CIDMALLOC_CHECK(s->chunk->node == node, "span on the wrong node");
  CIDMALLOC_CHECK(s->in_use <= s->carved && s->carved <= s->capacity &&
                      s->in_use < s->capacity,
                  "span counts");
  uint32_t set = 0;
  const uint64_t* bits = internal::SpanBits(s);
  for (uint32_t w = 0; w < internal::BitmapWords(cls); ++w) {
    CIDMALLOC_CHECK(w >= s->first_word || bits[w] == 0,
                    "span bitmap: a bit before first_word");
    for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
      CIDMALLOC_CHECK(w * 64 + __builtin_ctzll(b) < s->carved,
                      "span bitmap: an object never carved is free");
      ++set;
    }
  }
  CIDMALLOC_CHECK(set == s->free_bits, "span bitmap: free_bits");
  CIDMALLOC_CHECK(
      s->free_bits + (s->capacity - s->carved) == s->capacity - s->in_use,
      "free objects do not add up");
}

// The partial list and the spans being purged; returns their free
// objects.
uint64_t CheckSpans(const CentralList* l, int node, int cls) {
  uint64_t free = 0;
  for (const Span* s = l->partial; s != nullptr; s = s->next) {
    CIDMALLOC_CHECK(s->next == nullptr || s->next->prev == s,
                    "partial list links");
    CheckSpan(s, node, cls, internal::Place::kPartial);
    free += s->capacity - s->in_use;
  }
  CIDMALLOC_CHECK(l->purging <= internal::kPurgeBatch, "purge batch");
  for (uint32_t i = 0; i < l->purging; ++i) {
    CheckSpan(l->purging_spans[i], node, cls, internal::Place::kPurging);
    free += l->purging_spans[i]->capacity - l->purging_spans[i]->in_use;
  }
  return free;
}

void CheckPurgeQueue(const CentralList* l, int cls) {
  uint32_t queued = 0;
  const Span* last = nullptr;
  for (const Span* s = l->queue_head; s != nullptr; s = s->queue_next) {
    CIDMALLOC_CHECK(s->queued && s->cls == cls && s->queue_prev == last,
                    "purge queue links");
    last = s;
    ++queued;
  }
  CIDMALLOC_CHECK(last == l->queue_tail && queued == l->queued,
                  "purge queue count");
}

}  // namespace

void CheckInvariants() {
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (int cls = 1; cls < kNumClasses; ++cls) {
      CentralList* l = &internal::g_lists[node][cls];
      os::SpinLockHolder h(&l->lock);
      const uint64_t span_free = CheckSpans(l, node, cls);
      CheckPurgeQueue(l, cls);
      CIDMALLOC_CHECK(
          l->transfer_count <= internal::kTransferBatches * Class(cls).batch,
          "transfer cache over its limit");
      for (uint32_t i = 0; i < l->transfer_count; ++i) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(l->transfer[i]);
        CIDMALLOC_CHECK(ClassOfAddress(p) == cls && IsObjectStart(p, cls),
                        "transfer cache entry is not an object of its class");
      }
      CIDMALLOC_CHECK(span_free + l->transfer_count == l->free_objects,
                      "list free count");
    }
  }
}

}  // namespace cidmalloc::central
