// rseq/cs_none.h: the critical sections' interface (rseq/cs_ops.h) on
// an architecture that has none of them written yet: every operation
// fails, so that each caller in rseq/rseq.h and rseq/rseq.cc takes its
// soft-ID path without an #if of its own.  kHaveSections tells the slow
// paths not to try the sections at all (a failed section would otherwise
// read as an empty stack).
//
// Only included by rseq/rseq.h.
#ifndef CIDMALLOC_RSEQ_CS_NONE_H_
#define CIDMALLOC_RSEQ_CS_NONE_H_

#include <stdint.h>

#include "rseq/state.h"

namespace cidmalloc::rseq::cs {

inline constexpr bool kHaveSections = false;

template <IdKind K = IdKind::kRaw>
inline bool CounterAdd(uintptr_t, int64_t) {
  return false;
}
template <IdKind K>
inline bool PopOnce(void* const*, uintptr_t, void**) {
  return false;
}
template <IdKind K>
inline bool PushOnce(void* const*, uintptr_t, void*, int32_t = 0) {
  return false;
}
template <IdKind K = IdKind::kRaw, IdBound B = IdBound::kChecked>
inline bool Pop(void* const*, uintptr_t, void**) {
  return false;
}
template <IdKind K = IdKind::kRaw, IdBound B = IdBound::kChecked>
inline bool Push(void* const*, uintptr_t, void*, int32_t = 0) {
  return false;
}
template <IdKind K = IdKind::kRaw>
inline uint32_t PopBatch(void* const*, uintptr_t, void**, uint32_t) {
  return 0;
}
template <IdKind K = IdKind::kRaw>
inline uint32_t PushBatch(void* const*, uintptr_t, void* const*, uint32_t,
                          int32_t = 0) {
  return 0;
}
template <IdKind K = IdKind::kRaw>
inline int64_t AdjustCapacity(void* const*, uintptr_t, int32_t, uint32_t) {
  return -1;
}
inline void CpuNode(int32_t* cpu, int32_t* node) {
  *cpu = -1;
  *node = -1;
}

}  // namespace cidmalloc::rseq::cs

#endif  // CIDMALLOC_RSEQ_CS_NONE_H_
