// allocator/front_end/front_end.h: layer 5, the per-ID caches ("slabs").
//
// One slab per ID (mm_cid in cid mode, cpu in cpu mode, soft ID without
// rseq), allocated the first time a thread on that ID misses: a process
// whose 4 threads get cids 0..3 touches 4 slabs however many cpus the
// machine has.  On a multi-node machine the cid mode's IDs are
// node-qualified (rseq/state.h): one slab per (node, cid) pair in use, so
// a slab only ever holds objects of its node, and a cid that moves to
// another node finds that node's slab instead of the old node's objects.
// A slab holds a bounded stack per size class and one stack of remote
// objects (freed on a node other than their own).  Pop and push are the
// rseq/ critical sections: no lock, no atomic RMW, no system call, and the
// commit is one store.
//
// Slab layout (constexpr, kLayout):
//   [0, kHeaderBytes)            SlabHeader
//   offset[cls]                  rseq::Stack of class cls
//   remote_offset                rseq::Stack of remote objects
//   run_offset                   rseq::Stack of page runs (run_cache.h)
// A stack is 16 bytes: the cached objects hold its links (rseq/rseq.h).
//
// Capacity: a class starts at 0 (its stack never written).  What a miss
// (an empty stack on malloc, a full one on free) does depends on how soon
// it follows the class's last miss on the slab: misses are dense when
// three in a row come within kGrowWindow of the one before (0.5-2 ms: a
// class that misses more than ~1000 times a second), sparse otherwise.
//   - A sparse miss grants the class a quarter batch (SparseBatch, at
//     least 2) if it has less, and a refill takes that many objects.
//   - A dense miss grants a batch if it has less, free of budget, and
//     beyond that a batch more, up to the class's max_capacity, while the
//     capacity the slab was granted beyond the classes' first batches stays
//     within CIDMALLOC_CACHE_BYTES; a refill takes a batch.
// A class missed now and then costs its ID a central-list transfer of a
// few objects each time, which a larger stack would save little of, where
// a batch (16 KiB of objects) in every ID that ever used it let the
// caches of a request/reply program whose two threads use 45 classes hold
// up to 1.4 MiB (1.0 MiB at its exit; docs/benchmarks/tuning_log.md).  A
// full stack on free grows beyond a batch only if the class was also
// refilled since the last one: an ID that only frees a class (a consumer
// of objects another thread allocates) would otherwise fill its budget
// with objects it never reuses, so it sends them home a batch at a time
// instead (tcmalloc's thread caches do the same: frees alone never grow a
// list past a batch).  Every
// kSweepEvents slow-path events, classes that had no dense miss since the
// last such sweep shrink by a batch, down to SparseBatch, and give the
// excess back.
//
// Every CIDMALLOC_CACHE_IDLE_MS (at a slow path of the slab), classes
// that did not miss for the whole period are emptied and their capacity
// goes back to 0, so that a busy ID does not keep the objects of classes it
// stopped using: each one pins its span.
//
// Idle slabs: a slab's sweeps only run on its own slow paths, so the cache
// of an ID that nobody uses any more (its threads sleep, or exited and
// left it to no one) would keep its objects, and their spans, for good.
// Every CIDMALLOC_CACHE_IDLE_MS, the first slow path on any ID (or the
// background thread, where CIDMALLOC_BACKGROUND_THREAD=on) scans the
// slabs; one with no slow-path event and no change of its stacks' tops
// since the previous scan is drained like malloc_trim's (below) and its
// classes shrink back to a quarter batch (SparseBatch).
// The objects of both go straight to their spans, not to the transfer
// caches.
//
// Another ID's slab (malloc_trim, a soft ID's thread exit, the idle scan;
// drain.cc) is drained by unpublishing it from g_slabs, rseq::Fence or
// (Try)QuiesceId, draining, and publishing it again (see rseq/rseq.h).
#ifndef CIDMALLOC_ALLOCATOR_FRONT_END_FRONT_END_H_
#define CIDMALLOC_ALLOCATOR_FRONT_END_FRONT_END_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/os/config.h"
#include "rseq/rseq.h"

namespace cidmalloc::front_end {

inline constexpr uint32_t kMaxIds = rseq::kMaxRseqIds + rseq::kMaxSoftIds;
inline constexpr uint32_t kRemoteCapacity = 64;
// Page runs a slab's run stack holds at most (run_cache.h).
inline constexpr uint32_t kRunCapacity = 1;
inline constexpr uint32_t kHeaderBytes = 576;
inline constexpr uint32_t kSweepEvents = 1024;
// SlabHeader::last_miss counts units of 2^kMissStampShift cycles (4-16 us
// at 1-4 GHz; it wraps after 0.3-1 s).  A miss is dense when it and the
// kDenseStreak misses of the class before it each came less than
// kGrowWindow units (0.5-2 ms) after the one before.  One such interval
// instead of three let a request/reply program's two threads, whose
// classes miss every 3-40 ms, grow their caches on chance coincidences;
// longer windows (1.6 and 3.2 ms at this machine's 2.6 GHz) kept most of
// that growth (docs/benchmarks/tuning_log.md).
inline constexpr int kMissStampShift = 14;
inline constexpr uint16_t kGrowWindow = 128;
inline constexpr uint8_t kDenseStreak = 2;

struct SlabLayout {
  uint32_t offset[central::kNumClasses];
  uint32_t remote_offset;
  uint32_t run_offset;
  uint32_t bytes;
};

constexpr SlabLayout MakeLayout() {
  SlabLayout l{};
  uint32_t at = kHeaderBytes;
  for (int c = 1; c < central::kNumClasses; ++c) {
    l.offset[c] = at;
    at += sizeof(rseq::Stack);
  }
  l.remote_offset = at;
  at += sizeof(rseq::Stack);
  l.run_offset = at;
  at += sizeof(rseq::Stack);
  l.bytes = (at + 63) & ~63u;
  return l;
}
inline constexpr SlabLayout kLayout = MakeLayout();
// The class whose stack is at `offset` (the inverse of kLayout.offset), so
// that malloc's slow path needs only the offset: its fast path then keeps
// neither the size nor the class for the call.
constexpr int ClassOfStackOffset(uint32_t offset) {
  return static_cast<int>((offset - kHeaderBytes) / sizeof(rseq::Stack)) + 1;
}
constexpr bool StackOffsetsInvert() {
  for (int c = 1; c < central::kNumClasses; ++c) {
    if (ClassOfStackOffset(kLayout.offset[c]) != c) return false;
  }
  return true;
}
static_assert(StackOffsetsInvert());
static_assert(kLayout.bytes <= central::kMaxTagPayload,
              "stack offsets fit a span tag's 18-bit payload");

// The stack offset of each size's class, so that malloc's fast path finds
// the stack with one load from the size instead of two (size -> class ->
// offset).  Sizes up to 1 KiB and a header (central::kMaxSmallIndexed,
// 1040) index `by_size` directly: indexed like
// central::ClassOf (SmallIndexOf(size)) the fast path paid an add and a shift
// more.  64-bit entries: the load then gives the critical section its
// 64-bit offset operand directly, where a 32-bit one cost malloc a
// zero-extending register copy.
inline constexpr size_t kMaxSmallOffsetIndexed = central::kMaxSmallIndexed;
struct OffsetIndex {
  uintptr_t by_size[kMaxSmallOffsetIndexed + 1];     // size
  uintptr_t large[central::kLargeIndexEntries];  // central::LargeIndexOf
};
constexpr OffsetIndex MakeOffsetIndex() {
  OffsetIndex t{};
  for (size_t i = 0; i <= kMaxSmallOffsetIndexed; ++i) {
    t.by_size[i] = kLayout.offset[central::ClassOf(i)];
  }
  for (size_t i = 0; i < central::kLargeIndexEntries; ++i) {
    t.large[i] = kLayout.offset[central::kClasses.large_index[i]];
  }
  return t;
}
inline constexpr OffsetIndex kOffsetIndex = MakeOffsetIndex();

// The stack of a size up to kMaxSmallOffsetIndexed (one table load).
inline uintptr_t SmallStackOffsetOf(size_t size) {
  return kOffsetIndex.by_size[size];
}
// Requires kMaxSmallOffsetIndexed < size <= central::kMaxSmallSize.
inline uintptr_t MidStackOffsetOf(size_t size) {
  return kOffsetIndex.large[central::LargeIndexOf(size)];
}

// Slow-path bookkeeping of one slab.  The atomic fields are hints updated
// with relaxed atomics by whichever thread runs a slow path on the slab's
// ID, and by an idle drain (capacity and extra_bytes); nothing's
// correctness depends on them.  events_seen and picked are plain fields
// under g_lock (slab_store.h).
struct SlabHeader {
  // Node whose objects the slab caches: fixed for a cpu or a node-qualified
  // ID (rseq::NodeOfId); for a raw cid or a soft ID the node of the last
  // refill, and the slab is flushed when it changes.
  std::atomic<int32_t> node;
  uint32_t id;  // Set before the slab is first published; then read-only.
  // Capacity granted beyond each class's initial batch, in bytes of objects;
  // bounded by CIDMALLOC_CACHE_BYTES.
  std::atomic<int64_t> extra_bytes;
  // Slow-path events (refills, full stacks) ever: a sweep every
  // kSweepEvents of them, and a slab whose count did not move between two
  // idle scans is idle (CIDMALLOC_CACHE_IDLE_MS).
  std::atomic<uint32_t> events;
  // Dense misses per class since the last events sweep, all misses since
  // the last period sweep (front_end.cc, Sweep; saturating: only whether
  // they are 0 counts), and when the next period sweep is due
  // (os::MonotonicMs).
  std::atomic<uint8_t> dense_misses[central::kNumClasses];
  std::atomic<uint8_t> period_misses[central::kNumClasses];
  // When each class last missed, in units of 2^kMissStampShift cycles of
  // os::CycleCount, mod 2^16, and how many of its misses in a row (at most
  // kDenseStreak) followed the one before within kGrowWindow (front_end.cc,
  // NoteMiss): whether its misses are dense (see "Capacity" above).
  std::atomic<uint16_t> last_miss[central::kNumClasses];
  std::atomic<uint8_t> dense_streak[central::kNumClasses];
  std::atomic<uint64_t> next_period_sweep_ms;
  // Classes ever granted a capacity (bit c of word c / 64): their stacks
  // have been written (Stats::slab_bytes).
  std::atomic<uint64_t> used_classes[(central::kNumClasses + 63) / 64];
  // Classes refilled (an empty stack on malloc) since their last full stack
  // on free (bit c of word c / 64): a full stack grows beyond its first
  // batch only then (front_end.cc, FreeSlow).
  std::atomic<uint64_t> refilled[(central::kNumClasses + 63) / 64];
  // Under g_lock (slab_store.h): `events` and the digest of the stack tops
  // at the last idle scan (drain.cc), and whether the drain under way
  // picked this slab.
  uint32_t events_seen;
  bool picked;
  uint64_t tops_seen;
};
static_assert(sizeof(SlabHeader) <= kHeaderBytes);

// The published slab of each ID (nullptr: none yet, or being drained).
// Written under g_lock (slab_store.h): release stores publish a slab
// (EnsureSlab, and a drain when it puts the slab back), relaxed stores of
// nullptr unpublish it for a drain.  The release stores pair with
// Published()'s acquire load, the soft IDs' acquire load (rseq::SoftStack)
// and the critical sections' load of g_slabs[id], on which their loads of
// the stack depend.  kWideTableIds entries, for the fast paths' sections
// (rseq::PopUnchecked): those at kMaxIds and above are never written, so
// an unregistered thread's ID (0xffff) finds null.  Only the first pages
// are ever touched; the rest of the 512 KiB stays untouched .bss.
inline constexpr uint32_t kSlabTableIds = rseq::kWideTableIds;
static_assert(kMaxIds <= kSlabTableIds);
extern void* g_slabs[kSlabTableIds] CIDMALLOC_HIDDEN;

// Fast paths: one critical section each, at a class's stack offset.  Only
// while the rseq mode is not none, which the API layer's fast-path flags
// guarantee.  TryAllocAt / TryFreeAt: the wide sections on the raw ID
// field (cpu mode's inline paths; rseq::PopUnchecked).
inline bool TryAllocAt(uintptr_t stack_offset, void** p) {
  return rseq::PopUnchecked(g_slabs, stack_offset, p);
}
inline bool TryFreeAt(uintptr_t stack_offset, void* p) {
  return rseq::PushUnchecked(g_slabs, stack_offset, p);
}

// The inline fast paths' sections (cid mode, rseq::RawIdIsMmCid()): as
// TryAllocAt / TryFreeAt, with the ID read from mm_cid at its fixed
// place in the rseq area (rseq::IdBound::kWideMmCid), one load fewer.
inline bool TryAllocCid(uintptr_t stack_offset, void** p) {
  return rseq::PopUnchecked<rseq::IdKind::kRaw, rseq::IdBound::kWideMmCid>(
      g_slabs, stack_offset, p);
}
inline bool TryFreeCid(uintptr_t stack_offset, void* p) {
  return rseq::PushUnchecked<rseq::IdKind::kRaw, rseq::IdBound::kWideMmCid>(
      g_slabs, stack_offset, p);
}

// The inline fast paths' sections with node-qualified IDs (cid mode on
// several nodes): rseq::PopQualifiedOnce, bounds checked and without a
// restart loop.  The push fails unless the thread runs on `node`, the
// object's node.
inline bool TryAllocQualified(uintptr_t stack_offset, void** p) {
  return rseq::PopQualifiedOnce(g_slabs, stack_offset, p);
}
inline bool TryFreeQualified(uintptr_t stack_offset, void* p, int node) {
  return rseq::PushQualifiedOnce(g_slabs, stack_offset, p, node);
}

// None mode's fast paths: the calling thread's own soft ID under the owner
// protocol (rseq::SoftOwnerPop / Push).  False on any failure.
inline bool TryAllocSoft(uint32_t stack_offset, void** p) {
  return rseq::SoftOwnerPop(g_slabs, stack_offset, p);
}
inline bool TryFreeSoft(uint32_t stack_offset, void* p) {
  return rseq::SoftOwnerPush(g_slabs, stack_offset, p);
}

// Before any allocation: also registers each class's stack offset as the
// payload of its span tags (central::SetTagPayloads), so that free() finds
// the stack from the tag: the offset of class c is TagPayload(tag).
// `caller_statics` (`bytes` long) is what the caller's fast paths load on
// every operation besides the front end's own (the API layer's g_state):
// slabs are placed around it (front_end.cc, "Slab placement").
void Init(const os::Config* config, const void* caller_statics, size_t bytes);

// Slow paths.  AllocSlow refills the current ID's cache from the central
// list (the caller already tried the cache); it returns nullptr with errno
// ENOMEM when the heap cannot grow.  FreeSlow handles a full cache; `node`
// is the object's node, which the caller found to be the current one.
void* AllocSlow(int cls);
void FreeSlow(int cls, void* p, int node);
// An object of another node: queued in the slab's remote stack, sent home
// in batches.
void FreeRemote(void* p);

// Drains every slab into the central lists (malloc_trim).
void DrainAll();
// Who runs the idle scan (MaybeDrainIdle below): the slow paths (at
// start-up and in a fork child), or the background thread
// (CIDMALLOC_BACKGROUND_THREAD, api/background.h), whose tick then calls it
// so that no malloc or free pays for a scan.  The slabs' own period sweeps
// stay on their slow paths either way.
enum class IdleScanner : uint8_t { kSlowPaths, kBackgroundThread };
void SetIdleScanner(IdleScanner who);
// A large block's slow path (the page heap's allocation or free), which
// counts no slab event: every 16th of a thread's runs the idle scan if the
// slow paths run it and it is due, so that a program whose busy threads
// only take large blocks still drains its parked threads' caches.  Not
// every one: reading the clock at each made a 512 KiB pair (parked run,
// 20 ns) 1.5x as slow.  With no allocator lock held.
extern __thread uint32_t t_large_slow_paths
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
void ScanAfterLargeSlowPaths();
inline void NoteLargeSlowPath() {
  if (CIDMALLOC_UNLIKELY((++t_large_slow_paths & 15) == 0)) {
    ScanAfterLargeSlowPaths();
  }
}
// The idle scan (see "Idle slabs" above) if one is due at `now`
// (os::MonotonicMs): called by every slow-path event.  Returns the number
// of slabs it drained.
uint32_t MaybeDrainIdle(uint64_t now);
// rseq's soft-ID exit callback: the exiting thread's caches go back.
void OnSoftIdExit(uint32_t id);

// Walks every slab's stacks and aborts with a message unless each is a
// well-formed chain (counts one less down every link, 0 at the bottom) of
// at most its maximum capacity of objects of its class (and, in a
// node-qualified ID's slab, of its node), each at an object start, and the
// run stack's of marked live page runs of their recorded length and node
// (run_cache.h).  Only while no other thread allocates or frees: the stacks
// are read outside any critical section (tests, debugging).
void CheckInvariants();

void ForkPrepare();
void ForkParent();
void ForkChild();

struct Stats {
  uint32_t slabs;          // Slabs allocated (IDs that ever missed).
  uint32_t ids_seen;       // Distinct cids (cid mode; a node-qualified
                           // ID counts as its cid), cpus (cpu mode) or
                           // soft IDs (none mode) among those IDs.
  uint32_t max_id;         // Highest ID with a slab.
  uint64_t slab_bytes;     // Pages of those slabs ever written: headers,
                           // the remote stacks, and the stacks of classes
                           // ever used.
  uint64_t cached_bytes;   // Bytes of objects and page runs sitting in
                           // the caches.
  uint64_t idle_drains;    // Slabs drained because they were idle.
};
void GetStats(Stats* out);
// Objects of class `cls` in every slab's stack (0 for a class out of
// range).
uint64_t CachedObjects(int cls);

}  // namespace cidmalloc::front_end

#endif  // CIDMALLOC_ALLOCATOR_FRONT_END_FRONT_END_H_
