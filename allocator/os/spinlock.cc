#include "allocator/os/spinlock.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace cidmalloc::os {

__thread uint32_t t_spinlocks_held = 0;

void SpinLock::LockSlow() {
  for (int spins = 0;; ++spins) {
    // Acquire: pairs with the release in Unlock(), as in Lock().
    if (state_.load(std::memory_order_relaxed) == 0 &&
        state_.exchange(1, std::memory_order_acquire) == 0) {
      return;
    }
    if (spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      syscall(SYS_sched_yield);
    }
  }
}

}  // namespace cidmalloc::os
