// rseq/soft_ids.h: software IDs, the portable fallback of per-ID operations.
//
// A thread without usable rseq (none mode, a failed registration, another
// architecture) gets a compact soft ID of its own, the lowest free one, and
// gives it back when it exits.  Each soft ID has a lock.  Two ways to use
// an ID:
//   - Owner protocol (none mode, where membarrier(2)'s PRIVATE_EXPEDITED
//     command is available): a thread that owns its ID operates on it with
//     no lock and no atomic read-modify-write.  It marks itself busy (a
//     plain store), checks that nobody holds the ID's lock, operates, and
//     clears busy.  A thread that needs the ID to stand still (QuiesceId,
//     fork) takes the lock, runs membarrier so that every running thread
//     passes a full barrier, and waits for busy to clear: the barrier is the
//     owner's half of the store-load ordering (an asymmetric Dekker pair),
//     so either the owner sees the lock held and steps aside, or the locker
//     sees it busy and waits.
//   - Lock protocol (everything else): an operation holds the ID's lock for
//     its duration.
// The last kSharedSoftIds IDs are never owned: threads beyond the owned
// ones share them under their locks, and so does an operation that
// interrupts its own thread's (a signal handler that allocates), which must
// neither wait for nor touch the ID its thread is busy on.  Under the lock
// protocol, an operation tries its own ID first and, when it is busy, the
// following IDs in turn: any ID is as good as any other for correctness,
// only locality suffers.
#ifndef CIDMALLOC_RSEQ_SOFT_IDS_H_
#define CIDMALLOC_RSEQ_SOFT_IDS_H_

#include <stdint.h>

#include <atomic>

#include "rseq/state.h"

namespace cidmalloc::rseq {

// IDs [0, kOwnedSoftIds) are owned by one live thread each; the rest are
// shared (see above).
inline constexpr uint32_t kSharedSoftIds = 64;
inline constexpr uint32_t kOwnedSoftIds = kMaxSoftIds - kSharedSoftIds;

struct alignas(64) SoftLock {
  // 0 free, 1 held.  Acquired with an acquire exchange, released with a
  // release store: each release pairs with the next holder's acquire, so
  // the per-ID data an operation touched is visible to the next one.
  std::atomic<uint32_t> held{0};
  // Owner protocol: 1 while the owner operates without the lock.  Written
  // by the owner only: a relaxed store of 1, then a release store of 0 that
  // pairs with the acquire load of a locker waiting for it (so the locker
  // sees the operation's writes).  The owner's store of 1 is ordered before
  // its load of `held` by the locker's membarrier, not by a fence.
  std::atomic<uint32_t> busy{0};
};
extern SoftLock g_soft_locks[kMaxSoftIds] CIDMALLOC_HIDDEN;
// The owner protocol is on: none mode, membarrier registered.  Written by
// Init and in a fork child, before threads use soft IDs.
extern bool g_soft_owner_protocol CIDMALLOC_HIDDEN;

// Acquire: pairs with SoftUnlock's release, so that the new holder sees
// what the previous one did under the lock.
inline bool SoftTryLock(uint32_t index) {
  std::atomic<uint32_t>& h = g_soft_locks[index].held;
  return h.load(std::memory_order_relaxed) == 0 &&
         h.exchange(1, std::memory_order_acquire) == 0;
}
// Release: pairs with the next holder's acquire exchange in SoftTryLock
// (which every locker goes through) and with SoftOwnerBegin's acquire load
// of `held`.
inline void SoftUnlock(uint32_t index) {
  g_soft_locks[index].held.store(0, std::memory_order_release);
}

// The calling thread's soft ID while it runs the owner protocol on it (it
// owns the ID and the protocol is on), else -1.
extern __thread int32_t t_soft_owner_index CIDMALLOC_TLS_IE CIDMALLOC_HIDDEN;

// The owner's half of the owner protocol on its ID's lock word `l`.
// Begin: false (busy left as it was) when busy is set already, i.e. this
// operation interrupted the thread's own one (a signal handler), whose ID
// it must not touch, or when a locker holds the ID; else busy is set and
// the owner may operate until End.
__attribute__((always_inline)) inline bool SoftOwnerBegin(SoftLock& l) {
  if (CIDMALLOC_UNLIKELY(l.busy.load(std::memory_order_relaxed) != 0)) {
    return false;
  }
  l.busy.store(1, std::memory_order_relaxed);
  // The compiler keeps the store before the load of `held` and before the
  // operation's accesses; the cpu's store-load order is the locker's
  // membarrier (WaitForOwner, LockSoftIdsForFork).
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Acquire: pairs with the last locker's release of the lock, so the owner
  // sees what it did to the ID's data while it held the lock (a drainer's
  // work after QuiesceId is ordered by the slab's republishing instead:
  // see SoftStack in rseq.h).
  if (CIDMALLOC_LIKELY(l.held.load(std::memory_order_acquire) == 0)) {
    return true;
  }
  // Release: pairs with a waiting locker's acquire load of busy.
  l.busy.store(0, std::memory_order_release);  // A locker: step aside.
  return false;
}
__attribute__((always_inline)) inline void SoftOwnerEnd(SoftLock& l) {
  // Release: pairs with a waiting locker's acquire load of busy.
  l.busy.store(0, std::memory_order_release);
}

// Runs op(index) on the calling thread's own ID under the owner protocol,
// inline: the fast path of none mode (SoftEnter's owner branch, with the
// operation between the busy stores).  False, without running op, when the
// thread has no owned ID or SoftOwnerBegin fails; else op's result.
template <typename Op>
__attribute__((always_inline)) inline bool SoftOwnerRun(Op op) {
  const int32_t index = t_soft_owner_index;
  if (CIDMALLOC_UNLIKELY(index < 0)) return false;
  SoftLock& l = g_soft_locks[index];
  if (!SoftOwnerBegin(l)) return false;
  const bool ok = op(static_cast<uint32_t>(index));
  SoftOwnerEnd(l);
  return ok;
}

// An operation's hold on a soft ID: its index in [0, kMaxSoftIds), and
// whether it holds the lock (else it is the owner, marked busy).
struct SoftHold {
  uint32_t index;
  bool locked;
};
// Gets a soft ID for one operation: the calling thread's own under the
// owner protocol when it can, else some ID's lock.  Never waits for a lock
// this thread holds or for an ID it is busy on.  SoftExit ends the hold.
SoftHold SoftEnter();
void SoftExit(SoftHold h);
// Takes soft ID `index`'s lock and waits until no operation on it is in
// flight (either protocol); operations that start later and find the lock
// held use another ID.  Release the lock with SoftUnlock.
// False, without the lock, if `index` is the calling thread's own ID and
// this call interrupted the thread's operation on it: it cannot wait.
bool SoftLockExclusive(uint32_t index);
// The same without waiting: false at once, without the lock, if any
// thread holds the lock or an owner is busy on the ID.
bool SoftTryLockExclusive(uint32_t index);

// Which protocol soft IDs run (rseq.md): every operation under the ID's
// lock, or its owner thread without a lock (with the lock for the others).
enum class SoftProtocol : uint8_t { kLock, kOwner };
// At Init: kOwner (none mode, and CIDMALLOC_RSEQ_SOFT does not say lock)
// turns the owner protocol on if membarrier registers; kLock keeps it off.
void InitSoftIds(SoftProtocol wanted);
// fork: the parent takes every soft-ID lock and waits for every owner to
// finish, so that no soft operation is half done in the child's copy of
// memory; both sides then release them.
void LockSoftIdsForFork();
void UnlockSoftIdsAfterFork();
void ResetSoftIdsInChild();
// Number of soft IDs currently owned by live threads (for statistics).
uint32_t SoftIdsInUse();

}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_SOFT_IDS_H_
