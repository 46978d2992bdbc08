// allocator/central/span_purge.cc: returns the free pages of sparse spans
// to the OS.
//
// A span goes back to the page heap only once its last object is free.  A
// program that frees most objects of a class and then allocates others (a
// server whose values change size) leaves that class's spans sparse: each
// pins its 64 KiB or more for the few objects still in use.  A redis that
// went through value sizes of 100 B to 4 KB kept 1,080 MB resident for 157
// MB of data, 6,728 spans of the 3,072-byte class holding 30,591 objects
// of their 141,288.  Here each kernel page of such a span that holds no
// object in use goes back to the OS with madvise while the span stays
// where it is; the page reads as zero once an object on it is handed out
// again, which no caller of malloc can tell.  glibc's malloc_trim does the
// same inside its heaps.  The page heap keeps counting those pages as in
// use.
//
// Which spans: those an object came back to since their last purge (each
// list's purge queue, in the order they joined it) whose free objects make
// at least a quarter of their bytes.  The idle scan (ReleaseIdleLists)
// purges only lists no refill took from, and of those only the spans that
// no free reached for a whole scan period, so that a span still being
// freed into is purged once it settles rather than at every scan.
// malloc_trim purges every queued span.
//
// Locking: a purge takes at most kPurgeBatch spans off the partial list
// under the list's lock (Place::kPurging), and lets the lock go
// while it advises: frees into those spans go on (they set bits and never
// touch an object's memory), refills cannot reach them, so an object it
// sees free stays free until it puts the spans back under the lock.  It
// reads the bitmap without the lock; the relaxed atomic stores that set
// its bits make that race-free, and a bit it misses only keeps a page.
// One purge at a time per list: another finds `purging` set and leaves.
#include <atomic>

#include "allocator/central/central_list.h"
#include "allocator/central/span_list.h"
#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/page_heap.h"

namespace cidmalloc::central {

namespace {

// Bytes PurgeFreePages returned to the OS, ever; relaxed (statistics).
std::atomic<uint64_t> g_purged_bytes{0};

using internal::Span;

// Whether s has enough free bytes to be worth a purge: a page at least,
// and a quarter of the span.  Called with its list's lock held.
bool WorthPurging(const Span* s) {
  const SizeClassInfo& c = Class(s->cls);
  const uint64_t free_bytes = uint64_t{s->capacity - s->in_use} * c.size;
  return free_bytes >= os::KernelPageSize() && free_bytes * 4 >= c.span_bytes;
}

// Returns every kernel page of s that holds no object in use to the OS:
// pages covered only by objects whose bit is set, by objects never carved,
// or by the span's tail past its last object.  s is off the partial list
// (kPurging), so its carved count does not change and its bits are only
// set.  Returns the bytes advised.
uint64_t PurgeFreePages(const Span* s) {
  const SizeClassInfo& c = Class(s->cls);
  const uintptr_t page = os::KernelPageSize();
  uint64_t purged = 0;
  uintptr_t run = s->start;  // Where the current run of free bytes starts.
  const auto release = [&](uintptr_t end) {
    const uintptr_t from = (run + page - 1) & ~(page - 1);
    const uintptr_t to = end & ~(page - 1);
    if (to > from && page_heap::ReleaseSpanPages(from, to - from)) {
      purged += to - from;
    }
  };
  // The objects in use are the carved ones whose bit is clear.
  const uint64_t* bits = internal::SpanBits(s);
  for (uint32_t w = 0; w * 64 < s->carved; ++w) {
    // Relaxed: pairs with no store; see the file comment.
    uint64_t in_use = ~__atomic_load_n(&bits[w], __ATOMIC_RELAXED);
    const uint32_t carved_here = s->carved - w * 64;
    if (carved_here < 64) in_use &= (uint64_t{1} << carved_here) - 1;
    for (; in_use != 0; in_use &= in_use - 1) {
      const uintptr_t obj =
          s->start + uintptr_t{w * 64 + __builtin_ctzll(in_use)} * c.size;
      release(obj);
      run = obj + c.size;
    }
  }
  release(s->start + c.span_bytes);
  return purged;
}

// What PutBack does with a span of the purge that has no object in use.
enum class EmptySpan : uint8_t {
  kRelease,  // Back to the page heap, unless it would be the list's only
             // span.
  kKeep,     // On the partial list: in a fork child, where Release would
             // take the page heap's lock, which may not be reset yet.
};

// Puts the spans of l's purge back on the partial list.  Called with
// l->lock held (or every lock reset).
void PutBack(internal::CentralList* l, EmptySpan empty) {
  for (uint32_t i = 0; i < l->purging; ++i) {
    Span* s = l->purging_spans[i];
    l->purging_spans[i] = nullptr;
    s->place = internal::Place::kFull;  // On no list, for Release.
    if (empty == EmptySpan::kRelease && s->in_use == 0 &&
        l->partial != nullptr) {
      internal::Release(l, s);
    } else {
      internal::Link(l, s);
    }
  }
  l->purging = 0;
}

}  // namespace

namespace internal {

void PurgeQueue(CentralList* l, Settled settled) {
  l->lock.Lock();
  uint32_t todo = l->purging == 0 ? l->queued : 0;
  while (todo > 0 && l->queue_head != nullptr) {
    uint32_t n = 0;
    while (n < kPurgeBatch && todo > 0 && l->queue_head != nullptr) {
      --todo;
      Span* s = l->queue_head;
      Dequeue(l, s);
      if (settled == Settled::kRequired && s->returned) {
        s->returned = false;
        Enqueue(l, s);  // Still being freed into: the next scan sees it.
        continue;
      }
      s->returned = false;
      // A full span has no free object.
      if (s->place == Place::kFull || !WorthPurging(s)) continue;
      Unlink(l, s, Place::kPurging);
      l->purging_spans[n++] = s;
    }
    if (n == 0) continue;
    l->purging = n;
    l->lock.Unlock();
    uint64_t purged = 0;
    // Only this thread writes purging_spans while `purging` is not 0.
    for (uint32_t i = 0; i < n; ++i) {
      purged += PurgeFreePages(l->purging_spans[i]);
    }
    g_purged_bytes.fetch_add(purged, std::memory_order_relaxed);
    l->lock.Lock();
    PutBack(l, EmptySpan::kRelease);
  }
  l->lock.Unlock();
}

void FinishPurgesAfterFork() {
  for (auto& node : g_lists) {
    for (CentralList& l : node) PutBack(&l, EmptySpan::kKeep);
  }
}

}  // namespace internal

uint64_t PurgedSpanBytes() {
  return g_purged_bytes.load(std::memory_order_relaxed);
}

uint32_t SpansBeingPurged() {
  uint32_t n = 0;
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (int cls = 1; cls < kNumClasses; ++cls) {
      internal::CentralList* l = &internal::g_lists[node][cls];
      os::SpinLockHolder h(&l->lock);
      n += l->purging;
    }
  }
  return n;
}

}  // namespace cidmalloc::central
