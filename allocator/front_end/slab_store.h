// allocator/front_end/slab_store.h: what front_end.cc (slabs, refills,
// flushes, sweeps), drain.cc (draining other IDs' slabs) and stats.cc (the
// layer's statistics) share.  Not part of the layer's interface: only
// those files include it.
#ifndef CIDMALLOC_ALLOCATOR_FRONT_END_SLAB_STORE_H_
#define CIDMALLOC_ALLOCATOR_FRONT_END_SLAB_STORE_H_

#include <stdint.h>

#include <atomic>

#include "allocator/central/central_list.h"
#include "allocator/front_end/front_end.h"
#include "allocator/os/config.h"
#include "allocator/os/spinlock.h"
#include "rseq/rseq.h"

namespace cidmalloc::front_end::internal {

// Set once by Init(), before any allocation.
extern const os::Config* g_config;

// g_lock guards slab creation and g_store: g_store[id] owns the slab of id
// whether or not it is published in g_slabs at the moment.  Each entry is
// written once, under g_lock, and never cleared; SlabOf also reads it
// without the lock (a relaxed load: only whether it is null).  g_lock also
// guards the drains (DrainAll, MaybeDrainIdle, OnSoftIdExit), each header's
// events_seen, tops_seen and picked, g_idle_drains, and the slab counts
// g_num_slabs (slabs created) and g_max_id (the highest ID with one).
extern os::SpinLock g_lock;
extern void* g_store[kMaxIds];
extern uint64_t g_idle_drains;
extern uint32_t g_num_slabs;
extern uint32_t g_max_id;
// Who runs the idle scan (SetIdleScanner).  Relaxed: it only decides
// whether a slow path calls MaybeDrainIdle, and whether the scan releases
// the page heap's delayed pages too; the scan's own election
// (ClaimPeriodEnd) and locks make a second scanner harmless while the
// setting changes hands.
extern std::atomic<IdleScanner> g_idle_scanner;

// A class's capacity and refill while its misses are sparse (front_end.h,
// "Capacity"): a quarter batch, at least 2 objects.
inline uint32_t SparseBatch(int cls) {
  const uint32_t b = central::Class(cls).batch / 4;
  return b < 2 ? 2 : b;
}

inline rseq::Stack* StackOf(void* slab, uint32_t offset) {
  return reinterpret_cast<rseq::Stack*>(static_cast<char*>(slab) + offset);
}
inline SlabHeader* HeaderOf(void* slab) {
  return static_cast<SlabHeader*>(slab);
}
// Acquire: pairs with the release stores that publish a slab (EnsureSlab,
// the drains), so that its initialised or drained stacks are seen.
inline void* Published(uint32_t id) {
  return __atomic_load_n(&g_slabs[id], __ATOMIC_ACQUIRE);
}

// The once-a-period deadlines of CIDMALLOC_CACHE_IDLE_MS (the idle scan's,
// each slab's period sweep): true if the period that `*next` ends is over
// at `now` (os::MonotonicMs) and this caller claimed it, moving `*next` to
// now + period_ms, so that one caller per period acts.  The first call
// (`*next` still 0) only starts the first period.  Relaxed: it only elects
// a caller; what that caller does is ordered by its own locks.
inline bool ClaimPeriodEnd(std::atomic<uint64_t>* next, uint64_t now,
                           uint32_t period_ms) {
  uint64_t due = next->load(std::memory_order_relaxed);
  if (now < due || now == 0) return false;
  if (!next->compare_exchange_strong(due, now + period_ms,
                                     std::memory_order_relaxed)) {
    return false;
  }
  return due != 0;
}

// The calling thread's slab, created if its ID has none; nullptr while it
// is being drained or if memory ran out (front_end.cc, EnsureSlab).
void* CurrentSlab();

// The run stacks (run_cache.cc): the marks' secret (Init); a slab's runs
// back to their heaps, by a drainer that holds the slab (unpublished and
// quiesced); the bytes of the runs a slab holds (a recent figure); and
// CheckInvariants' walk of a held slab's run stack (nullptr, or what is
// wrong).  The period sweep calls ReturnRuns (run_cache.h).
void InitRuns();
void DrainRunsHeld(void* slab);
uint64_t CachedRunBytes(void* slab);
const char* CheckRunsHeld(void* slab);

// Sends objects of mixed classes home (the remote stack's, a drained
// slab's), grouped by class.
void InsertMixed(void** objs, uint32_t n,
                 central::Via via = central::Via::kTransferCache);

}  // namespace cidmalloc::front_end::internal

#endif  // CIDMALLOC_ALLOCATOR_FRONT_END_SLAB_STORE_H_
