// rseq/rseq.h: the public interface of the rseq layer.
//
// This layer knows nothing about memory allocation.  It offers:
//   - the mode (cid, cpu or none) and fast reads of the current cpu, node
//     and cid;
//   - restartable per-ID operations: a counter add and push/pop (single and
//     batch) on a bounded stack, indexed by the current ID;
//   - a fence that restarts every in-flight critical section, and
//     QuiesceId() for touching another ID's data.
//
// IDs.  Per-ID tables are indexed by an ID below NumIds():
//   [0, NumRseqIds())          the mm_cid (cid mode) or cpu (cpu mode); in
//                              cid mode on a multi-node machine the
//                              node-qualified node_id * stride + mm_cid
//                              (IdKind in state.h);
//   [NumRseqIds(), NumIds())   soft IDs: threads without usable rseq.
//
// Nodes.  Push and PushBatch take the node the items belong to.  With
// node-qualified IDs the section fails unless the thread runs on that node
// (kAnyNode: the node it ran on just before), so an ID's stacks only ever
// hold items of the ID's node.  With raw IDs the node is not checked.
//
// Per-ID stacks.  `table` has NumIds() pointers to per-ID regions, nullptr
// for an ID whose region does not exist yet; the stack of an ID lives at
// byte `offset` of its region.  Pop fails when the stack is empty or the
// region absent; Push fails when the stack is full or the region absent.
// A stack is linked through its items (Stack, below): an item is a non-null,
// 8-byte-aligned address below 2^48 of at least 8 writable bytes, and while
// it is on a stack the stack owns its first word.  Nothing else may write
// that word meanwhile; Pop hands the word back with the item.
//
// Touching another ID's stack (draining it): store nullptr into table[id]
// (a relaxed atomic store), call QuiesceId(id), work on the region, then
// store the pointer back (release: pairs with the critical sections' load
// of table[id], on which their loads of the stack depend).  After
// QuiesceId no operation on `id` is in flight and every new one sees
// nullptr.
#ifndef CIDMALLOC_RSEQ_RSEQ_H_
#define CIDMALLOC_RSEQ_RSEQ_H_

#include <stddef.h>
#include <stdint.h>

#include "rseq/abi.h"
#include "rseq/area.h"
#include "rseq/cpu_node.h"
#include "rseq/inject.h"
#include "rseq/soft_ids.h"
#include "rseq/state.h"
#if CIDMALLOC_RSEQ_SECTIONS
#include "rseq/cs_ops.h"
#else
#include "rseq/cs_none.h"  // No sections yet: the soft-ID paths serve.
#endif

namespace cidmalloc::rseq {

// A bounded stack of items, linked through them (rseq/abi.h has the layout
// the sections use).  `top` packs the top item with the count:
// item | count << 48, 0 when empty; each item's first word holds the top
// word below it (its link), so a pop is one load of the top, one of its
// link, and one store, and the count of every item below stays right.
// `capacity` bounds the count; the six zero bytes before it make the u64 at
// offset 8 equal capacity << 48, which a push compares with the top word.
// A stack needs its own 16 bytes, whatever its capacity.
//
// Why linked: a pop from an array (count, then slots[count - 1]) gets its
// item from a load whose address waits for the count, which the last push
// to the same stack may still be storing.  Pairs of random sizes paid for
// it, and so did batches (docs/benchmarks/tuning_log.md: the array took
// 1.19x the time of this stack on random-size pairs and 1.15-1.22x on
// batches; fixed-size pairs the same).
struct Stack {
  static constexpr uint64_t kItemMask = CIDMALLOC_STACK_ITEM_MASK;
  static constexpr int kCountShift = CIDMALLOC_STACK_COUNT_SHIFT;
  static constexpr uint32_t kMaxCapacity = CIDMALLOC_STACK_MAX_CAPACITY;

  // `top` and `capacity` are written only by the stack's holder: its ID's
  // critical sections, the soft ID's lock holder or owner, a drainer after
  // QuiesceId or Fence, or the region's creator before it is published.
  // Anyone else reads them with relaxed loads (Count(); the allocator's
  // statistics and idle scan) and gets a recent value.
  uint64_t top;
  uint8_t reserved[6];  // Zero.
  uint16_t capacity;

  static uint64_t TopWord(void* item, uint64_t count) {
    return reinterpret_cast<uintptr_t>(item) | count << kCountShift;
  }
  static void* ItemOf(uint64_t word) {
    return reinterpret_cast<void*>(word & kItemMask);
  }
  static uint32_t CountOf(uint64_t word) {
    return static_cast<uint32_t>(word >> kCountShift);
  }
  // The link word of an item on a stack: the top word below it.
  static uint64_t& Link(void* item) { return *static_cast<uint64_t*>(item); }

  // The count, read with a relaxed load: exact for the stack's holder,
  // a recent value for anyone else (statistics, monitors).
  uint32_t Count() const {
    return CountOf(__atomic_load_n(&top, __ATOMIC_RELAXED));
  }
  // Pop and push for a caller that holds the stack: nothing else runs an
  // operation on it meanwhile (a drainer after QuiesceId, a soft ID's
  // holder).  The same results as the critical sections.
  bool PopHeld(void** item) {
    void* p = ItemOf(top);
    if (p == nullptr) return false;
    top = Link(p);
    *item = p;
    return true;
  }
  bool PushHeld(void* item) {
    const uint32_t n = CountOf(top);
    if (n >= capacity) return false;
    Link(item) = top;
    top = TopWord(item, n + 1);
    return true;
  }
  // Pops up to `want` items into out[], top first; returns how many.
  uint32_t PopHeldUpTo(void** out, uint32_t want) {
    uint32_t n = 0;
    while (n < want && PopHeld(&out[n])) ++n;
    return n;
  }
  // Calls f(item) for each item from the top down, for a holder or on a
  // stack nobody changes meanwhile (tests, statistics of a quiet process).
  template <typename F>
  void ForEachHeld(F f) const {
    for (void* p = ItemOf(top); p != nullptr; p = ItemOf(Link(p))) f(p);
  }
  // nullptr if the stack is a well-formed chain of at most `max` items:
  // each link's count one less than the word above it, 0 below the bottom
  // item, and check(item) nullptr for every item (called before the item's
  // link is read, so it can refuse a pointer that must not be followed).
  // Else what is wrong.  For a holder or a stack nobody changes meanwhile.
  template <typename F>
  const char* CheckHeld(uint32_t max, F check) const {
    uint64_t w = top;
    if (CountOf(w) > max) return "stack: more items than its capacity";
    for (uint32_t k = CountOf(w); k > 0; --k) {
      if (CountOf(w) != k) return "stack: a link's count is not one less";
      void* p = ItemOf(w);
      if (const char* bad = check(p)) return bad;
      w = Link(p);
    }
    return w == 0 ? nullptr : "stack: the bottom item's link is not 0";
  }
};
static_assert(offsetof(Stack, top) == CIDMALLOC_STACK_OFF_TOP);
static_assert(offsetof(Stack, capacity) == CIDMALLOC_STACK_OFF_CAPACITY);
static_assert(sizeof(Stack) == CIDMALLOC_STACK_BYTES);
static_assert(CIDMALLOC_STACK_OFF_LIMIT + 6 == CIDMALLOC_STACK_OFF_CAPACITY,
              "the u64 at the limit's offset is capacity << 48");

// ---- Mode and IDs --------------------------------------------------------
inline Mode CurrentMode() {
  EnsureInit();
  return g_process.mode;
}
inline uint32_t NumRseqIds() {
  EnsureInit();
  return g_process.num_rseq_ids;
}
inline uint32_t NumIds() {
  EnsureInit();
  return g_process.num_ids;
}
inline const ProcessState& Process() {
  EnsureInit();
  return g_process;
}
// The mode without the initialisation check (and so without a call on the
// caller's path): only for a caller that knows EnsureInit() has returned.
inline Mode ModeAfterInit() { return g_process.mode; }
// The process-wide words every critical section loads (the rseq area's
// offset, and the ID field's next to it), for a caller that lays out the
// memory the sections store to, so that none of it shares a page offset
// (address bits 0-11) with them: a load that follows a store to an
// address with the same page offset waits for the store ("4K aliasing").
inline const void* SectionStatics() { return &g_process.area_offset; }
inline constexpr size_t kSectionStaticsBytes = 2 * sizeof(intptr_t);
static_assert(offsetof(ProcessState, id_offset) ==
              offsetof(ProcessState, area_offset) + sizeof(intptr_t));

// The ID the calling thread's operations use right now.
uint32_t CurrentId();
// A hint of it, to spread a caller's shared structures over its threads
// (not for critical sections): the raw ID field (mm_cid in cid mode, else
// cpu_id, also in none mode) read inline where the thread has a registered
// rseq area, else CurrentId() (a soft ID).  Two calls fewer than
// CurrentId() where it counts (the page heap's choice of arena: 6 % of a
// 72 KiB malloc + free).
inline uint32_t CurrentIdHint() {
  const int32_t id = LoadTp32OrNegative(g_process.id_offset);
  return id >= 0 ? static_cast<uint32_t>(id) : CurrentId();
}

// ---- Fast reads ------------------------------------------------------------
// The current cpu: an inline load of the rseq area (the seed's 0.8 ns read),
// falling back to getcpu(2) through the vDSO without rseq.
int CurrentCpuSlow();
inline int CurrentCpu() {
  const int32_t cpu = AreaCpuId();
  if (CIDMALLOC_LIKELY(cpu >= 0)) return cpu;
  return CurrentCpuSlow();
}

// The NUMA node of the cpu the thread runs on: node_id (Linux 6.3+), else
// the cpu->node table built from the topology.
inline int CurrentNode() {
  if (CIDMALLOC_LIKELY(g_process.has_node_id) && AreaCpuId() >= 0) {
    return AreaField(CIDMALLOC_RSEQ_OFF_NODE_ID);
  }
  return NodeOfCpu(CurrentCpu());
}

// mm_cid of the calling thread, or -1 where the kernel does not provide it.
int CurrentCid();

inline IdKind CurrentIdKind() {
  EnsureInit();
  return g_process.id_kind;
}

// The node whose threads use rseq ID `id`: fixed for a cpu and for a
// node-qualified ID; -1 for a raw cid (any node) and for soft IDs.
int NodeOfId(uint32_t id);

// For Push and PushBatch: items of no particular node.
inline constexpr int kAnyNode = -1;

// getcpu(2) in user space: a consistent (cpu, node) pair.  Returns 0, or -1
// with errno set if even the system call fails.
int GetCpuSlow(unsigned* cpu, unsigned* node);
inline int GetCpu(unsigned* cpu, unsigned* node) {
  if (cs::kHaveSections && CIDMALLOC_LIKELY(g_process.has_node_id)) {
    int32_t c, n;
    cs::CpuNode(&c, &n);
    if (CIDMALLOC_LIKELY(c >= 0)) {
      *cpu = static_cast<unsigned>(c);
      *node = static_cast<unsigned>(n);
      return 0;
    }
  }
  return GetCpuSlow(cpu, node);
}

// ---- Restartable per-ID operations -----------------------------------------
// Fast path budget (x86-64, GCC 12 -O2): from function entry (the ID-kind
// check) through the commit, Pop is 21 instructions, Push 23, CounterAdd 13,
// and the allocator's wide sections (PopUnchecked / PushUnchecked, below)
// 17 and 19 (each one the count of aborts in a row, rseq/cs_ops.h), with
// no lock, xchg or system call;
// tests/rseq_cs/fast_path_budget_test.sh checks it.  The inline path is the
// raw-ID section; node-qualified IDs, soft IDs and failures go to the slow
// paths, out of line and reached by a tail call.
void CounterAddSlow(uintptr_t base, int64_t delta);
void* PopSlow(void* const* table, uintptr_t offset);
bool PushSlow(void* const* table, uintptr_t offset, void* item, int node);
uint32_t PopBatchSlow(void* const* table, uintptr_t offset, void** out,
                      uint32_t want);
uint32_t PushBatchSlow(void* const* table, uintptr_t offset, void* const* in,
                       uint32_t want, int node);

// counter(id) += delta for the current ID, where counter(id) is the int64 at
// base + (id << CIDMALLOC_COUNTER_STRIDE_SHIFT); the counter array must
// cover NumIds() IDs.  Always succeeds.
inline void CounterAdd(uintptr_t base, int64_t delta) {
  if (CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw) &&
      CIDMALLOC_LIKELY(cs::CounterAdd(base, delta))) {
    return;
  }
  return CounterAddSlow(base, delta);
}

inline void* Pop(void* const* table, uintptr_t offset) {
  void* item;
  if (CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw) &&
      CIDMALLOC_LIKELY(cs::Pop(table, offset, &item))) {
    return item;
  }
  return PopSlow(table, offset);
}

inline bool Push(void* const* table, uintptr_t offset, void* item,
                 int node = kAnyNode) {
  if (CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw) &&
      CIDMALLOC_LIKELY(cs::Push(table, offset, item))) {
    return true;
  }
  return PushSlow(table, offset, item, node);
}

// Entries of a table for PopUnchecked / PushUnchecked<IdKind::kRaw>: one
// per 16-bit value.
inline constexpr uint32_t kWideTableIds = 1u << 16;
static_assert(kMaxRseqIds + kMaxSoftIds < kWideTableIds - 2,
              "0xfffe and 0xffff (cpu_id -2 and -1, mm_cid ~0) are no IDs");

// True when every raw ID the kernel can report is below NumRseqIds(): the
// possible cpus were not clamped to kMaxRseqIds.  PopUnchecked and
// PushUnchecked<IdKind::kRaw> are correct only then (otherwise a raw ID
// could land on a soft ID's entry).
inline bool RawIdsBelowNumRseqIds() {
  return g_process.id_kind == IdKind::kRaw &&
         g_process.possible_cpus <= g_process.num_rseq_ids;
}

// True when the wide mm_cid sections (IdBound::kWideMmCid) are correct too:
// RawIdsBelowNumRseqIds() in cid mode, whose ID field is mm_cid.
inline bool RawIdIsMmCid() {
  return RawIdsBelowNumRseqIds() && g_process.mode == Mode::kCid;
}

// The raw-ID critical sections alone, without even the ID-kind check: only
// for a caller that knows the kind is kRaw (the allocator keeps that in one
// flag with its other fast-path conditions) and RawIdsBelowNumRseqIds().
// They read the ID's low 16 bits and check no bound: `table` must have
// kWideTableIds entries, null at every index that is no rseq ID in use
// (an unregistered area reads as 0xffff, and fails at its null entry).
// False on any failure.
// PopUnchecked<IdKind::kNodeQualified> and PushUnchecked<...> are the
// node-qualified sections, for a caller that knows the kind is that; they
// check their bounds, and any table of NumIds() entries will do.
// B = IdBound::kChecked gives the raw sections with the bound check
// (TryPop / TryPush below); B = IdBound::kWideMmCid the wide sections that
// read mm_cid at its place in the area, for a caller that also knows
// RawIdIsMmCid().
template <IdKind K = IdKind::kRaw, IdBound B = IdBound::kWideTable>
inline bool PopUnchecked(void* const* table, uintptr_t offset, void** item) {
  return cs::Pop<K, B>(table, offset, item);
}

template <IdKind K = IdKind::kRaw, IdBound B = IdBound::kWideTable>
inline bool PushUnchecked(void* const* table, uintptr_t offset, void* item,
                          int node = 0) {
  return cs::Push<K, B>(table, offset, item, node);
}

// The node-qualified sections of inline fast paths: PopUnchecked /
// PushUnchecked<IdKind::kNodeQualified> (bounds checked, so any table of
// NumIds() entries will do), except that an abort fails them instead of
// restarting them, for a caller whose slow path tries again anyway (a
// restart loop costs the inline caller a register and an instruction).
inline bool PopQualifiedOnce(void* const* table, uintptr_t offset,
                             void** item) {
  return cs::PopOnce<IdKind::kNodeQualified>(table, offset, item);
}

inline bool PushQualifiedOnce(void* const* table, uintptr_t offset,
                              void* item, int node) {
  return cs::PushOnce<IdKind::kNodeQualified>(table, offset, item, node);
}

// Soft IDs under the owner protocol (none mode; soft_ids.h): a pop or push
// on the calling thread's own soft ID, inline, with no lock and no atomic
// read-modify-write.  False when the thread cannot use the protocol right
// now (no owned ID, inside its own operation, a locker on the ID), or the
// ID has no region, or the stack is empty (full).  Callers fall back to
// Pop / Push, which handle every case.
inline Stack* SoftStack(void* const* table, uintptr_t offset,
                        uint32_t index) {
  // Acquire: pairs with the drainer's release store that republishes the
  // region after draining it (front_end/drain.cc), so that the drained
  // stacks are ordered before this thread's reads of them.  The soft ID's
  // lock, or the owner protocol's acquire load of `held`, orders only the
  // drainer's earlier store of nullptr: QuiesceId unlocks before the drain.
  // (On x86-64 an acquire load is the same `mov`.)
  char* region = static_cast<char*>(
      __atomic_load_n(&table[g_process.num_rseq_ids + index], __ATOMIC_ACQUIRE));
  return region == nullptr ? nullptr : reinterpret_cast<Stack*>(region + offset);
}

// A soft ID's pop and push on its stack `s` (null: no region), with the
// test library's delay between the read and the write; the caller holds
// the ID (lock or owner protocol).
inline bool SoftStackPop(Stack* s, void** item) {
  if (s == nullptr) return false;
  void* p = Stack::ItemOf(s->top);
  if (p == nullptr) return false;
  const uint64_t below = Stack::Link(p);
  CIDMALLOC_RSEQ_INJECT_C(1);  // Between the read and the write.
  s->top = below;
  *item = p;
  return true;
}
inline bool SoftStackPush(Stack* s, void* item) {
  if (s == nullptr) return false;
  const uint64_t w = s->top;
  const uint32_t n = Stack::CountOf(w);
  if (n >= s->capacity) return false;
  Stack::Link(item) = w;
  CIDMALLOC_RSEQ_INJECT_C(1);  // Between the read and the write.
  s->top = Stack::TopWord(item, n + 1);
  return true;
}

inline bool SoftOwnerPop(void* const* table, uintptr_t offset, void** item) {
  return SoftOwnerRun([=](uint32_t index) {
    return SoftStackPop(SoftStack(table, offset, index), item);
  });
}

inline bool SoftOwnerPush(void* const* table, uintptr_t offset, void* item) {
  return SoftOwnerRun([=](uint32_t index) {
    return SoftStackPush(SoftStack(table, offset, index), item);
  });
}

// The raw-ID critical sections alone, with the ID-kind check, for callers
// with a slow path of their own: they also fail unless the kind is kRaw and
// on a thread whose own area is not registered yet, and the caller's slow
// path then uses Pop / Push above, which handle every case.
inline void* TryPop(void* const* table, uintptr_t offset) {
  void* item;
  if (CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw) &&
      CIDMALLOC_LIKELY((PopUnchecked<IdKind::kRaw, IdBound::kChecked>(
          table, offset, &item)))) {
    return item;
  }
  return nullptr;
}

inline bool TryPush(void* const* table, uintptr_t offset, void* item) {
  return CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw) &&
         PushUnchecked<IdKind::kRaw, IdBound::kChecked>(table, offset, item);
}

// Pops up to `want` items into out[], top first; returns how many.
inline uint32_t PopBatch(void* const* table, uintptr_t offset, void** out,
                         uint32_t want) {
  if (want == 0) return 0;
  if (CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw)) {
    const uint32_t n = cs::PopBatch(table, offset, out, want);
    if (CIDMALLOC_LIKELY(n != 0)) return n;
  }
  return PopBatchSlow(table, offset, out, want);
}

// Pushes up to `want` items from in[] (as many as fit); returns how many
// (0 also when node-qualified and not on `node`).
inline uint32_t PushBatch(void* const* table, uintptr_t offset,
                          void* const* in, uint32_t want,
                          int node = kAnyNode) {
  if (want == 0) return 0;
  if (CIDMALLOC_LIKELY(g_process.id_kind == IdKind::kRaw)) {
    const uint32_t n = cs::PushBatch(table, offset, in, want);
    if (CIDMALLOC_LIKELY(n != 0)) return n;
  }
  return PushBatchSlow(table, offset, in, want, node);
}

// Grows (delta > 0) or shrinks (delta < 0) the current ID's stack capacity,
// clamped to [0, min(limit, Stack::kMaxCapacity)]; returns the new
// capacity, or -1 if the current ID has no region.  Shrinking below count is allowed: pushes then fail until
// pops bring count under the capacity.  Not a fast-path operation.
int64_t AdjustCapacity(void* const* table, uintptr_t offset, int32_t delta,
                       uint32_t limit);

// ---- Fences ------------------------------------------------------------------
// Restarts every in-flight critical section of the process
// (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)); also a full memory
// barrier on every cpu running one of its threads.  Returns false where the
// kernel lacks it (before 5.10) or the mode is none.
bool Fence();
// Waits until no operation on `id` is in flight (see the header comment).
// Returns false if that cannot be guaranteed: an rseq ID on a kernel
// without the fence, or the calling thread's own soft ID when this call
// interrupted its operation on it (a signal handler; soft_ids.h).  A soft
// ID whose owner runs without the lock costs a membarrier(2).
bool QuiesceId(uint32_t id);
// QuiesceId without waiting: also false if `id` is a soft ID whose lock
// some thread holds (an operation under the lock protocol, a drainer, or
// this thread itself, interrupted by a signal handler) or whose owner is
// busy on it (after one membarrier(2)).
bool TryQuiesceId(uint32_t id);

// ---- fork ---------------------------------------------------------------------
// Registers the layer's fork handlers (pthread_atfork: the soft-ID locks,
// membarrier in the child) once; later calls do nothing.  Initialisation
// calls it; a user of the layer whose own fork handlers must run inside
// these (taken after them in the parent, and after their reset in the
// child) calls it first, at load time (allocator/api/alloc.cc).  Safe
// before initialisation: the handlers then have nothing to do.
void RegisterForkHandlers();

// vfork(2) (rseq/vfork.cc).  A vfork child shares its parent thread's rseq
// area but gets no registration from the kernel, so it would run critical
// sections on the parent's ID unprotected.  A vfork wrapper calls
// VforkPrepare() in the parent before the system call (it blocks every
// signal and undoes the thread's registration), VforkChild() in the child
// after it (the child registers the area for itself) and VforkParent() in
// the parent once the child has exec'd or exited (the thread registers the
// area again); the last two restore the signal mask.  None of them
// allocates or changes errno.
void VforkPrepare();
void VforkChild();
void VforkParent();

}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_RSEQ_H_
