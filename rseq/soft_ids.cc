#include "rseq/soft_ids.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cidmalloc::rseq {

constinit SoftLock g_soft_locks[kMaxSoftIds];
constinit bool g_soft_owner_protocol = false;
__thread int32_t t_soft_owner_index CIDMALLOC_TLS_IE = -1;

namespace {

constexpr uint32_t kWords = kOwnedSoftIds / 64;
static_assert(kOwnedSoftIds % 64 == 0);
// Bit i set: soft index i is owned by a live thread.  Set and cleared with
// acq_rel RMWs: the release of ReleaseOnExit's clear pairs with the acquire
// of the CAS in AllocateIndex that next claims the bit, so a new owner,
// which under the owner protocol takes no lock, sees what the last owner
// did to the ID's data: its lock-free operations, and what the exit
// callback did after QuiesceId let go of the lock (the allocator's drain).
constinit std::atomic<uint64_t> g_used[kWords];

// The calling thread's soft index, or -1.  Not a cache of the bitmap: a
// thread beyond kMaxSoftIds shares an index it does not own (t_owned false).
__thread int32_t t_index CIDMALLOC_TLS_IE = -1;
__thread bool t_owned CIDMALLOC_TLS_IE = false;

// t_soft_owner_index from the three it depends on.
void SetOwnerIndex() {
  t_soft_owner_index =
      t_index >= 0 && t_owned && g_soft_owner_protocol ? t_index : -1;
}

// Written by InitSoftIds during Init, before init_state's release store;
// read-only afterwards.
pthread_key_t g_exit_key;
bool g_exit_key_ok = false;
// Written once before threads use soft IDs (SetSoftIdExitCallback's
// contract); read by exiting threads.
void (*g_exit_callback)(uint32_t id) = nullptr;

void ReleaseOnExit(void*) {
  const int32_t index = t_index;
  if (index < 0) return;
  // From here on the thread's operations take locks on shared IDs.
  t_soft_owner_index = -1;
  if (g_exit_callback != nullptr) {
    g_exit_callback(g_process.num_rseq_ids + static_cast<uint32_t>(index));
  }
  // Keep t_index: allocations later in this thread's exit (destructors of
  // keys after ours, up to PTHREAD_DESTRUCTOR_ITERATIONS rounds) share the
  // index instead of claiming a new one that nothing would release.
  if (t_owned) {
    g_used[index / 64].fetch_and(~(uint64_t{1} << (index % 64)),
                                 std::memory_order_acq_rel);
    t_owned = false;
  }
}

int32_t AllocateIndex() {
  for (uint32_t w = 0; w < kWords; ++w) {
    uint64_t bits = g_used[w].load(std::memory_order_relaxed);
    while (bits != ~uint64_t{0}) {
      const int bit = __builtin_ctzll(~bits);
      if (g_used[w].compare_exchange_weak(bits, bits | (uint64_t{1} << bit),
                                          std::memory_order_acq_rel)) {
        t_owned = true;
        return static_cast<int32_t>(w * 64 + bit);
      }
    }
  }
  // All owned: share one, chosen by thread id.  The lock keeps it correct.
  t_owned = false;
  return static_cast<int32_t>(
      kOwnedSoftIds +
      static_cast<uint32_t>(syscall(SYS_gettid)) % kSharedSoftIds);
}

// Some ID's lock, trying `first` and then the IDs after it among the
// `count` starting at `base`; yields while all are held.
uint32_t LockAnyOf(uint32_t base, uint32_t count, uint32_t first) {
  for (;;) {
    for (uint32_t k = 0; k < count; ++k) {
      const uint32_t index = base + (first - base + k) % count;
      if (SoftTryLock(index)) return index;
    }
    syscall(SYS_sched_yield);
  }
}

// Waits until `index`'s lock is free and takes it.
void LockWait(uint32_t index) {
  while (!SoftTryLock(index)) syscall(SYS_sched_yield);
}

// `index` is the calling thread's own ID.
bool IsOwnIndex(uint32_t index) {
  return t_owned && static_cast<uint32_t>(t_index) == index;
}

// membarrier(2): a full barrier on every cpu running one of our threads.
bool Membarrier(int cmd) {
  const int saved = errno;
  const long r = syscall(SYS_membarrier, cmd, 0, 0);
  errno = saved;
  return r == 0;
}

// Whether WaitForOwner waits for a busy owner or gives up at once.
enum class OwnerWait : uint8_t { kWait, kTry };

// The locker's half of the owner protocol: with `index`'s lock held, waits
// until its owner is not busy.  False if the owner is the calling thread,
// busy on it (this call interrupted its own operation), or (kTry) if the
// owner is busy at all.
bool WaitForOwner(uint32_t index, OwnerWait wait = OwnerWait::kWait) {
  if (!g_soft_owner_protocol || index >= kOwnedSoftIds) return true;
  SoftLock& l = g_soft_locks[index];
  if (IsOwnIndex(index)) {
    // Our own ID: no other thread runs the owner protocol on it.
    return l.busy.load(std::memory_order_relaxed) == 0;
  }
  // Stands in for the owner's fence between its busy store and its load of
  // `held` (soft_ids.h).  Registered at Init; it cannot fail afterwards
  // but for a kernel bug, and then waiting for busy is the best left.
  Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  // Acquire: pairs with the owner's release store of 0, so the locker sees
  // the data the operation wrote.
  while (l.busy.load(std::memory_order_acquire) != 0) {
    if (wait == OwnerWait::kTry) return false;
    syscall(SYS_sched_yield);
  }
  return true;
}

uint32_t OwnIndex() {
  if (CIDMALLOC_LIKELY(t_index >= 0)) return static_cast<uint32_t>(t_index);
  EnsureInit();
  t_index = AllocateIndex();
  SetOwnerIndex();
  // A non-null value makes the destructor run at thread exit.  Our key is
  // created during Init, among the first keys, so this does not allocate.
  if (g_exit_key_ok) pthread_setspecific(g_exit_key, &t_index);
  return static_cast<uint32_t>(t_index);
}

}  // namespace

uint32_t CurrentSoftId() { return g_process.num_rseq_ids + OwnIndex(); }

SoftHold SoftEnter() {
  const uint32_t own = OwnIndex();
  if (!g_soft_owner_protocol) return {LockAnyOf(0, kMaxSoftIds, own), true};
  if (t_soft_owner_index >= 0 && SoftOwnerBegin(g_soft_locks[own])) {
    return {own, false};
  }
  return {LockAnyOf(kOwnedSoftIds, kSharedSoftIds,
                    kOwnedSoftIds + own % kSharedSoftIds),
          true};
}

void SoftExit(SoftHold h) {
  if (h.locked) return SoftUnlock(h.index);
  SoftOwnerEnd(g_soft_locks[h.index]);
}

bool SoftLockExclusive(uint32_t index) {
  LockWait(index);
  if (WaitForOwner(index)) return true;
  SoftUnlock(index);
  return false;
}

bool SoftTryLockExclusive(uint32_t index) {
  if (!SoftTryLock(index)) return false;
  if (WaitForOwner(index, OwnerWait::kTry)) return true;
  SoftUnlock(index);
  return false;
}

void InitSoftIds(SoftProtocol wanted) {
  g_exit_key_ok = pthread_key_create(&g_exit_key, ReleaseOnExit) == 0;
  g_soft_owner_protocol =
      wanted == SoftProtocol::kOwner &&
      Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
}

void LockSoftIdsForFork() {
  for (uint32_t i = 0; i < kMaxSoftIds; ++i) LockWait(i);
  if (!g_soft_owner_protocol) return;
  // One barrier for all the owners, then wait for each (an owner busy on
  // its ID finishes; one that comes later finds the lock held).  The
  // forking thread's own ID is not waited for: if it is busy, fork() was
  // called from a signal handler inside the thread's own operation, and
  // the child gets that operation half done, as it would any other state
  // of a thread interrupted there.
  Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  for (uint32_t i = 0; i < kOwnedSoftIds; ++i) {
    if (IsOwnIndex(i)) continue;
    // Acquire: pairs with the owner's release store of 0.
    while (g_soft_locks[i].busy.load(std::memory_order_acquire) != 0) {
      syscall(SYS_sched_yield);
    }
  }
}

void UnlockSoftIdsAfterFork() {
  for (uint32_t i = 0; i < kMaxSoftIds; ++i) SoftUnlock(i);
}

void ResetSoftIdsInChild() {
  for (auto& w : g_used) w.store(0, std::memory_order_relaxed);
  for (auto& l : g_soft_locks) {
    l.held.store(0, std::memory_order_relaxed);
    l.busy.store(0, std::memory_order_relaxed);
  }
  // The parent's choice stands (its knob was read, and warned about, once);
  // only the membarrier registration, which belongs to the parent's mm,
  // must be made again.
  g_soft_owner_protocol =
      g_soft_owner_protocol &&
      Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
  SetOwnerIndex();
  if (t_index >= 0 && t_owned) {
    g_used[t_index / 64].store(uint64_t{1} << (t_index % 64),
                               std::memory_order_relaxed);
  }
}

uint32_t SoftIdsInUse() {
  uint32_t n = 0;
  for (auto& w : g_used) {
    n += static_cast<uint32_t>(
        __builtin_popcountll(w.load(std::memory_order_relaxed)));
  }
  return n;
}

void SetSoftIdExitCallback(void (*fn)(uint32_t id)) { g_exit_callback = fn; }

}  // namespace cidmalloc::rseq
