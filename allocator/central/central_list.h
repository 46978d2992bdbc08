// allocator/central/central_list.h: layer 4, per-(node, class) central free
// lists.
//
// Each list owns the small-object spans of one class on one node.  A span
// hands out objects first from those returned to it (a bit each in the
// span's bitmap, in ascending order, without touching them) and then by
// carving untouched objects off its end, so a new span costs no writes to
// its memory.  A return of an object whose bit is set is a double free.
// Objects move to and from the front end in batches.  A freed object always
// returns to the list of its own span's node, whichever node frees it: that
// is how remote frees travel home.
//
// Locking: one spin lock per (node, class) guards its span list and the
// state of its spans.  Lock order: central list -> page heap; two central
// locks are never held together.
#ifndef CIDMALLOC_ALLOCATOR_CENTRAL_CENTRAL_LIST_H_
#define CIDMALLOC_ALLOCATOR_CENTRAL_CENTRAL_LIST_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/central/size_classes.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::central {

// ---- Span tags ------------------------------------------------------------
// Every span's 64 KiB slots carry a tag in the page heap's span map
// (page_heap::LookupSpanTag), so that free() finds what it needs in two
// loads from the pointer:
//   bits 0-7    the span's class (never 0 for a span);
//   bits 8-13   the span's node (the node of its chunk);
//   bits 14-31  an 18-bit value per class that the layer above registers
//               with SetTagPayloads() before the first span is carved; the
//               front end registers the offset of the class's stack in a
//               slab.
inline constexpr int kTagNodeShift = 8;
inline constexpr int kTagPayloadShift = 14;
inline constexpr uint32_t kMaxTagPayload = (1u << (32 - kTagPayloadShift)) - 1;
static_assert(os::kMaxNodes <= (1 << (kTagPayloadShift - kTagNodeShift)));
inline int TagClass(uint32_t tag) { return static_cast<int>(tag & 0xff); }
inline int TagNode(uint32_t tag) {
  return static_cast<int>((tag >> kTagNodeShift) &
                          ((1u << (kTagPayloadShift - kTagNodeShift)) - 1));
}
inline uint32_t TagPayload(uint32_t tag) { return tag >> kTagPayloadShift; }
// The class of the small-object span that holds `p`; 0 if none (a large
// allocation, free pages, or memory the allocator never mapped).
inline int ClassOfAddress(uintptr_t p) {
  return TagClass(page_heap::LookupSpanTag(p));
}
void SetTagPayloads(const uint32_t (&payload)[kNumClasses]);

// Takes up to n objects of class `cls` from node `node`'s list into out[].
// Returns how many (0 with errno ENOMEM when no memory can be had).
uint32_t RemoveBatch(int node, int cls, void** out, uint32_t n);

// Where InsertBatch puts the objects.
enum class Via : uint8_t {
  kTransferCache,  // The list's transfer cache, where they fit: the next
                   // refill takes them without touching them.
  kSpans,          // Their spans, which may then be empty and go back to
                   // the page heap: objects nobody is expected to want soon
                   // (an idle cache's).
};
// Returns objects of class `cls` to their spans (each to its own node's
// list), or to the transfer cache.  Aborts with a message on a double free
// it can prove.
void InsertBatch(int cls, void* const* objs, uint32_t n,
                 Via via = Via::kTransferCache);

// Gives every span with no object in use back to the page heap, including
// the one each list otherwise keeps, and returns to the OS the pages of
// the other spans that hold no object in use (malloc_trim).
void ReleaseEmptySpans();
// The same for each list that no refill took objects from since the last
// call (the front end's idle scan, once per CIDMALLOC_CACHE_IDLE_MS): its
// transfer cache goes back to the spans, each object of which pins its
// span, then its empty spans to the page heap, and the free pages of its
// partial spans to the OS.
void ReleaseIdleLists();
// The bytes of partial spans' free pages those two returned to the OS,
// ever.  The page heap still counts them as committed: they are part of
// spans in use, and become resident again when their objects are reused.
uint64_t PurgedSpanBytes();
// Spans a purge has off the lists right now (tests: 0 in a fork child,
// whose ForkChild puts them back).
uint32_t SpansBeingPurged();

struct ClassStats {
  uint64_t spans;          // Spans owned by the list.
  uint64_t free_objects;   // Objects free in those spans.
  uint64_t total_objects;  // Capacity of those spans.
};
void GetClassStats(int node, int cls, ClassStats* out);

// Checks every list's span invariants (debug builds and tests).
void CheckInvariants();

void ForkPrepare();
void ForkParent();
void ForkChild();

}  // namespace cidmalloc::central

#endif  // CIDMALLOC_ALLOCATOR_CENTRAL_CENTRAL_LIST_H_
