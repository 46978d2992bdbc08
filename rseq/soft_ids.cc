#include "rseq/soft_ids.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cidmalloc::rseq {

constinit SoftLock g_soft_locks[kMaxSoftIds];

namespace {

constexpr uint32_t kWords = kMaxSoftIds / 64;
// Bit i set: soft index i is owned by a live thread.  Set and cleared with
// acq_rel RMWs; ownership hand-over between threads is ordered by the soft
// lock, not by this bitmap, which only avoids sharing.
constinit std::atomic<uint64_t> g_used[kWords];

// The calling thread's soft index, or -1.  Not a cache of the bitmap: a
// thread beyond kMaxSoftIds shares an index it does not own (t_owned false).
__thread int32_t t_index CIDMALLOC_TLS_IE = -1;
__thread bool t_owned CIDMALLOC_TLS_IE = false;

pthread_key_t g_exit_key;
bool g_exit_key_ok = false;
// Written once before threads use soft IDs (SetSoftIdExitCallback's
// contract); read by exiting threads.
void (*g_exit_callback)(uint32_t id) = nullptr;

void ReleaseOnExit(void*) {
  const int32_t index = t_index;
  if (index < 0) return;
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
  return static_cast<int32_t>(static_cast<uint32_t>(syscall(SYS_gettid)) %
                              kMaxSoftIds);
}

uint32_t OwnIndex() {
  if (CIDMALLOC_LIKELY(t_index >= 0)) return static_cast<uint32_t>(t_index);
  EnsureInit();
  t_index = AllocateIndex();
  // A non-null value makes the destructor run at thread exit.  Our key is
  // created during Init, among the first keys, so this does not allocate.
  if (g_exit_key_ok) pthread_setspecific(g_exit_key, &t_index);
  return static_cast<uint32_t>(t_index);
}

}  // namespace

uint32_t CurrentSoftId() { return g_process.num_rseq_ids + OwnIndex(); }

uint32_t SoftLockAny() {
  const uint32_t own = OwnIndex();
  for (;;) {
    for (uint32_t k = 0; k < kMaxSoftIds; ++k) {
      const uint32_t index = (own + k) % kMaxSoftIds;
      if (SoftTryLock(index)) return index;
    }
    syscall(SYS_sched_yield);
  }
}

void SoftLockWait(uint32_t index) {
  while (!SoftTryLock(index)) syscall(SYS_sched_yield);
}

void InitSoftIds() {
  g_exit_key_ok = pthread_key_create(&g_exit_key, ReleaseOnExit) == 0;
}

void LockSoftIdsForFork() {
  for (uint32_t i = 0; i < kMaxSoftIds; ++i) SoftLockWait(i);
}

void UnlockSoftIdsAfterFork() {
  for (uint32_t i = 0; i < kMaxSoftIds; ++i) SoftUnlock(i);
}

void ResetSoftIdsInChild() {
  for (auto& w : g_used) w.store(0, std::memory_order_relaxed);
  for (auto& l : g_soft_locks) l.held.store(0, std::memory_order_relaxed);
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
