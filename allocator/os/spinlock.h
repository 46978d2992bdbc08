// allocator/os/spinlock.h: a small lock for the short critical sections of
// the page heap and the central lists.
//
// Test-and-test-and-set; after a few hundred spins it yields the cpu, so a
// preempted holder on an oversubscribed machine (2 cores, 32 threads in the
// stress tests) does not make waiters burn their time slice.
#ifndef CIDMALLOC_ALLOCATOR_OS_SPINLOCK_H_
#define CIDMALLOC_ALLOCATOR_OS_SPINLOCK_H_

#include <stdint.h>

#include <atomic>

namespace cidmalloc::os {

class SpinLock {
 public:
  void Lock() {
    // Acquire pairs with the release in Unlock(): everything the previous
    // holder wrote under the lock is visible to the next one.
    if (__builtin_expect(
            state_.exchange(1, std::memory_order_acquire) == 0, 1)) {
      return;
    }
    LockSlow();
  }
  bool TryLock() {
    return state_.load(std::memory_order_relaxed) == 0 &&
           state_.exchange(1, std::memory_order_acquire) == 0;
  }
  void Unlock() { state_.store(0, std::memory_order_release); }
  bool IsHeld() const { return state_.load(std::memory_order_relaxed) != 0; }
  // For a fork child, where the holder no longer exists.
  void ResetAfterFork() { state_.store(0, std::memory_order_relaxed); }

 private:
  void LockSlow();
  std::atomic<uint32_t> state_{0};
};

class SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock* l) : l_(l) { l_->Lock(); }
  ~SpinLockHolder() { l_->Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock* l_;
};

}  // namespace cidmalloc::os

#endif  // CIDMALLOC_ALLOCATOR_OS_SPINLOCK_H_
