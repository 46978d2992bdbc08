// rseq/soft_ids.h: software IDs, the portable fallback of per-ID operations.
//
// A thread without usable rseq (none mode, a failed registration, another
// architecture) gets a compact soft ID of its own, the lowest free one, and
// gives it back when it exits.  Each soft ID has a lock: a per-ID operation
// holds it for its duration, and so does a thread that needs another ID's
// data to stand still (QuiesceId).  The lock is almost never contended: only
// its owner thread and the rare drainer take it.
//
// A signal handler that interrupts its own thread while that thread holds
// its lock must not wait for it.  Operations therefore try-lock their own ID
// first and, when it is busy, the following IDs in turn: any ID is as good as
// any other for correctness, only locality suffers.
#ifndef CIDMALLOC_RSEQ_SOFT_IDS_H_
#define CIDMALLOC_RSEQ_SOFT_IDS_H_

#include <stdint.h>

#include <atomic>

#include "rseq/state.h"

namespace cidmalloc::rseq {

struct alignas(64) SoftLock {
  // 0 free, 1 held.  Acquired with an acquire exchange, released with a
  // release store: each release pairs with the next owner's acquire, so the
  // per-ID data an operation touched is visible to the next one.
  std::atomic<uint32_t> held{0};
};
extern SoftLock g_soft_locks[kMaxSoftIds] CIDMALLOC_HIDDEN;

inline bool SoftTryLock(uint32_t index) {
  std::atomic<uint32_t>& h = g_soft_locks[index].held;
  return h.load(std::memory_order_relaxed) == 0 &&
         h.exchange(1, std::memory_order_acquire) == 0;
}
inline void SoftUnlock(uint32_t index) {
  g_soft_locks[index].held.store(0, std::memory_order_release);
}

// Locks some soft ID, preferring the calling thread's own, and returns its
// index in [0, kMaxSoftIds).  Never blocks on a lock this thread holds.
uint32_t SoftLockAny();
// Waits until `index`'s lock is free and takes it.
void SoftLockWait(uint32_t index);

void InitSoftIds();
// fork: the parent takes every soft-ID lock so that no soft operation is
// half done in the child's copy of memory; both sides then release them.
void LockSoftIdsForFork();
void UnlockSoftIdsAfterFork();
void ResetSoftIdsInChild();
// Number of soft IDs currently owned by live threads (for statistics).
uint32_t SoftIdsInUse();

}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_SOFT_IDS_H_
