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

// Where a span is: on one of its list's occupancy lists (0 to
// kOccupancyLists - 1), on none (all its objects are out), or off them
// while span_purge.cc returns its free pages.
inline constexpr int kOccupancyLists = 8;
inline constexpr uint8_t kNotListed = 0xff;
inline constexpr uint8_t kPurging = 0xfe;

// A span's state.
//
// Its free objects are the uncarved ones, [carved, capacity), which no one
// has touched yet, and those returned, one bit each in the bitmap that
// follows the record (SpanBits): a refill takes them in ascending order
// without touching them, where a free list linked through the objects made
// it load each one, a dependent cache miss per object for objects freed
// long ago (jemalloc's slabs keep a bitmap too).  A free of an object whose
// bit is set is a double free.  The bitmap's words are written with
// relaxed atomic stores, under the lock: a purge reads them without it
// (span_purge.cc).
struct Span {
  uintptr_t start;
  page_heap::ChunkInfo* chunk;
  uint32_t carved;      // Objects [0, carved) were handed out at least once.
  uint32_t capacity;    // Objects in the span.
  uint32_t in_use;      // Objects outside the span.
  uint32_t free_bits;   // Bits set in the bitmap: returned objects.
  uint32_t first_word;  // No bit is set in the bitmap's words before it.
  uint8_t cls;
  uint8_t list;         // An occupancy list, kNotListed or kPurging.
  bool returned;        // An object came back since a purge scan last
                        // looked at the span.
  bool queued;          // On the list's purge queue.
  Span* prev;           // The occupancy list's links.
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

// Partial spans are kept on kOccupancyLists lists by how full they are:
// list i holds those with i/8 <= in_use/capacity < (i+1)/8.  A refill
// takes objects from the fullest span there is, so that a class that is
// freed and allocated at once packs its objects into the spans that are
// nearly full while the sparse ones drain, go back to the page heap, or
// at least have free pages to give back (span_purge.cc).  With one list,
// headed by the span an object last came back to, refills spread new
// objects over every span with a hole.  tcmalloc sorts its spans by
// allocated objects in the same way; jemalloc takes its lowest-address
// slab.
inline uint8_t OccupancyList(uint32_t in_use, uint32_t capacity) {
  // in_use < capacity for any span with a free object; in_use <= 8192.
  return static_cast<uint8_t>(in_use * kOccupancyLists / capacity);
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

// The most spans one purge takes off the occupancy lists at a time.
inline constexpr uint32_t kPurgeBatch = 8;

struct alignas(64) CentralList {
  os::SpinLock lock;
  // Guarded by `lock`:
  Span* partial[kOccupancyLists] = {};  // Spans with an object to hand
                                        // out, by occupancy (see above).
  uint8_t nonempty = 0;     // Bit i set iff partial[i] is not empty.
  uint32_t listed = 0;      // Spans on the occupancy lists.
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
  // The spans a purge has off the occupancy lists (list == kPurging).
  uint32_t purging = 0;
  Span* purging_spans[kPurgeBatch] = {};
};

extern CentralList g_lists[os::kMaxNodes][kNumClasses];

// Puts s at the head of the occupancy list its in_use gives.
inline void Link(CentralList* l, Span* s) {
  const uint8_t i = OccupancyList(s->in_use, s->capacity);
  s->list = i;
  s->prev = nullptr;
  s->next = l->partial[i];
  if (s->next != nullptr) s->next->prev = s;
  l->partial[i] = s;
  l->nonempty |= static_cast<uint8_t>(1u << i);
  ++l->listed;
}

inline void Unlink(CentralList* l, Span* s) {
  const uint8_t i = s->list;
  s->list = kNotListed;
  if (s->prev != nullptr) {
    s->prev->next = s->next;
  } else {
    l->partial[i] = s->next;
    if (s->next == nullptr) l->nonempty &= static_cast<uint8_t>(~(1u << i));
  }
  if (s->next != nullptr) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  --l->listed;
}

// Moves a listed span to the list its in_use now gives, if that changed.
inline void Relist(CentralList* l, Span* s) {
  if (OccupancyList(s->in_use, s->capacity) == s->list) return;
  Unlink(l, s);
  Link(l, s);
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
