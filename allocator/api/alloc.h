// allocator/api/alloc.h: layer 6's internal entry points, the fast paths
// that every public function (malloc, free, operator new, ...) inlines.
//
// Fast path budgets (x86-64, cid mode on one node, -O2; cpu mode's and
// the node-qualified sections are placed after the ret and not counted),
// checked on the built libcidmalloc.so by
// tests/allocator_budget/fast_path_budget_test.sh:
//   malloc: the stack offset from the size (one table), one rseq pop,
//           clearing the free cookie.
//   free:   span-map lookup (class and stack offset), misaligned-pointer
//           and double-free checks, one rseq push.
// The budgets (instructions from entry to the return) are in that test.
// Everything else is out of line (noinline) and reached by a tail call.
#ifndef CIDMALLOC_ALLOCATOR_API_ALLOC_H_
#define CIDMALLOC_ALLOCATOR_API_ALLOC_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/pagemap.h"

#define CIDMALLOC_NOINLINE __attribute__((noinline))
// The functions whose whole body is a fast path (malloc, free, and the
// node-qualified AllocSmallSlow / FreeSmallSlow) start on a cache line.
// Where they started otherwise depended on every function before them,
// and that alone moved fixed-size pairs by 5-8 % and random-size pairs by
// up to 20 % between builds whose fast paths were the same instructions
// (docs/benchmarks/tuning_log.md).
#define CIDMALLOC_HOT_ENTRY __attribute__((aligned(64)))

namespace cidmalloc::api {

// CIDMALLOC_STATS=1: count every operation (the fast paths are then off).
// Written once by initialisation, before the release store of
// g_init_state (alloc.cc); read-only afterwards.
extern bool g_counting CIDMALLOC_HIDDEN;

// Which fast paths may run, set once at the end of initialisation (0
// before it, so the first call of each kind initialises):
//   kFastAlloc      raw rseq IDs in cid mode, and not counting: the inline
//                   sections read mm_cid at its place in the rseq area
//                   (front_end::TryAllocCid), one load fewer than through
//                   the ID field's offset;
//   kFastFree       kFastAlloc, and one NUMA node (with several, the IDs
//                   are node-qualified and free's push checks the
//                   object's node: kFastQualified);
//   kFastQualified  node-qualified IDs (cid mode, several nodes), and not
//                   counting: the inline paths run the node-qualified
//                   sections (front_end::TryAllocQualified, which check
//                   their bounds; free's push insists on the object's
//                   node), placed after the cid path's ret like cpu mode's;
//   kFastSoft       none mode, one node, and not counting: the slow
//                   paths start with the owner protocol's pop and push on
//                   the thread's own soft ID (rseq/soft_ids.h), which fail
//                   where the protocol is off.
//   kFastCpu        raw rseq IDs in cpu mode (kernels before 6.3, or
//                   CIDMALLOC_RSEQ_MODE=cpu), and not counting: the inline
//                   paths run the wide sections on cpu_id (through the ID
//                   field's offset), placed after the cid path's ret, one
//                   branch away;
//   kFastCpuFree    kFastCpu and one node, for free (see kFastFree).
enum FastPath : uint8_t {
  kFastAlloc = 1,
  kFastFree = 2,
  kFastQualified = 4,
  kFastSoft = 8,
  kFastCpu = 16,
  kFastCpuFree = 32,
};

// The fast-path flags and the free cookie's secret share one word, so that
// free() gets both with one load (a load fewer on its path made random-size
// pairs 0.89x as fast; docs/benchmarks/allocator_history.md, "Update at
// `747a94b`"):
//   bits 0-7  the FastPath flags (0 before initialisation);
//   the word  the cookie's secret: freed small objects carry
//             `address ^ g_state` in their second word, and a free() that
//             finds it there is a double free.  Bits 8-63 are random per
//             process and never all 0 (with a secret of 0 the mark would be
//             the object's own address, which a self-linked list head holds).
// Written once by initialisation, before the release store of
// g_init_state (alloc.cc), which publishes it to the slow paths.  The fast
// paths read it with a plain load and no acquire: they count on
// initialisation having happened before the reading thread was created
// (glibc's pthread_create allocates, so a process's first malloc precedes
// its second thread).
extern uintptr_t g_state CIDMALLOC_HIDDEN;
inline uint8_t FastFlags() { return static_cast<uint8_t>(g_state); }
inline uintptr_t FreeMark(uintptr_t p, uintptr_t state) { return p ^ state; }
// Marks the small object at `p` free: false, without marking, when it
// carries the mark already (a double free).
inline bool MarkFree(void* p, uintptr_t state) {
  uintptr_t* words = static_cast<uintptr_t*>(p);
  const uintptr_t mark = FreeMark(reinterpret_cast<uintptr_t>(p), state);
  if (CIDMALLOC_UNLIKELY(words[1] == mark)) return false;
  words[1] = mark;
  return true;
}
// Clears the mark of the small object at `p`, handed out again: a free of
// it must not take it for a double free.
inline void MarkInUse(void* p) { static_cast<uintptr_t*>(p)[1] = 0; }

// Slow paths.  AllocSmallSlow (which takes only the class's stack offset)
// and FreeSmallSlow start with the soft-ID owner protocol's pop and push
// (kFastSoft: none mode's fast path, one tail call away from the inline
// one) and tail-call AllocSmallMiss and FreeSmallMiss, which do the rest:
// the caches of any mode, refills and flushes, remote objects, counting.
// All noexcept (they report failures through errno or abort): a noexcept
// caller such as operator delete can then reach them by a tail jump too,
// without a stack frame on its fast path.
CIDMALLOC_NOINLINE CIDMALLOC_HOT_ENTRY void* AllocSmallSlow(
    uint32_t stack_offset) noexcept;
CIDMALLOC_NOINLINE void* AllocSmallMiss(int cls) noexcept;
// What a large allocation's bytes must be: anything, or zero (calloc).
enum class Fill : uint8_t { kAny, kZero };
// AllocLarge and FreeSlow (free() of a pointer with no span tag) start with
// the ID's run stack, with no call and so no stack frame (a 72 KiB pair,
// a page run before the classes reached 128 KiB, took 13.3-13.6 ns with
// them in the general paths, 10.0 without), and
// tail-call AllocLargeMiss and FreeLargeIn (FreeLarge for null and foreign
// pointers) for the rest: the run stack of any mode, the page heap,
// misuse, counting.  AllocLargeMiss gives `other` (a run of another length
// AllocLarge popped, or nullptr) back first.
CIDMALLOC_NOINLINE void* AllocLarge(size_t size, size_t align,
                                    Fill fill) noexcept;
CIDMALLOC_NOINLINE void* AllocLargeMiss(size_t size, size_t align, Fill fill,
                                        void* other) noexcept;
CIDMALLOC_NOINLINE void FreeSlow(void* p) noexcept;
CIDMALLOC_NOINLINE void FreeLarge(void* p) noexcept;
CIDMALLOC_NOINLINE void FreeLargeIn(void* p,
                                    page_heap::ChunkInfo* chunk) noexcept;
// free()'s object-start test failed for `p`, whose span tag is `tag`: class
// 0 (no span tag) goes on to FreeSlow, any other class is an invalid
// pointer.  The tag comes from the inline path, which has it in a register:
// looking it up again cost page-run pairs a span-map lookup (two dependent
// loads) more.
CIDMALLOC_NOINLINE void FreeNotSmallStart(void* p, uint32_t tag) noexcept;
// kFastFree is off: the double-free check and mark, then FreeSmallSlow.
CIDMALLOC_NOINLINE void FreeSmallUnmarked(void* p) noexcept;
CIDMALLOC_NOINLINE CIDMALLOC_HOT_ENTRY void FreeSmallSlow(void* p) noexcept;
CIDMALLOC_NOINLINE void FreeSmallMiss(void* p, int cls) noexcept;
// Report and abort.  Not declared [[noreturn]] so that the fast path
// reaches them by a tail jump, without keeping its stack aligned for a call.
CIDMALLOC_NOINLINE void DoubleFree(const char* who, void* p) noexcept;
CIDMALLOC_NOINLINE void InvalidPointer(const char* who, void* p) noexcept;

// The pop alone: false when the fast path is off or the stack is empty.
// The node-qualified pop and cpu mode's (the wide section on cpu_id) are
// inline too, placed after the function's hot path: off the one-node cid
// path but for the branch's target.
__attribute__((always_inline)) inline bool PopCached(uintptr_t stack_offset,
                                                     void** p) {
  // The flags in a register: an empty asm keeps GCC from testing them in
  // memory (`testb $1, g_state(%rip)`), which with its RIP-relative address
  // and immediate is not one micro-fused operation; as a load and a `test`
  // that fuses with its branch the fast path issues one operation fewer
  // (docs/benchmarks/tuning_log.md).  Cpu mode's test below reuses it.
  uintptr_t state = g_state;
  asm("" : "+r"(state));
  if (CIDMALLOC_LIKELY(state & kFastAlloc)) {
    if (CIDMALLOC_LIKELY(front_end::TryAllocCid(stack_offset, p))) {
      MarkInUse(*p);
      return true;
    }
    return false;
  }
  if (state & kFastQualified) {
    if (CIDMALLOC_LIKELY(front_end::TryAllocQualified(stack_offset, p))) {
      MarkInUse(*p);
      return true;
    }
    return false;
  }
  if ((state & kFastCpu) && front_end::TryAllocAt(stack_offset, p)) {
    MarkInUse(*p);
    return true;
  }
  return false;
}

// An object from the stack at `stack_offset` of the current ID's slab,
// else from the slow path, which gets the stack offset (the node-qualified
// section does not look it up again) and derives the class from it
// (front_end::ClassOfStackOffset).
__attribute__((always_inline)) inline void* AllocFromStack(
    uintptr_t stack_offset) {
  void* p;
  if (CIDMALLOC_LIKELY(PopCached(stack_offset, &p))) return p;
  return AllocSmallSlow(static_cast<uint32_t>(stack_offset));
}

// An object of class `cls` from the cache, else from the slow path.
__attribute__((always_inline)) inline void* AllocSmall(int cls) {
  return AllocFromStack(front_end::kLayout.offset[cls]);
}

// One table load finds the stack (size -> offset, not size -> class ->
// offset); the class is looked up on the slow path only.  Sizes up to 1 KiB
// and a header (1040: front_end::kMaxSmallOffsetIndexed) are tested first,
// with one comparison: testing size <= kMaxSmallSize
// first put a second compare-and-branch on their path, which cost fixed-size
// pairs 4-5 % (docs/benchmarks/tuning_log.md).
__attribute__((always_inline)) inline void* Alloc(size_t size) {
  if (CIDMALLOC_LIKELY(size <= front_end::kMaxSmallOffsetIndexed)) {
    return AllocFromStack(front_end::SmallStackOffsetOf(size));
  }
  if (CIDMALLOC_LIKELY(size <= central::kMaxSmallSize)) {
    return AllocFromStack(front_end::MidStackOffsetOf(size));
  }
  return AllocLarge(size, central::kMinAlign, Fill::kAny);
}

// Alloc's fast path alone, for a caller whose own out-of-line slow path
// does the whole allocation again (operator new, whose slow path also runs
// the new-handler: its fast path then needs no stack frame).  False when
// the size is not small, the fast path is off or the stack is empty.
__attribute__((always_inline)) inline bool TryAllocCached(size_t size,
                                                          void** p) {
  if (CIDMALLOC_LIKELY(size <= front_end::kMaxSmallOffsetIndexed)) {
    return PopCached(front_end::SmallStackOffsetOf(size), p);
  }
  return size <= central::kMaxSmallSize &&
         PopCached(front_end::MidStackOffsetOf(size), p);
}

// free()'s checks (the span tag; the object-start test; the double-free
// mark) and its push, at the stack offset the tag carries.  Sized operator
// delete takes this path too and ignores the size: pushing at the size's
// stack offset instead (known before the tag arrives, but checked against
// it) made its fast path six instructions longer; without that, one-size
// new+delete pairs take 0.81-0.93x the time, random-size ones 0.93-1.07x
// (docs/benchmarks/tuning_log.md).
__attribute__((always_inline)) inline void Free(void* ptr) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  // Two dependent loads give the class, the node and the stack offset (the
  // span map); nothing else on the way to the push depends on the pointer.
  const uint32_t tag = page_heap::LookupSpanTag(p);
  const int cls = central::TagClass(tag);
  // No tag (class 0: a large allocation, null, or not ours) fails the
  // object-start test too, which then needs no branch of its own.
  if (CIDMALLOC_UNLIKELY(!central::IsObjectStart(p, cls))) {
    return FreeNotSmallStart(ptr, tag);
  }
  // One load for the flags and the cookie's secret: read before the store
  // below, which the compiler must otherwise assume may change g_state.
  // The flag first: the mark is then computed in the loaded register.
  const uintptr_t state = g_state;
  // The mark and the push of cid mode on one node, or (placed after the
  // hot path) of node-qualified IDs, which pushes only on the object's
  // node (elsewhere the slow path sends it home), or of cpu mode.
  const auto mark_and_push = [&](auto push) {
    if (CIDMALLOC_UNLIKELY(!MarkFree(ptr, state))) {
      return DoubleFree("free()", ptr);
    }
    if (CIDMALLOC_LIKELY(push(central::TagPayload(tag), ptr))) return;
    return FreeSmallSlow(ptr);
  };
  if (CIDMALLOC_LIKELY(state & kFastFree)) {
    return mark_and_push(
        [](uintptr_t off, void* q) { return front_end::TryFreeCid(off, q); });
  }
  if (state & kFastQualified) {
    return mark_and_push([tag](uintptr_t off, void* q) {
      return front_end::TryFreeQualified(off, q, central::TagNode(tag));
    });
  }
  if (state & kFastCpuFree) {
    return mark_and_push(
        [](uintptr_t off, void* q) { return front_end::TryFreeAt(off, q); });
  }
  return FreeSmallUnmarked(ptr);
}

// Usable size of a live allocation; aborts on a pointer this heap did not
// return (or already freed, where that can be told).
size_t UsableSize(const char* who, void* p);

// Allocation with alignment `align` (a power of two).
void* AllocAligned(size_t align, size_t size);

}  // namespace cidmalloc::api

#endif  // CIDMALLOC_ALLOCATOR_API_ALLOC_H_
