// allocator/page_heap/release_decay.h: which free pages have been idle for
// the release delay (CIDMALLOC_RELEASE_DELAY_MS).
//
// Automatic release used to return every committed free page past the
// threshold as soon as a free crossed it.  A program that frees a lot and
// then allocates again soon after (a sort buffer, an index build, the
// phases of a batch job) then paid for the pages twice: an madvise to give
// them back and a page fault, with the kernel clearing the page, to take
// each one again.  jemalloc's dirty_decay_ms is the usual answer; this is a
// simpler one of the same kind.
//
// The decay sees only a count, the node's committed free pages, not which
// pages they are.  Time is cut into kEpochs epochs of delay / kEpochs each,
// and the decay keeps the least count seen in each of the last kEpochs
// epochs.  The least over all of them is a count of pages that stayed free
// through the whole window, and those are the idle pages that release may
// return.  Pages taken again within the delay lower the minimum of their
// epoch, so they are never returned while they are in use.
//
// Only the node's own code updates the count, under the heap lock, when it
// runs: when a free reaches the page heap (Idle) and when pages are taken
// (Note).  A dip seen between two such calls is charged to every epoch in
// between, since the decay cannot tell when it happened.  That errs towards
// keeping pages: a page is returned after being free for between one and
// two delays.  Without the background thread (CIDMALLOC_BACKGROUND_THREAD,
// which calls page_heap::RunAutomaticRelease every tick), a process that
// stops calling into the page heap keeps its idle pages until its next free
// of a span or large block, or its next malloc_trim, as jemalloc does
// without its background thread.
//
// Pure bookkeeping: no lock, clock or system call of its own.  The page
// heap keeps one per node and arena, guarded by that heap's lock
// (node_heap.h).
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_RELEASE_DECAY_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_RELEASE_DECAY_H_

#include <stddef.h>
#include <stdint.h>

namespace cidmalloc::page_heap {

class ReleaseDecay {
 public:
  static constexpr uint32_t kEpochs = 8;

  // The committed free count dropped to `committed` (pages were taken).
  void Note(size_t committed) {
    if (committed < since_min_) since_min_ = committed;
  }

  // The number of committed free pages that have stayed free for at least
  // the last `delay_ms` as of `now_ms`, given the count now, `committed`.
  // (At most `committed`.)  Until a whole window has passed since the first
  // call, nothing is idle.
  size_t Idle(uint64_t now_ms, uint32_t delay_ms, size_t committed) {
    Note(committed);
    const uint64_t epoch_ms = delay_ms / kEpochs > 0 ? delay_ms / kEpochs : 1;
    const uint64_t now = now_ms / epoch_ms;
    // The epochs from the last call's through now's all get the least count
    // seen since that call (including the old one: the dip may have come
    // before its end).
    Lower(epoch_, since_min_);
    if (now != epoch_) {
      const uint64_t steps = now - epoch_ < kEpochs ? now - epoch_ : kEpochs;
      for (uint64_t i = 1; i <= steps; ++i) {
        min_[(now - steps + i) % kEpochs] = since_min_;
      }
      epoch_ = now;
    }
    since_min_ = committed;
    size_t idle = committed;
    for (const size_t m : min_) {
      if (m < idle) idle = m;
    }
    return idle;
  }

  // `pages` committed free pages went back to the OS: they are not in any
  // epoch's count any more.
  void Released(size_t pages) {
    for (size_t& m : min_) m = m > pages ? m - pages : 0;
    since_min_ = since_min_ > pages ? since_min_ - pages : 0;
  }

 private:
  void Lower(uint64_t epoch, size_t value) {
    size_t& m = min_[epoch % kEpochs];
    if (value < m) m = value;
  }

  // The least committed free count seen in each of the last kEpochs epochs;
  // epoch e's is min_[e % kEpochs].  All 0 at first: nothing is idle until
  // a whole window has been seen.
  size_t min_[kEpochs] = {};
  uint64_t epoch_ = 0;     // The epoch of the last Idle call.
  size_t since_min_ = 0;   // The least count since the last Idle call.
};

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_RELEASE_DECAY_H_
