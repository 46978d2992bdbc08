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

// glibc (2.32 and later) keeps it true until the process first creates a
// thread with pthread_create, and never sets it back.  Weak: a libc that
// does not define it (or a static link that does not pull it in) leaves
// its address null, which SingleThreaded() reads as "several threads".
extern "C" char __libc_single_threaded __attribute__((weak));

namespace cidmalloc::os {

// Whether the process has only the calling thread, as glibc's own malloc
// asks before it takes an arena's lock.  While it is true no other thread
// exists, and none can start before the caller returns from the allocator
// (only it could start one), so a lock needs no atomic instruction.
// Threads made by a raw clone() are not counted: with those, glibc's malloc
// is as unsafe.
inline bool SingleThreaded() {
  return &__libc_single_threaded != nullptr && __libc_single_threaded != 0;
}

// How many SpinLocks the calling thread holds.  Work that is optional and
// takes other locks (the front end's idle scan) does not run where it is
// not 0: there it would be a signal handler's allocation that interrupted
// this thread inside the allocator, and could wait forever for a lock its
// own thread holds.  Only this thread reads or writes it.
extern __thread uint32_t t_spinlocks_held
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
// A fork child's only thread holds nothing once every lock is reset.
inline void ForgetSpinLocksAfterFork() { t_spinlocks_held = 0; }

class SpinLock {
 public:
  // t_spinlocks_held covers the lock from before it is taken until after
  // it is released, so that a signal handler never sees 0 while the lock
  // is held; the signal fences keep the compiler from moving the count
  // across the lock's own operations.  They pair with no other thread: the
  // count's readers (MaybeDrainIdle, StartBackgroundIfDue) that matter run
  // in a signal handler on this thread.
  void Lock() {
    ++t_spinlocks_held;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // One thread: a load and a store instead of a locked exchange (about
    // half of a 512 KiB malloc + free pair here, which takes two locks).  A
    // signal handler that interrupts them and takes the lock has let it go
    // again before the store.  Held already (a handler that interrupted
    // this thread under the lock): LockSlow, which waits as it would.
    if (SingleThreaded() && state_.load(std::memory_order_relaxed) == 0) {
      state_.store(1, std::memory_order_relaxed);
      return;
    }
    // Acquire pairs with the release in Unlock(): everything the previous
    // holder wrote under the lock is visible to the next one.
    if (__builtin_expect(
            state_.exchange(1, std::memory_order_acquire) != 0, 0)) {
      LockSlow();
    }
  }
  bool TryLock() {
    ++t_spinlocks_held;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // Acquire: pairs with the release in Unlock(), as in Lock().  One
    // thread: a store, as in Lock().
    if (state_.load(std::memory_order_relaxed) == 0 && SingleThreaded()) {
      state_.store(1, std::memory_order_relaxed);
      return true;
    }
    if (state_.load(std::memory_order_relaxed) != 0 ||
        state_.exchange(1, std::memory_order_acquire) != 0) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
      --t_spinlocks_held;
      return false;
    }
    return true;
  }
  void Unlock() {
    // Release: pairs with the next holder's acquire exchange.
    state_.store(0, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    --t_spinlocks_held;
  }
  bool IsHeld() const { return state_.load(std::memory_order_relaxed) != 0; }
  // For a fork child, where the holder no longer exists.
  void ResetAfterFork() { state_.store(0, std::memory_order_relaxed); }

 private:
  void LockSlow();
  // 0 free, 1 held: taken by an acquire exchange (Lock, TryLock,
  // LockSlow), given back by Unlock()'s release store.
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
