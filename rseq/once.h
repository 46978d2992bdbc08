// rseq/once.h: a gate for data that one thread builds once, without a lock
// or an allocation, while any others that need it wait (the cpu -> node
// table, the initial environment's knobs).
#ifndef CIDMALLOC_RSEQ_ONCE_H_
#define CIDMALLOC_RSEQ_ONCE_H_

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace cidmalloc {

class OnceGate {
 public:
  constexpr OnceGate() = default;

  // Acquire: pairs with Publish()'s release store, so that a caller that
  // sees true sees the data complete.
  bool Done() const { return state_.load(std::memory_order_acquire) == 2; }
  // True for the one caller that may build the data (then Publish()).  Its
  // acquire pairs with nothing: 0 is only the initial value, and the claim
  // only needs the CAS to make the caller the one writer.
  bool TryClaim() {
    int expected = 0;
    return state_.compare_exchange_strong(expected, 1,
                                          std::memory_order_acquire);
  }
  // Release: the data is complete before the gate says so.
  void Publish() { state_.store(2, std::memory_order_release); }
  // build() once, by whichever caller claims the gate; the others wait
  // (yielding) until it is published.
  template <typename Build>
  void Run(Build build) {
    if (Done()) return;
    if (TryClaim()) {
      build();
      Publish();
      return;
    }
    while (!Done()) syscall(SYS_sched_yield);
  }

 private:
  std::atomic<int> state_{0};  // 0 unbuilt, 1 being built, 2 built.
};

}  // namespace cidmalloc

#endif  // CIDMALLOC_RSEQ_ONCE_H_
