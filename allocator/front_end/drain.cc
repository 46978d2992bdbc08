// allocator/front_end/drain.cc: draining another ID's slab, for
// malloc_trim (DrainAll), a soft ID's exit (OnSoftIdExit), and the idle scan
// (MaybeDrainIdle; "Idle slabs" in front_end.h).
//
// The protocol (rseq/rseq.h): unpublish the slab from g_slabs, make sure
// no operation on its ID is still in flight (one fence for all the rseq IDs,
// QuiesceId or TryQuiesceId for each soft ID), drain it as its holder, and
// publish it again.  All under g_lock.
#include <atomic>

#include "allocator/central/central_list.h"
#include "allocator/front_end/front_end.h"
#include "allocator/front_end/slab_store.h"
#include "allocator/os/spinlock.h"
#include "allocator/page_heap/page_heap.h"
#include "rseq/rseq.h"

namespace cidmalloc::front_end {

namespace {

using central::Class;
using central::kNumClasses;
using namespace internal;  // NOLINT: the store this file drains.

// When the next idle scan is due (ClaimPeriodEnd).
std::atomic<uint64_t> g_next_idle_scan_ms{0};

// The two kinds of drain of another ID's slab.
enum class Drain : uint8_t {
  // malloc_trim, a soft ID's exit: the ID may be busy again soon, so the
  // capacities stay and the objects go to the transfer caches; waits for a
  // soft ID's lock.
  kTrim,
  // An idle slab (MaybeDrainIdle): each class back to at most its first
  // batch, the objects straight to their spans (which can then go back to
  // the page heap), and a soft ID whose lock is held is left alone.
  kIdle,
};

// Drains a slab nobody can reach (unpublished and quiesced).
void DrainUnpublished(void* slab, Drain kind) {
  const central::Via via =
      kind == Drain::kIdle ? central::Via::kSpans : central::Via::kTransferCache;
  int64_t shrunk = 0;
  for (int c = 1; c < kNumClasses; ++c) {
    rseq::Stack* s = StackOf(slab, kLayout.offset[c]);
    void* buf[256];
    while (const uint32_t n = s->PopHeldUpTo(buf, 256)) {
      central::InsertBatch(c, buf, n, via);
    }
    const uint32_t batch = Class(c).batch, sparse = SparseBatch(c);
    if (kind == Drain::kIdle && s->capacity > sparse) {
      if (s->capacity > batch) {
        shrunk += int64_t{s->capacity - batch} * Class(c).size;
      }
      // Relaxed: no critical section runs on the slab until the release
      // store that publishes it again.
      __atomic_store_n(&s->capacity, static_cast<uint16_t>(sparse),
                       __ATOMIC_RELAXED);
    }
  }
  // What the shrink gave back, subtracted (not a store of 0): the ID's own
  // slow path may be adding or subtracting what it did just before the
  // slab was unpublished.
  if (shrunk != 0) {
    HeaderOf(slab)->extra_bytes.fetch_sub(shrunk, std::memory_order_relaxed);
  }
  rseq::Stack* r = StackOf(slab, kLayout.remote_offset);
  void* rbuf[kRemoteCapacity];
  InsertMixed(rbuf, r->PopHeldUpTo(rbuf, kRemoteCapacity), via);
  DrainRunsHeld(slab);
}

// Drains every slab whose header is `picked` (g_lock held) and clears the
// marks: unpublishes them, waits until no critical section can still be
// using one, drains them, and publishes them again.  Slab creation waits
// meanwhile.  Returns how many it drained.
uint32_t DrainPickedLocked(Drain kind) {
  bool any_rseq = false;
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    void* slab = g_store[id];
    if (slab == nullptr || !HeaderOf(slab)->picked) continue;
    __atomic_store_n(&g_slabs[id], nullptr, __ATOMIC_RELAXED);
    if (id < rseq::NumRseqIds()) {
      any_rseq = true;
      continue;
    }
    // A soft ID that cannot be quiesced is left as it is: the caller's own
    // when this runs in a signal handler that interrupted the thread's
    // operation on it, or (kIdle) one whose lock is held.
    const bool quiet = kind == Drain::kIdle ? rseq::TryQuiesceId(id)
                                            : rseq::QuiesceId(id);
    if (!quiet) {
      HeaderOf(slab)->picked = false;
      // Release: pairs with the critical sections' load of the slab.
      __atomic_store_n(&g_slabs[id], slab, __ATOMIC_RELEASE);
    }
  }
  // A failed fence (kernel < 5.10) leaves the rseq IDs' slabs undrained.
  const bool fenced = any_rseq && rseq::Fence();
  uint32_t drained = 0;
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    void* slab = g_store[id];
    if (slab == nullptr || !HeaderOf(slab)->picked) continue;
    HeaderOf(slab)->picked = false;
    if (id >= rseq::NumRseqIds() || fenced) {
      DrainUnpublished(slab, kind);
      ++drained;
    }
    // Release: pairs with the acquire loads of the slab (Published(), a
    // soft ID's SoftStack() in rseq/rseq.h, and the critical sections'
    // dependent load), so that the drained stacks are seen before the slab
    // is.
    __atomic_store_n(&g_slabs[id], slab, __ATOMIC_RELEASE);
  }
  return drained;
}

// What an idle scan sees of `slab`'s stacks, from relaxed loads of their
// top words: whether any holds an object, and a digest of all the top
// words.  A pop or push changes its stack's top (unless a push puts back
// the object just popped), so a slab whose threads only hit their caches,
// and so count no slow-path events, still shows that it is in use between
// two scans.
struct TopsView {
  bool holds_objects;
  uint64_t digest;
};
TopsView ViewTops(void* slab) {
  TopsView v{false, 0};
  const auto add = [&v](const rseq::Stack* s) {
    const uint64_t top = __atomic_load_n(&s->top, __ATOMIC_RELAXED);
    v.holds_objects |= top != 0;
    v.digest = (v.digest ^ top) * 0x9e3779b97f4a7c15ull;
  };
  for (int c = 1; c < kNumClasses; ++c) add(StackOf(slab, kLayout.offset[c]));
  add(StackOf(slab, kLayout.remote_offset));
  add(StackOf(slab, kLayout.run_offset));
  return v;
}

}  // namespace

void DrainAll() {
  os::SpinLockHolder h(&g_lock);
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    if (g_store[id] != nullptr) HeaderOf(g_store[id])->picked = true;
  }
  DrainPickedLocked(Drain::kTrim);
}

uint32_t MaybeDrainIdle(uint64_t now) {
  const uint32_t period = g_config->cache_idle_ms;
  // Not while this thread holds an allocator lock: that is a signal
  // handler's allocation that interrupted it, and the scan takes the
  // central and page-heap locks.
  if (period == 0 || os::t_spinlocks_held != 0) return 0;
  // One slow path per period scans: the one that moves the deadline.
  if (!ClaimPeriodEnd(&g_next_idle_scan_ms, now, period)) return 0;
  // The page heap's automatic release of every arena: a free checks only
  // its own (without this, the pages one arena's threads freed waited for
  // a free into that arena; slow_path_release_test).  Not when the
  // background thread scans: its every tick runs that release anyway.
  if (g_idle_scanner.load(std::memory_order_relaxed) ==
      IdleScanner::kSlowPaths) {
    page_heap::RunAutomaticRelease(page_heap::LockWait::kSkipBusy);
  }
  // A slow path does not wait for a drain or a slab's creation: it skips
  // the scan.
  if (!g_lock.TryLock()) return 0;
  uint32_t picked = 0;
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    void* slab = g_store[id];
    if (slab == nullptr) continue;
    SlabHeader* hdr = HeaderOf(slab);
    const uint32_t events = hdr->events.load(std::memory_order_relaxed);
    const TopsView tops = ViewTops(slab);
    hdr->picked = events == hdr->events_seen &&
                  tops.digest == hdr->tops_seen && tops.holds_objects;
    hdr->events_seen = events;
    hdr->tops_seen = tops.digest;
    picked += hdr->picked;
  }
  const uint32_t drained =
      picked != 0 ? DrainPickedLocked(Drain::kIdle) : 0;
  g_idle_drains += drained;
  g_lock.Unlock();
  central::ReleaseIdleLists();
  return drained;
}

void OnSoftIdExit(uint32_t id) {
  if (id >= kMaxIds) return;
  os::SpinLockHolder h(&g_lock);
  void* slab = g_store[id];
  if (slab == nullptr) return;
  __atomic_store_n(&g_slabs[id], nullptr, __ATOMIC_RELAXED);
  // The exiting thread is not inside an operation, so its own ID can
  // always be quiesced; a shared ID waits for its lock.
  if (rseq::QuiesceId(id)) DrainUnpublished(slab, Drain::kTrim);
  // Release: pairs with Published()'s acquire load and the critical
  // sections' dependent load, as in DrainPickedLocked.
  __atomic_store_n(&g_slabs[id], slab, __ATOMIC_RELEASE);
}

}  // namespace cidmalloc::front_end
