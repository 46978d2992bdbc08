// rseq/cs_ops.h: the restartable critical sections: the C++ operations
// (pop, push, their batch forms, the counter add, the capacity adjustment,
// the cpu/node read), one `asm volatile goto` each.  The sections' text,
// layout and invariants are in the architecture's assembly header, which
// defines the same macros with the same operand names:
//   rseq/cs_x86_64_asm.h   x86-64
//   rseq/cs_aarch64_asm.h  AArch64 (little-endian)
// Besides the sections' text, each defines the operand lists that differ:
// CIDMALLOC_RSEQ_CS_{AREA,QUALIFIED,COMMON}_INPUTS, the clobbers
// (CIDMALLOC_RSEQ_CLOBBERS, and Pop's CIDMALLOC_RSEQ_POP_V and
// CIDMALLOC_RSEQ_POP_CLOBBERS) and the cpu/node read
// (CIDMALLOC_RSEQ_CPU_NODE_ASM).
//
// Only included by rseq/rseq.h, where CIDMALLOC_RSEQ_SECTIONS is set.
#ifndef CIDMALLOC_RSEQ_CS_OPS_H_
#define CIDMALLOC_RSEQ_CS_OPS_H_

#include <stdint.h>

#include "rseq/abi.h"
#include "rseq/inject.h"
#include "rseq/state.h"
#if CIDMALLOC_RSEQ_X86_64
#include "rseq/cs_x86_64_asm.h"
#elif CIDMALLOC_RSEQ_AARCH64
#include "rseq/cs_aarch64_asm.h"
#else
#error "rseq/cs_ops.h: no critical sections for this architecture"
#endif

// On every failure label.  GCC 12.2 at -O1 with -fsanitize=address or
// undefined miscompiles a function whose asm goto has outputs: on the goto
// path it returned the output register's stale contents instead of the
// failure value (tests/rseq: Ops.TryPopTryPushAreTheCriticalSectionsAlone
// under --config=asan).  An empty volatile asm on the label avoids it.
#define CIDMALLOC_RSEQ_FAIL_BARRIER() asm volatile("" ::: "memory")

namespace cidmalloc::rseq::cs {

// The sections exist here (rseq/cs_none.h is the interface without them).
inline constexpr bool kHaveSections = true;

// Each function returns true on commit and false on failure (bad ID, absent
// per-ID region, empty or full stack, and for the node-qualified pushes a
// thread not on `node`); an abort restarts it internally, up to
// kAbortsBeforeGivingUp aborts in a row (state.h): the operation then
// fails as if the stack were empty or full (or the region absent), which
// every caller handles by its slow path.  The count is the loop's own
// (one `mov` of the limit on entry): a thread-local count, which no
// success reset, made the thread's every 64th abort a failure, and
// AdjustCapacity then reported an absent region it had
// (tests/rseq: stress_cpu_test, adjust_inject1).
// K selects the ID kind (kRaw or kNodeQualified); the caller knows which
// the process uses.

// counter(id) += delta, where counter(id) = base + (id << 6).
template <IdKind K = IdKind::kRaw>
__attribute__((always_inline)) inline bool CounterAdd(uintptr_t base,
                                                      int64_t delta) {
  for (uint32_t aborts = 0;; ++aborts) {
    uint64_t id;
#define CIDMALLOC_RSEQ_OPERANDS                                   \
  : [id] "=&r"(id)                                                \
  : CIDMALLOC_RSEQ_CS_COMMON_INPUTS, [base] "r"(base), [delta] "r"(delta) \
  : CIDMALLOC_RSEQ_CLOBBERS                                         \
  : abort, fail
    if constexpr (K == IdKind::kRaw) {
      asm volatile goto(CIDMALLOC_RSEQ_COUNTER_ADD_ASM(CIDMALLOC_RSEQ_CS_LOAD_ID)
                        CIDMALLOC_RSEQ_OPERANDS);
    } else {
      asm volatile goto(CIDMALLOC_RSEQ_COUNTER_ADD_ASM(
                            CIDMALLOC_RSEQ_CS_LOAD_QUALIFIED_ID(""))
                        CIDMALLOC_RSEQ_OPERANDS);
    }
#undef CIDMALLOC_RSEQ_OPERANDS
    return true;
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
  fail:
    CIDMALLOC_RSEQ_FAIL_BARRIER();
    return false;
  }
}

// The pop and push of the allocator's inline fast paths, one section each:
//   K = kRaw            the wide mm_cid sections (IdBound::kWideMmCid), on
//                       one node;
//   K = kNodeQualified  the node-qualified sections, with their bound
//                       checks, on several nodes; the push fails unless
//                       the thread runs on `node`.
// An abort fails them like any other failure (the caller's slow path
// tries again) instead of restarting them: with no restart loop, GCC
// addresses g_process's fields RIP-relative, where it hoisted g_process's
// address out of the loop into a register (a `lea` more, and a register
// more live).  Only the g_process fields a section reads are operands,
// for the same reason.
template <IdKind K>
__attribute__((always_inline)) inline bool PopOnce(void* const* table,
                                                   uintptr_t offset,
                                                   void** item) {
  static_assert(K != IdKind::kNone);
  uint64_t id, n;
  uintptr_t s;
  void* v;
#define CIDMALLOC_RSEQ_OUTPUTS \
  : [id] "=&r"(id), [s] "=&r"(s), [n] "=&r"(n), [v] CIDMALLOC_RSEQ_POP_V(v)
#define CIDMALLOC_RSEQ_REST                                               \
  , [table] "r"(table), [offset] "r"(offset)                              \
  : CIDMALLOC_RSEQ_POP_CLOBBERS                            \
  : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
  if constexpr (K == IdKind::kRaw) {
    asm volatile goto(CIDMALLOC_RSEQ_MM_CID_ASM(CIDMALLOC_RSEQ_POP_ASM)
                      CIDMALLOC_RSEQ_OUTPUTS
                      : CIDMALLOC_RSEQ_CS_AREA_INPUT CIDMALLOC_RSEQ_REST);
  } else {
    asm volatile goto(CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_POP_ASM, "")
                      CIDMALLOC_RSEQ_OUTPUTS
                      : CIDMALLOC_RSEQ_CS_QUALIFIED_INPUTS CIDMALLOC_RSEQ_REST);
  }
#undef CIDMALLOC_RSEQ_OUTPUTS
#undef CIDMALLOC_RSEQ_REST
  *item = v;
  return true;
abort:
fail:
  CIDMALLOC_RSEQ_FAIL_BARRIER();
  return false;
  CIDMALLOC_RSEQ_MISMATCH_HANDLER
}

template <IdKind K>
__attribute__((always_inline)) inline bool PushOnce(void* const* table,
                                                    uintptr_t offset,
                                                    void* item,
                                                    int32_t node = 0) {
  static_assert(K != IdKind::kNone);
  uint64_t id, n;
  uintptr_t s;
#define CIDMALLOC_RSEQ_OUTPUTS : [id] "=&r"(id), [s] "=&r"(s), [n] "=&r"(n)
#define CIDMALLOC_RSEQ_REST                                               \
  , [table] "r"(table), [offset] "r"(offset), [item] "r"(item)            \
  : CIDMALLOC_RSEQ_CLOBBERS                                                 \
  : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
  if constexpr (K == IdKind::kRaw) {
    (void)node;
    asm volatile goto(CIDMALLOC_RSEQ_MM_CID_ASM(CIDMALLOC_RSEQ_PUSH_ASM)
                      CIDMALLOC_RSEQ_OUTPUTS
                      : CIDMALLOC_RSEQ_CS_AREA_INPUT CIDMALLOC_RSEQ_REST);
  } else {
    asm volatile goto(CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_PUSH_ASM,
                                                   CIDMALLOC_RSEQ_CS_CHECK_NODE)
                      CIDMALLOC_RSEQ_OUTPUTS
                      : CIDMALLOC_RSEQ_CS_QUALIFIED_INPUTS, [node] "r"(node)
                        CIDMALLOC_RSEQ_REST);
  }
#undef CIDMALLOC_RSEQ_OUTPUTS
#undef CIDMALLOC_RSEQ_REST
  return true;
abort:
fail:
  CIDMALLOC_RSEQ_FAIL_BARRIER();
  return false;
  CIDMALLOC_RSEQ_MISMATCH_HANDLER
}

// Pops the top of the stack into *item.
template <IdKind K = IdKind::kRaw, IdBound B = IdBound::kChecked>
__attribute__((always_inline)) inline bool Pop(void* const* table,
                                               uintptr_t offset,
                                               void** item) {
  if constexpr (B == IdBound::kWideMmCid) {
    static_assert(K == IdKind::kRaw);
    return PopOnce<IdKind::kRaw>(table, offset, item);
  }
  for (uint32_t aborts = 0;; ++aborts) {
    uint64_t id, n;
    uintptr_t s;
    void* v;
    // v is %rax where it can be (CIDMALLOC_RSEQ_POP_V, above).
#define CIDMALLOC_RSEQ_OPERANDS                                            \
  : [id] "=&r"(id), [s] "=&r"(s), [n] "=&r"(n),                            \
    [v] CIDMALLOC_RSEQ_POP_V(v)                                            \
  : CIDMALLOC_RSEQ_CS_COMMON_INPUTS, [table] "r"(table), [offset] "r"(offset) \
  : CIDMALLOC_RSEQ_POP_CLOBBERS                             \
  : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
    if constexpr (K == IdKind::kRaw && B == IdBound::kWideTable) {
      asm volatile goto(CIDMALLOC_RSEQ_WIDE_ASM(CIDMALLOC_RSEQ_POP_ASM)
                        CIDMALLOC_RSEQ_OPERANDS);
    } else if constexpr (K == IdKind::kRaw) {
      asm volatile goto(CIDMALLOC_RSEQ_RAW_ASM(CIDMALLOC_RSEQ_POP_ASM)
                        CIDMALLOC_RSEQ_OPERANDS);
    } else {
      asm volatile goto(CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_POP_ASM, "")
                        CIDMALLOC_RSEQ_OPERANDS);
    }
#undef CIDMALLOC_RSEQ_OPERANDS
    *item = v;
    return true;
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
  fail:
    CIDMALLOC_RSEQ_FAIL_BARRIER();
    return false;
    CIDMALLOC_RSEQ_MISMATCH_HANDLER
  }
}

// Pushes item.  Node-qualified: only while the thread runs on `node`.
template <IdKind K = IdKind::kRaw, IdBound B = IdBound::kChecked>
__attribute__((always_inline)) inline bool Push(void* const* table,
                                                uintptr_t offset,
                                                void* item,
                                                int32_t node = 0) {
  if constexpr (B == IdBound::kWideMmCid) {
    static_assert(K == IdKind::kRaw);
    (void)node;
    return PushOnce<IdKind::kRaw>(table, offset, item);
  }
  for (uint32_t aborts = 0;; ++aborts) {
    uint64_t id, n;
    uintptr_t s;
#define CIDMALLOC_RSEQ_OPERANDS                                               \
  : [id] "=&r"(id), [s] "=&r"(s), [n] "=&r"(n)                                \
  : CIDMALLOC_RSEQ_CS_COMMON_INPUTS, [table] "r"(table), [offset] "r"(offset), \
    [item] "r"(item)
#define CIDMALLOC_RSEQ_LABELS \
  : CIDMALLOC_RSEQ_CLOBBERS : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
    if constexpr (K == IdKind::kRaw && B == IdBound::kWideTable) {
      (void)node;
      asm volatile goto(CIDMALLOC_RSEQ_WIDE_ASM(CIDMALLOC_RSEQ_PUSH_ASM)
                        CIDMALLOC_RSEQ_OPERANDS CIDMALLOC_RSEQ_LABELS);
    } else if constexpr (K == IdKind::kRaw) {
      (void)node;
      asm volatile goto(CIDMALLOC_RSEQ_RAW_ASM(CIDMALLOC_RSEQ_PUSH_ASM)
                        CIDMALLOC_RSEQ_OPERANDS CIDMALLOC_RSEQ_LABELS);
    } else {
      asm volatile goto(CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_PUSH_ASM,
                                                     CIDMALLOC_RSEQ_CS_CHECK_NODE)
                        CIDMALLOC_RSEQ_OPERANDS, [node] "r"(node)
                        CIDMALLOC_RSEQ_LABELS);
    }
#undef CIDMALLOC_RSEQ_OPERANDS
#undef CIDMALLOC_RSEQ_LABELS
    return true;
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
  fail:
    CIDMALLOC_RSEQ_FAIL_BARRIER();
    return false;
    CIDMALLOC_RSEQ_MISMATCH_HANDLER
  }
}

// Pops min(want, count) items into out[0..k), top of the stack first, and
// returns k (0 on failure).  Requires want > 0.
template <IdKind K = IdKind::kRaw>
__attribute__((always_inline)) inline uint32_t PopBatch(void* const* table,
                                                        uintptr_t offset,
                                                        void** out,
                                                        uint32_t want) {
  for (uint32_t aborts = 0;; ++aborts) {
    uint64_t id, n, end, m;
    uintptr_t s;
    void** o = out;
#define CIDMALLOC_RSEQ_OPERANDS                                               \
  : [id] "=&r"(id), [s] "=&r"(s), [n] "=&r"(n), [end] "=&r"(end), [o] "+&r"(o), \
    [m] "=&r"(m)                                                              \
  : CIDMALLOC_RSEQ_CS_COMMON_INPUTS, [table] "r"(table), [offset] "r"(offset), \
    [want] "r"(want)                                                          \
  : CIDMALLOC_RSEQ_CLOBBERS                                         \
  : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
    if constexpr (K == IdKind::kRaw) {
      asm volatile goto(CIDMALLOC_RSEQ_RAW_ASM(CIDMALLOC_RSEQ_POP_BATCH_ASM)
                        CIDMALLOC_RSEQ_OPERANDS);
    } else {
      asm volatile goto(
          CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_POP_BATCH_ASM, "")
              CIDMALLOC_RSEQ_OPERANDS);
    }
#undef CIDMALLOC_RSEQ_OPERANDS
    return static_cast<uint32_t>(o - out);
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
  fail:
    CIDMALLOC_RSEQ_FAIL_BARRIER();
    return 0;
    CIDMALLOC_RSEQ_MISMATCH_HANDLER
  }
}

// Pushes in[0..k), k = min(want, capacity - count), and returns k (0 on
// failure).  Requires want > 0.  Node-qualified: only while the thread runs
// on `node`.
template <IdKind K = IdKind::kRaw>
__attribute__((always_inline)) inline uint32_t PushBatch(void* const* table,
                                                         uintptr_t offset,
                                                         void* const* in,
                                                         uint32_t want,
                                                         int32_t node = 0) {
  for (uint32_t aborts = 0;; ++aborts) {
    uint64_t id, n, end, w;
    uintptr_t s;
    void* const* i = in;
#define CIDMALLOC_RSEQ_OPERANDS                                               \
  : [id] "=&r"(id), [s] "=&r"(s), [n] "=&r"(n), [end] "=&r"(end), [i] "+&r"(i), \
    [w] "=&r"(w)                                                              \
  : CIDMALLOC_RSEQ_CS_COMMON_INPUTS, [table] "r"(table), [offset] "r"(offset), \
    [want] "r"(want)
#define CIDMALLOC_RSEQ_LABELS \
  : CIDMALLOC_RSEQ_CLOBBERS : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
    if constexpr (K == IdKind::kRaw) {
      (void)node;
      asm volatile goto(CIDMALLOC_RSEQ_RAW_ASM(CIDMALLOC_RSEQ_PUSH_BATCH_ASM)
                        CIDMALLOC_RSEQ_OPERANDS CIDMALLOC_RSEQ_LABELS);
    } else {
      asm volatile goto(
          CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_PUSH_BATCH_ASM,
                                       CIDMALLOC_RSEQ_CS_CHECK_NODE)
              CIDMALLOC_RSEQ_OPERANDS, [node] "r"(node) CIDMALLOC_RSEQ_LABELS);
    }
#undef CIDMALLOC_RSEQ_OPERANDS
#undef CIDMALLOC_RSEQ_LABELS
    return static_cast<uint32_t>(i - in);
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
  fail:
    CIDMALLOC_RSEQ_FAIL_BARRIER();
    return 0;
    CIDMALLOC_RSEQ_MISMATCH_HANDLER
  }
}

// capacity = min(max(capacity + delta, 0), limit), limit at most
// CIDMALLOC_STACK_MAX_CAPACITY; returns the new capacity, or -1 on failure
// (bad ID or absent region).
template <IdKind K = IdKind::kRaw>
__attribute__((always_inline)) inline int64_t AdjustCapacity(
    void* const* table, uintptr_t offset, int32_t delta, uint32_t limit) {
  // The capacity is 16 bits (rseq/abi.h).
  if (limit > CIDMALLOC_STACK_MAX_CAPACITY) limit = CIDMALLOC_STACK_MAX_CAPACITY;
  for (uint32_t aborts = 0;; ++aborts) {
    uint64_t id, c;
    uintptr_t s;
#define CIDMALLOC_RSEQ_OPERANDS                                               \
  : [id] "=&r"(id), [s] "=&r"(s), [c] "=&r"(c)                                \
  : CIDMALLOC_RSEQ_CS_COMMON_INPUTS, [table] "r"(table), [offset] "r"(offset), \
    [delta] "r"(delta), [limit] "r"(limit)                                    \
  : CIDMALLOC_RSEQ_CLOBBERS                                         \
  : abort, fail CIDMALLOC_RSEQ_MISMATCH_LABELS
    if constexpr (K == IdKind::kRaw) {
      asm volatile goto(CIDMALLOC_RSEQ_RAW_ASM(CIDMALLOC_RSEQ_ADJUST_CAPACITY_ASM)
                        CIDMALLOC_RSEQ_OPERANDS);
    } else {
      asm volatile goto(
          CIDMALLOC_RSEQ_QUALIFIED_ASM(CIDMALLOC_RSEQ_ADJUST_CAPACITY_ASM, "")
              CIDMALLOC_RSEQ_OPERANDS);
    }
#undef CIDMALLOC_RSEQ_OPERANDS
    return static_cast<int64_t>(c);
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
  fail:
    CIDMALLOC_RSEQ_FAIL_BARRIER();
    return -1;
    CIDMALLOC_RSEQ_MISMATCH_HANDLER
  }
}

// Reads cpu_id and node_id inside one section, so the pair is consistent
// even across a migration.  No commit: the last load ends the section.
__attribute__((always_inline)) inline void CpuNode(int32_t* cpu,
                                                   int32_t* node) {
  for (uint32_t aborts = 0;; ++aborts) {
    int32_t c, nd;
    asm volatile goto(CIDMALLOC_RSEQ_CPU_NODE_ASM
                      : [c] "=&r"(c), [nd] "=&r"(nd)
                      : [area] "r"(::cidmalloc::rseq::g_process.area_offset)
                      : CIDMALLOC_RSEQ_CLOBBERS
                      : abort);
    *cpu = c;
    *node = nd;
    return;
  abort:
    if (aborts + 1 < kAbortsBeforeGivingUp) continue;
    *cpu = -1;  // Unknown: the callers ask the kernel.
    *node = -1;
    return;
  }
}

}  // namespace cidmalloc::rseq::cs

#endif  // CIDMALLOC_RSEQ_CS_OPS_H_
