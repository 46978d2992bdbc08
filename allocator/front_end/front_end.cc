#include "allocator/front_end/front_end.h"

#include <errno.h>

#include "allocator/central/central_list.h"
#include "allocator/front_end/run_cache.h"
#include "allocator/front_end/slab_store.h"
#include "allocator/os/check.h"
#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::front_end {

void* g_slabs[kSlabTableIds];

namespace internal {

const os::Config* g_config = nullptr;
constinit os::SpinLock g_lock;
void* g_store[kMaxIds];
uint64_t g_idle_drains = 0;
uint32_t g_num_slabs = 0;
uint32_t g_max_id = 0;
std::atomic<IdleScanner> g_idle_scanner{IdleScanner::kSlowPaths};

}  // namespace internal

namespace {

using central::Class;
using central::kNumClasses;
using namespace internal;  // NOLINT: this file is the store's other half.


// The node of every object in the slab of `id`, or -1 where it follows
// the threads (raw cids, soft IDs).
int FixedNode(uint32_t id) {
  const int node = rseq::NodeOfId(id);
  return node < os::NumNodes() ? node : 0;
}

// Slab placement: a slab starts where none of its class stacks (nor the
// remote stack) shares its page offset, address bits 0-11, with a static
// that the fast paths load on every operation: the rseq sections' own
// (rseq::SectionStatics), the API layer's (Init) and the ID's g_slabs
// entry.  A load that follows a store to an address with the same page
// offset waits for that store ("4K aliasing"): a build whose g_process fell
// on class 1's page offset in the first slab took 3.67 ns a 16-byte pair
// against 3.20 (docs/benchmarks/tuning_log.md).  Page-aligning those
// statics instead put them in the cache set of every span's first object,
// and random-size pairs took 1.2-2.2x as long.
struct HotRange {
  uintptr_t at;
  size_t bytes;
};
HotRange g_caller_statics{0, 0};  // Set by Init, before any slab.

// The offset in its page at which the slab of `id` starts (a multiple of
// 64): the lowest that leaves every hot static clear of the stacks, else 0.
uint32_t SlabPhase(uint32_t id) {
  constexpr uint32_t kPage = 4096;
  constexpr uint32_t kStacksBytes =
      kLayout.run_offset + sizeof(rseq::Stack) - kHeaderBytes;
  const HotRange hot[] = {
      {reinterpret_cast<uintptr_t>(rseq::SectionStatics()),
       rseq::kSectionStaticsBytes},
      g_caller_statics,
      {reinterpret_cast<uintptr_t>(&g_slabs[id]), sizeof(void*)},
  };
  for (uint32_t phase = 0; phase < kPage; phase += 64) {
    const uint32_t first = (phase + kHeaderBytes) % kPage;
    bool clear = true;
    for (const HotRange& h : hot) {
      // Where h starts, from the stacks' first byte, modulo the page: in
      // the stacks, or starting before them and reaching in.
      const uint32_t d = static_cast<uint32_t>(h.at - first) % kPage;
      if (h.bytes != 0 && (d < kStacksBytes || d + h.bytes > kPage)) {
        clear = false;
      }
    }
    if (clear) return phase;
  }
  return 0;
}

// The slab of `id`, creating it if the ID never had one.  nullptr if it is
// being drained (the caller goes straight to the central lists) or memory
// ran out.
void* EnsureSlab(uint32_t id) {
  CIDMALLOC_CHECK(id < kMaxIds, "ID beyond the slab table");
  os::SpinLockHolder h(&g_lock);
  if (g_store[id] != nullptr) return Published(id);
  void* slab = page_heap::MetaAlloc(kLayout.bytes, 4096, SlabPhase(id));
  if (slab == nullptr) return nullptr;
  SlabHeader* hdr = HeaderOf(slab);
  hdr->id = id;
  const int fixed = FixedNode(id);
  hdr->node.store(fixed >= 0 ? fixed : os::CurrentNode(),
                  std::memory_order_relaxed);
  // The class stacks start with capacity 0 (the zeroed memory): the first
  // miss of a class grants its first batch (TryGrow), so a slab's pages are
  // touched only for the classes its threads use.
  StackOf(slab, kLayout.remote_offset)->capacity = kRemoteCapacity;
  StackOf(slab, kLayout.run_offset)->capacity = kRunCapacity;
  // Relaxed: SlabOf only asks whether the ID has a slab; the slab's
  // contents are published by the release store below.
  __atomic_store_n(&g_store[id], slab, __ATOMIC_RELAXED);
  ++g_num_slabs;
  if (id > g_max_id) g_max_id = id;
  // Release: the initialised slab is visible before the critical sections
  // can find it (they load g_slabs[id] and then the stack).
  __atomic_store_n(&g_slabs[id], slab, __ATOMIC_RELEASE);
  return slab;
}

// The slab of `id`, or nullptr (see EnsureSlab).
void* SlabOf(uint32_t id) {
  void* slab = Published(id);
  if (slab != nullptr) return slab;
  // A slab that exists but is unpublished is being drained: no waiting for
  // g_lock, which the drain holds (and which this thread may hold itself,
  // when a signal handler interrupted its drain).  g_store entries are
  // written once and never cleared.
  if (__atomic_load_n(&g_store[id], __ATOMIC_RELAXED) != nullptr) {
    return nullptr;
  }
  return EnsureSlab(id);
}

// How far TryGrow may grow a class.
enum class Growth : uint8_t {
  kAny,         // to a batch, or by a batch beyond it (dense misses);
  kBatchOnly,   // to a batch only (dense full stacks of a class not
                // refilled since the last one: frees alone);
  kSparseOnly,  // to SparseBatch only (sparse misses).
};

// Whether the thread is still on the ID of the slab whose header its slow
// path read.  AdjustCapacity acts on the ID the thread is on when its
// section runs, but TryGrow and ShrinkClass read the capacity, and charge
// or credit the budget (extra_bytes), of the slab the slow path started
// with; a thread that moved in between (the idle scan's membarrier, locks
// and yields run in that window) would grow another ID's stack past its
// budget, or shrink and flush it on the first ID's account.  The check
// leaves a window of a few instructions, where a migration skews the
// budget by at most one batch.
bool OnSlabsId(const SlabHeader* hdr) { return rseq::CurrentId() == hdr->id; }

// Grows the current ID's capacity for `cls`: to SparseBatch, or with
// kAny to a batch, free of budget, if it has less; beyond a batch, with
// kAny, by a batch if CIDMALLOC_CACHE_BYTES allows.  Returns true if it
// grew.
bool TryGrow(void* slab, int cls, Growth growth) {
  const central::SizeClassInfo& c = Class(cls);
  const rseq::Stack* s = StackOf(slab, kLayout.offset[cls]);
  const uint32_t before = __atomic_load_n(&s->capacity, __ATOMIC_RELAXED);
  if (before >= c.max_capacity) return false;
  SlabHeader* hdr = HeaderOf(slab);
  if (!OnSlabsId(hdr)) return false;
  const uint32_t start =
      growth == Growth::kSparseOnly ? SparseBatch(cls) : c.batch;
  if (before < start) {
    hdr->used_classes[cls / 64].fetch_or(uint64_t{1} << (cls % 64),
                                         std::memory_order_relaxed);
    const int64_t first = rseq::AdjustCapacity(
        g_slabs, kLayout.offset[cls], static_cast<int32_t>(start - before),
        c.max_capacity);
    return first > static_cast<int64_t>(before);
  }
  if (growth != Growth::kAny) return false;
  const int64_t grant = int64_t{c.batch} * c.size;
  // A hint that races can push below 0 (a shrink whose capacity was read
  // before an idle drain): reset to 0, so that the budget still bounds it.
  int64_t extra = hdr->extra_bytes.load(std::memory_order_relaxed);
  while (extra < 0 && !hdr->extra_bytes.compare_exchange_weak(
                          extra, 0, std::memory_order_relaxed)) {
  }
  if ((extra > 0 ? extra : 0) + grant >
      static_cast<int64_t>(g_config->cache_bytes)) {
    return false;
  }
  const int64_t after = rseq::AdjustCapacity(g_slabs, kLayout.offset[cls],
                                             c.batch, c.max_capacity);
  if (after <= static_cast<int64_t>(before)) return false;
  hdr->extra_bytes.fetch_add((after - before) * c.size,
                             std::memory_order_relaxed);
  return true;
}

// The refilled bits (SlabHeader::refilled): set by a refill of `cls`,
// taken (tested and cleared) by its next full stack.  Relaxed hints: a race
// only grows a stack one batch more or less.
void NoteRefill(SlabHeader* hdr, int cls) {
  std::atomic<uint64_t>& word = hdr->refilled[cls / 64];
  const uint64_t bit = uint64_t{1} << (cls % 64);
  if ((word.load(std::memory_order_relaxed) & bit) == 0) {
    word.fetch_or(bit, std::memory_order_relaxed);
  }
}
bool TakeRefill(SlabHeader* hdr, int cls) {
  std::atomic<uint64_t>& word = hdr->refilled[cls / 64];
  const uint64_t bit = uint64_t{1} << (cls % 64);
  if ((word.load(std::memory_order_relaxed) & bit) == 0) return false;
  word.fetch_and(~bit, std::memory_order_relaxed);
  return true;
}

// Empties the current ID's stack of `cls` down to `keep` objects.
void FlushClass(int cls, uint32_t keep,
                central::Via via = central::Via::kTransferCache) {
  void* buf[256];
  const uint32_t off = kLayout.offset[cls];
  for (;;) {
    void* slab = Published(rseq::CurrentId());
    if (slab == nullptr) return;
    const uint32_t count = StackOf(slab, off)->Count();
    if (count <= keep) return;
    const uint32_t want = count - keep < 256 ? count - keep : 256;
    const uint32_t n = rseq::PopBatch(g_slabs, off, buf, want);
    if (n == 0) return;
    central::InsertBatch(cls, buf, n, via);
  }
}

// Empties the current ID's stacks (its objects belong to another node now).
void FlushCurrent() {
  for (int c = 1; c < kNumClasses; ++c) FlushClass(c, 0);
  void* buf[kRemoteCapacity];
  const uint32_t n =
      rseq::PopBatch(g_slabs, kLayout.remote_offset, buf, kRemoteCapacity);
  InsertMixed(buf, n);
}

// Whether a class's misses on a slab are dense (front_end.h, "Capacity").
enum class Demand : uint8_t { kSparse, kDense };

// A miss of class `cls` on `slab` (an empty stack on malloc, a full one
// on free), for both kinds of sweep and for growth.  Hints: a load and a
// store each, no read-modify-write, as a count lost to a race only delays
// a shrink and a stamp or streak lost to one at most a batch of growth;
// the counts saturate rather than wrap to 0.  Intervals are taken mod
// 2^16 units: misses a multiple of the wrap (0.3-1 s) apart look close,
// which takes three such coincidences in a row to matter.
Demand NoteMiss(SlabHeader* hdr, int cls) {
  const auto bump = [](std::atomic<uint8_t>& m) {
    const uint8_t v = m.load(std::memory_order_relaxed);
    if (v != UINT8_MAX) m.store(v + 1, std::memory_order_relaxed);
  };
  bump(hdr->period_misses[cls]);
  const auto now =
      static_cast<uint16_t>(os::CycleCount() >> kMissStampShift);
  const uint16_t last = hdr->last_miss[cls].load(std::memory_order_relaxed);
  hdr->last_miss[cls].store(now, std::memory_order_relaxed);
  if (static_cast<uint16_t>(now - last) >= kGrowWindow) {
    hdr->dense_streak[cls].store(0, std::memory_order_relaxed);
    return Demand::kSparse;
  }
  const uint8_t streak =
      hdr->dense_streak[cls].load(std::memory_order_relaxed);
  if (streak < kDenseStreak) {
    hdr->dense_streak[cls].store(streak + 1, std::memory_order_relaxed);
    return Demand::kSparse;
  }
  bump(hdr->dense_misses[cls]);
  return Demand::kDense;
}

// Shrinks the current ID's capacity for `cls` from `cap` to `to` and
// flushes the stack down to it; the capacity beyond the class's first batch
// goes back to the slab's budget.
void ShrinkClass(SlabHeader* hdr, int cls, uint32_t cap, uint32_t to,
                 central::Via via) {
  const central::SizeClassInfo& c = Class(cls);
  if (!OnSlabsId(hdr)) return;
  const int64_t now = rseq::AdjustCapacity(
      g_slabs, kLayout.offset[cls],
      static_cast<int32_t>(to) - static_cast<int32_t>(cap), c.max_capacity);
  if (now < 0) return;  // The thread's ID has no slab now.
  const auto beyond_batch = [&c](int64_t capacity) {
    return capacity > c.batch ? capacity - c.batch : 0;
  };
  const int64_t shrunk = (beyond_batch(cap) - beyond_batch(now)) * c.size;
  if (shrunk > 0) hdr->extra_bytes.fetch_sub(shrunk, std::memory_order_relaxed);
  FlushClass(cls, static_cast<uint32_t>(now), via);
}

// The two sweeps of the current ID's slab.
enum class Sweep : uint8_t {
  kEvents,  // Every kSweepEvents slow-path events: classes that had no
            // dense miss since the last such sweep lose a batch of
            // capacity, down to SparseBatch.
  kPeriod,  // At most once per CIDMALLOC_CACHE_IDLE_MS: classes that did
            // not miss for a whole period are emptied (capacity 0), so
            // that a busy ID does not keep the objects of classes it
            // stopped using, and their spans, for good.
};

void SweepSlab(void* slab, Sweep kind) {
  SlabHeader* hdr = HeaderOf(slab);
  for (int c = 1; c < kNumClasses; ++c) {
    std::atomic<uint8_t>& missed =
        kind == Sweep::kEvents ? hdr->dense_misses[c] : hdr->period_misses[c];
    if (missed.exchange(0, std::memory_order_relaxed) != 0) continue;
    const rseq::Stack* s = StackOf(slab, kLayout.offset[c]);
    const uint32_t cap = __atomic_load_n(&s->capacity, __ATOMIC_RELAXED);
    const uint32_t batch = Class(c).batch, sparse = SparseBatch(c);
    if (kind == Sweep::kEvents && cap > sparse) {
      // A batch less, but never below SparseBatch: a capacity clamped at
      // max_capacity is not a multiple of the batch.
      ShrinkClass(hdr, c, cap, cap >= batch + sparse ? cap - batch : sparse,
                  central::Via::kTransferCache);
    } else if (kind == Sweep::kPeriod && cap != 0) {
      ShrinkClass(hdr, c, cap, 0, central::Via::kSpans);
    }
  }
  if (kind == Sweep::kPeriod) ReturnRuns();  // run_cache.h
}

// The idle scan at `now`, if the slow paths run it (not the background
// thread) and it is due.
void ScanIfSlowPathsDo(uint64_t now) {
  if (g_idle_scanner.load(std::memory_order_relaxed) ==
      IdleScanner::kSlowPaths) {
    MaybeDrainIdle(now);
  }
}

// Counts a slow-path event of `slab` and runs what is due: the idle scan of
// every slab, and this slab's sweeps.
void MaybeSweep(void* slab) {
  static_assert((kSweepEvents & (kSweepEvents - 1)) == 0,
                "events wraps around at a multiple of kSweepEvents");
  SlabHeader* hdr = HeaderOf(slab);
  const uint32_t events = hdr->events.load(std::memory_order_relaxed) + 1;
  hdr->events.store(events, std::memory_order_relaxed);
  if (const uint32_t period = g_config->cache_idle_ms) {
    const uint64_t now = os::MonotonicMs();
    ScanIfSlowPathsDo(now);
    if (ClaimPeriodEnd(&hdr->next_period_sweep_ms, now, period)) {
      SweepSlab(slab, Sweep::kPeriod);
    }
  }
  if (events % kSweepEvents == 0) SweepSlab(slab, Sweep::kEvents);
}

}  // namespace

namespace internal {

// Sends objects of mixed classes home, grouped by class: each object's
// class is looked up once, then one pass per class present.
void InsertMixed(void** objs, uint32_t n, central::Via via) {
  constexpr uint8_t kSent = 0xff;  // Not a class (kNumClasses < 0xff).
  static_assert(kNumClasses < kSent);
  void* group[kRemoteCapacity];
  uint8_t cls_of[kRemoteCapacity];
  while (n > 0) {
    const uint32_t m = n < kRemoteCapacity ? n : kRemoteCapacity;
    for (uint32_t i = 0; i < m; ++i) {
      cls_of[i] = static_cast<uint8_t>(
          central::ClassOfAddress(reinterpret_cast<uintptr_t>(objs[i])));
    }
    uint32_t left = m;
    uint32_t first = 0;  // Every object before it is sent.
    while (left > 0) {
      // The class of the first object not sent yet, and all of that class.
      while (cls_of[first] == kSent) ++first;
      const uint8_t cls = cls_of[first];
      uint32_t g = 0;
      for (uint32_t i = first; i < m; ++i) {
        if (cls_of[i] != cls) continue;
        group[g++] = objs[i];
        cls_of[i] = kSent;
      }
      central::InsertBatch(cls, group, g, via);
      left -= g;
    }
    objs += m;
    n -= m;
  }
}

void* CurrentSlab() { return SlabOf(rseq::CurrentId()); }

}  // namespace internal

void Init(const os::Config* config, const void* caller_statics,
          size_t bytes) {
  g_config = config;
  g_caller_statics = {reinterpret_cast<uintptr_t>(caller_statics), bytes};
  InitRuns();
  // free() finds a class's stack from the span tag (TryFreeAt).
  central::SetTagPayloads(kLayout.offset);
}

void* AllocSlow(int cls) {
  const uint32_t off = kLayout.offset[cls];
  const central::SizeClassInfo& c = Class(cls);
  const uint32_t id = rseq::CurrentId();
  void* slab = SlabOf(id);
  if (slab == nullptr) {  // Being drained, or no memory for a slab.
    void* obj;
    return central::RemoveBatch(os::CurrentNode(), cls, &obj, 1) == 1
               ? obj
               : nullptr;
  }
  SlabHeader* hdr = HeaderOf(slab);
  // Refill from the slab's node.  Where that is fixed and the thread moved
  // since reading its ID, the batch push below fails (node-qualified) or
  // the objects are one refill's worth on the neighbouring node (cpu).
  int node = FixedNode(id);
  if (node < 0) {
    node = os::CurrentNode();
    if (hdr->node.load(std::memory_order_relaxed) != node) {
      FlushCurrent();  // Cached objects belong to the node we left.
      hdr->node.store(node, std::memory_order_relaxed);
    }
  }
  const Demand demand = NoteMiss(hdr, cls);
  TryGrow(slab, cls,
          demand == Demand::kDense ? Growth::kAny : Growth::kSparseOnly);
  NoteRefill(hdr, cls);
  void* buf[central::kMaxBatch];
  const uint32_t n = central::RemoveBatch(
      node, cls, buf, demand == Demand::kDense ? c.batch : SparseBatch(cls));
  if (n == 0) return nullptr;  // errno is ENOMEM.
  // buf[0] is returned; the rest go on the stack last first, so that the
  // pops that follow hand them out in buf's order.  A fresh span's objects
  // come in ascending addresses, and a program that walks its objects in
  // allocation order (Python's garbage collector) then walks memory forward,
  // as under a bump allocator: descending runs of a batch made Python's
  // collector 1.8x as slow (docs/benchmarks/tuning_log.md).
  for (uint32_t i = 1, j = n - 1; i < j; ++i, --j) {
    void* t = buf[i];
    buf[i] = buf[j];
    buf[j] = t;
  }
  const uint32_t pushed = rseq::PushBatch(g_slabs, off, buf + 1, n - 1, node);
  if (pushed < n - 1) central::InsertBatch(cls, buf + 1 + pushed, n - 1 - pushed);
  MaybeSweep(slab);
  return buf[0];
}

void FreeSlow(int cls, void* p, int node) {
  const uint32_t off = kLayout.offset[cls];
  for (int attempt = 0; attempt < 3; ++attempt) {
    // The full path: registers the thread's own area, or uses its soft ID.
    if (rseq::Push(g_slabs, off, p, node)) return;
    void* slab = CurrentSlab();
    if (slab == nullptr) break;
    SlabHeader* hdr = HeaderOf(slab);
    const Demand demand = NoteMiss(hdr, cls);
    MaybeSweep(slab);
    // Beyond its first batch, only a class that was also refilled since
    // its last full stack grows, and only when it misses often (see
    // "Capacity" in front_end.h).  The refill is taken either way: this
    // full stack answers it.
    const bool refilled = TakeRefill(hdr, cls);
    const Growth growth = demand == Demand::kSparse ? Growth::kSparseOnly
                          : refilled                ? Growth::kAny
                                                    : Growth::kBatchOnly;
    if (TryGrow(slab, cls, growth)) {
      continue;
    }
    // Full: send a batch home, then retry.
    void* buf[central::kMaxBatch];
    const uint32_t n = rseq::PopBatch(g_slabs, off, buf, Class(cls).batch);
    central::InsertBatch(cls, buf, n);
  }
  central::InsertBatch(cls, &p, 1);
}

void FreeRemote(void* p) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (rseq::Push(g_slabs, kLayout.remote_offset, p)) return;
    if (CurrentSlab() == nullptr) break;
    void* buf[kRemoteCapacity];
    const uint32_t n =
        rseq::PopBatch(g_slabs, kLayout.remote_offset, buf, kRemoteCapacity);
    InsertMixed(buf, n);
  }
  InsertMixed(&p, 1);
}

__thread uint32_t t_large_slow_paths = 0;

void ScanAfterLargeSlowPaths() {
  if (g_config->cache_idle_ms != 0) ScanIfSlowPathsDo(os::MonotonicMs());
}

void SetIdleScanner(IdleScanner who) {
  g_idle_scanner.store(who, std::memory_order_relaxed);
}

void ForkPrepare() { g_lock.Lock(); }
void ForkParent() { g_lock.Unlock(); }
void ForkChild() { g_lock.ResetAfterFork(); }

namespace {
// Whether every object in the class stacks of ID `id`'s slab is of the
// slab's node.  Only a node-qualified rseq ID promises that: its pushes
// check node_id in the section.  A cpu's slab (cpu mode) may take an object
// of the node the thread left, judged local just before a migration (a
// free's push, or a refill's batch); so may a raw cid's (cid mode with
// CIDMALLOC_RSEQ_NODE_IDS=off, or too many (node, cid) pairs) and a soft
// ID's, whose node follows its thread and is flushed only at a refill.
// Such an object is only far: InsertBatch sends every object to its own
// node's list, whichever slab gives it back.
bool NodeIsPromised(uint32_t id) {
  return rseq::CurrentIdKind() == rseq::IdKind::kNodeQualified &&
         rseq::NodeOfId(id) >= 0;
}

// One stack of `slab` (see CheckInvariants): its chain, and each object's
// class (`cls`, or any class for the remote stack, cls 0) and, where
// `node` >= 0, node.
void CheckStack(void* slab, uint32_t offset, int cls, uint32_t max,
                int node) {
  const char* bad =
      StackOf(slab, offset)->CheckHeld(max, [&](void* item) -> const char* {
        const uintptr_t p = reinterpret_cast<uintptr_t>(item);
        const uint32_t tag = page_heap::LookupSpanTag(p);
        const int pc = central::TagClass(tag);
        if (pc == 0 || (cls != 0 && pc != cls)) {
          return "front end: a cached pointer that is no object of the "
                 "stack's class";
        }
        if (!central::IsObjectStart(p, pc)) {
          return "front end: a cached pointer that is no object start";
        }
        if (cls != 0 && node >= 0 && central::TagNode(tag) != node) {
          return "front end: a cached object of another node";
        }
        return nullptr;
      });
  CIDMALLOC_CHECK(bad == nullptr, bad);
}
}  // namespace

void CheckInvariants() {
  os::SpinLockHolder h(&g_lock);
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    void* slab = g_store[id];
    if (slab == nullptr) continue;
    const int node = NodeIsPromised(id)
                         ? HeaderOf(slab)->node.load(std::memory_order_relaxed)
                         : -1;
    for (int c = 1; c < kNumClasses; ++c) {
      CheckStack(slab, kLayout.offset[c], c, Class(c).max_capacity, node);
    }
    CheckStack(slab, kLayout.remote_offset, 0, kRemoteCapacity, -1);
    const char* bad = CheckRunsHeld(slab);
    CIDMALLOC_CHECK(bad == nullptr, bad);
  }
}

}  // namespace cidmalloc::front_end
