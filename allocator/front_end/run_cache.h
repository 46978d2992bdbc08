// allocator/front_end/run_cache.h: layer 5's cache of page runs, one
// freed run per ID.
//
// Each slab has a run stack (kLayout.run_offset) that holds up to
// kRunCapacity freed page runs of up to kMaxCachedRunPages pages (blocks of
// 128 KiB + 1 to 256 KiB, above the size classes), for the next allocation
// of the same length on the same ID: a push and a pop, rseq sections as the
// classes' own, where the page heap takes its heap's lock for each (two
// locked instructions a malloc + free pair: 72 KiB pairs, when the classes
// ended at 64 KiB, took 33 ns here, tcmalloc's 9).
//
// The page heap keeps one freed run per heap in the same way (its parked
// run, page_heap/buddy.h), under the heap's lock; this keeps one per ID
// without it, and gives it back as eagerly: the heap merges its parked run
// back before it splits a block for another length, and an ID's run goes
// back to its heap as soon as the ID allocates a run of another length or
// node (TakeRunMiss) or realloc grows a run in place (ReturnRuns).  Runs
// also go back at each period sweep of their slab (CIDMALLOC_CACHE_IDLE_MS),
// at malloc_trim and with the idle scan's drains.  Per-ID caches of more
// runs, or of a run per length, kept freed memory from merging:
// realloc_growth's peak RSS grew 1.13-1.24x; with this one, 1.05x (one
// 2 MiB chunk more at its peak; docs/benchmarks/tuning_log.md).
//
// A cached run stays live in the page heap's books (its run_pages entry);
// its first bytes hold a RunHeader.  The mark tells a cached run from a
// live one: a second free() of it, and realloc() or malloc_usable_size()
// of it, are reported (IsCachedRun).
#ifndef CIDMALLOC_ALLOCATOR_FRONT_END_RUN_CACHE_H_
#define CIDMALLOC_ALLOCATOR_FRONT_END_RUN_CACHE_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/front_end/front_end.h"
#include "allocator/os/topology.h"
#include "rseq/rseq.h"

namespace cidmalloc::front_end {

inline constexpr uint32_t kMaxCachedRunPages = 32;  // Of 8 KiB: 256 KiB.

// The first bytes of a cached run.  Written by CacheRun before the push;
// read by the ID's pop (TakeRun) and by a free of the same pointer; the
// mark is cleared before the run leaves the cache.
struct RunHeader {
  uint64_t link;   // rseq::Stack's link word.
  uintptr_t mark;  // RunMark(run) while cached.
  uint32_t pages;  // Its length.
  int32_t node;    // Its node.
};

// Set once by Init, before any allocation (os::RandomSecret): the marks are
// the run's address xor'ed with it, so that no address a program stores
// in a live block's second word looks like one by chance.
extern uintptr_t g_run_secret CIDMALLOC_HIDDEN;
inline uintptr_t RunMark(const void* run) {
  return reinterpret_cast<uintptr_t>(run) ^ g_run_secret;
}
inline bool IsCachedRun(const void* run) {
  return static_cast<const RunHeader*>(run)->mark == RunMark(run);
}

// The run TakeRun popped is of another length or node: back to its heap.
void TakeRunMiss(void* run);
// CacheRun found the run cached already: reports a double free (aborts).
void CachedRunFreed(void* run);
// CacheRun's push failed: where the ID has no slab yet, makes one and
// pushes again; else (or then failing) clears the mark and returns false.
bool CacheRunSlow(void* run, int node);

// A run of `pages` pages for an allocation aligned to at most a page, from
// the current ID's run stack; nullptr if it holds none of that length on
// the current node (a run it held goes back to its heap).
inline void* TakeRun(uint32_t pages) {
  void* run = rseq::Pop(g_slabs, kLayout.run_offset);
  if (run == nullptr) return nullptr;
  RunHeader* h = static_cast<RunHeader*>(run);
  if (CIDMALLOC_LIKELY(h->pages == pages) &&
      CIDMALLOC_LIKELY(os::NumNodes() == 1 || h->node == os::CurrentNode())) {
    h->mark = 0;
    return run;
  }
  TakeRunMiss(run);
  return nullptr;
}

// Marks `run` cached, with its length and node: false, with nothing
// written, if it carries the mark already (a double free).
inline bool MarkRun(void* run, uint32_t pages, int node) {
  RunHeader* h = static_cast<RunHeader*>(run);
  if (CIDMALLOC_UNLIKELY(h->mark == RunMark(run))) return false;
  h->mark = RunMark(run);
  h->pages = pages;
  h->node = node;
  return true;
}

// TakeRun and CacheRun without a call, for the API layer's paths that make none
// (and so need no stack frame), after initialisation (the mode is read without
// the check): the raw-ID sections (cid and cpu modes) or none mode's owner
// protocol only (inline, as the classes' TryAllocSoft and TryFreeSoft: the
// general pop and push enter and leave the soft ID out of line, which cost
// about what the page heap's lock did), and TryTakeRun on one node only (a
// run's node is then always the current one).  They fail, with nothing changed,
// wherever those cannot run (node-qualified IDs, a thread without its own rseq
// area, the owner protocol off), on a run of another length (TryTakeRun returns
// it in *other, still marked: TakeRunMiss gives it back), and on a run marked
// cached already (a double free, which CacheRun reports); the caller then takes
// the general path.
inline void* TryTakeRun(uint32_t pages, void** other) {
  if (os::NumNodes() != 1) return nullptr;
  void* run;
  if (CIDMALLOC_UNLIKELY(rseq::ModeAfterInit() == rseq::Mode::kNone)) {
    if (!rseq::SoftOwnerPop(g_slabs, kLayout.run_offset, &run)) return nullptr;
  } else {
    run = rseq::TryPop(g_slabs, kLayout.run_offset);
    if (run == nullptr) return nullptr;
  }
  RunHeader* h = static_cast<RunHeader*>(run);
  if (CIDMALLOC_LIKELY(h->pages == pages)) {
    h->mark = 0;
    return run;
  }
  *other = run;
  return nullptr;
}
inline bool TryCacheRun(void* run, uint32_t pages, int node) {
  if (!MarkRun(run, pages, node)) return false;
  if (CIDMALLOC_UNLIKELY(rseq::ModeAfterInit() == rseq::Mode::kNone)
          ? rseq::SoftOwnerPush(g_slabs, kLayout.run_offset, run)
          : rseq::TryPush(g_slabs, kLayout.run_offset, run)) {
    return true;
  }
  static_cast<RunHeader*>(run)->mark = 0;
  return false;
}

// free() of the live page run at `run`, `pages` long (at most
// kMaxCachedRunPages), of `node`: true if the current ID's run stack took
// it; false, with nothing changed, if the stack is full (or the run is of
// another node, with node-qualified IDs): the caller frees it.
inline bool CacheRun(void* run, uint32_t pages, int node) {
  if (CIDMALLOC_UNLIKELY(!MarkRun(run, pages, node))) {
    CachedRunFreed(run);
    return false;
  }
  if (CIDMALLOC_LIKELY(rseq::Push(g_slabs, kLayout.run_offset, run, node))) {
    return true;
  }
  return CacheRunSlow(run, node);
}

// The current ID's cached runs back to their heaps.
void ReturnRuns();

}  // namespace cidmalloc::front_end

#endif  // CIDMALLOC_ALLOCATOR_FRONT_END_RUN_CACHE_H_
