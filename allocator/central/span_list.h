// allocator/central/span_list.h: the records behind the central lists
// (layer 4, internal to allocator/central): a span's state, a (node,
// class) list and the links between them, shared by central_list.cc (the
// lists' operations), span_purge.cc (returning sparse spans' free pages)
// and invariants.cc.
//
// Locking: everything here is guarded by the lock of the list that owns
// the span, except where a field says otherwise.
#ifndef CIDMALLOC_ALLOCATOR_CENTRAL_SPAN_LIST_H_
#define CIDMALLOC_ALLOCATOR_CENTRAL_SPAN_LIST_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/central/size_classes.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/chunk.h"

namespace cidmalloc::central::internal {

// Where a span is.
enum class Place : uint8_t {
  kPartial,  // On its list's partial list: it has an object to hand out.
  kFull,     // On no list: all its objects are out.
  kPurging,  // Off the partial list while span_purge.cc returns its free
             // pages (in its list's purging_spans).
};

// A span's state.
//
// Its free objects are the uncarved ones, [carved, capacity), which no one
// has touched yet, and those returned, one bit each in the bitmap that
// follows the record (SpanBits): a refill takes them in ascending order
// without touching them, where a free list linked through the objects made
// it load each one, a dependent cache miss per object for objects freed
// long ago (jemalloc's slabs keep a bitmap too).  A free of an object whose
// bit is set is a double free.  A free sets its bit with a relaxed atomic
// store, under the lock, because a purge reads the bitmap without it
// (span_purge.cc); RemoveBatch, which clears bits with plain stores, never
// reaches a span being purged.
struct Span {
  uintptr_t start;
  page_heap::ChunkInfo* chunk;
  uint32_t carved;      // Objects [0, carved) were handed out at least once.
  uint32_t capacity;    // Objects in the span.
  uint32_t in_use;      // Objects outside the span.
  uint32_t free_bits;   // Bits set in the bitmap: returned objects.
  uint32_t first_word;  // No bit is set in the bitmap's words before it.
  uint8_t cls;
  Place place;
  bool returned;        // An object came back since a purge scan last
                        // looked at the span.
  bool queued;          // On the list's purge queue.
  Span* prev;           // The partial list's links.
  Span* next;
  Span* queue_prev;     // The purge queue's links.
  Span* queue_next;
};
static_assert(sizeof(Span) % alignof(uint64_t) == 0);

// The bitmap of a span of class `cls`: BitmapWords(cls) words after the
// record, bit i of word w for object 64 w + i.
inline uint32_t BitmapWords(int cls) {
  const SizeClassInfo& c = Class(cls);
  return (c.limit / c.size + 63) / 64;
}
inline uint64_t* SpanBits(Span* s) { return reinterpret_cast<uint64_t*>(s + 1); }
inline const uint64_t* SpanBits(const Span* s) {
  return reinterpret_cast<const uint64_t*>(s + 1);
}

// The transfer cache: whole batches on their way from one ID's cache to
// another's, kept as an array of pointers so that neither side touches the
// objects.  Without it a flushed batch was threaded through the objects
// into their spans' free lists (before the spans kept bitmaps), and the
// next refill walked those lists: one dependent load per object, of a line
// the freeing core had just written (prodcons spent a fifth of its time
// there).  Objects in it stay counted as in use by their spans; it holds at
// most kTransferBatches batches.
inline constexpr uint32_t kTransferBatches = 4;
inline constexpr uint32_t kTransferSlots = kTransferBatches * kMaxBatch;

// The most spans one purge takes off the partial list at a time.
inline constexpr uint32_t kPurgeBatch = 8;

struct alignas(64) CentralList {
  os::SpinLock lock;
  // Guarded by `lock`:
  Span* partial = nullptr;  // Spans with an object to hand out, the one
                            // that last became partial first.
  uint64_t spans = 0;
  uint64_t free_objects = 0;   // In the spans (returned or uncarved) and
                               // in the transfer cache.
  uint64_t total_objects = 0;
  void** transfer = nullptr;   // kTransferSlots slots, allocated on first use.
  uint32_t transfer_count = 0;
  uint32_t removals = 0;       // RemoveBatch calls, ever (wrapping).
  uint32_t removals_seen = 0;  // `removals` at the last ReleaseIdleLists.
  // Spans objects came back to since their last purge, oldest first.
  Span* queue_head = nullptr;
  Span* queue_tail = nullptr;
  uint32_t queued = 0;
  // The spans a purge has off the partial list (Place::kPurging).
  uint32_t purging = 0;
  Span* purging_spans[kPurgeBatch] = {};
};

extern CentralList g_lists[os::kMaxNodes][kNumClasses];

// Puts s at the head of the partial list.
inline void Link(CentralList* l, Span* s) {
  s->place = Place::kPartial;
  s->prev = nullptr;
  s->next = l->partial;
  if (s->next != nullptr) s->next->prev = s;
  l->partial = s;
}

// Takes s off the partial list: it is full, or a purge takes it.
inline void Unlink(CentralList* l, Span* s, Place now) {
  s->place = now;
  if (s->prev != nullptr) {
    s->prev->next = s->next;
  } else {
    l->partial = s->next;
  }
  if (s->next != nullptr) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
}

// Appends s to the purge queue / takes it off.
inline void Enqueue(CentralList* l, Span* s) {
  s->queued = true;
  s->queue_next = nullptr;
  s->queue_prev = l->queue_tail;
  if (l->queue_tail != nullptr) {
    l->queue_tail->queue_next = s;
  } else {
    l->queue_head = s;
  }
  l->queue_tail = s;
  ++l->queued;
}

inline void Dequeue(CentralList* l, Span* s) {
  s->queued = false;
  if (s->queue_prev != nullptr) {
    s->queue_prev->queue_next = s->queue_next;
  } else {
    l->queue_head = s->queue_next;
  }
  if (s->queue_next != nullptr) {
    s->queue_next->queue_prev = s->queue_prev;
  } else {
    l->queue_tail = s->queue_prev;
  }
  s->queue_prev = s->queue_next = nullptr;
  --l->queued;
}

// Gives a span with no object in use back to the page heap
// (central_list.cc).  Called with l->lock held; s is not being purged.
void Release(CentralList* l, Span* s);

// Which purge queue entries PurgeQueue returns the free pages of.
enum class Settled : uint8_t {
  kRequired,     // Only spans no object came back to since the previous
                 // scan (the idle scan: a span still being freed into
                 // would be purged again at every scan).
  kNotRequired,  // Every queued span (malloc_trim).
};
// Returns the free pages of the sparse spans on l's purge queue to the OS
// (span_purge.cc).  Takes l->lock, and lets it go while it advises.
void PurgeQueue(CentralList* l, Settled settled);
// Puts the spans a purge had off the lists back, in a fork child, where
// the purging thread does not exist (called with every lock reset).
void FinishPurgesAfterFork();

}  // namespace cidmalloc::central::internal

#endif  // CIDMALLOC_ALLOCATOR_CENTRAL_SPAN_LIST_H_
