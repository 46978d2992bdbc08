// allocator/api/background.h: the background thread
// (CIDMALLOC_BACKGROUND_THREAD=on; off by default).
//
// Without it, the idle-cache scan (CIDMALLOC_CACHE_IDLE_MS) and the delayed
// release of free memory (CIDMALLOC_RELEASE_DELAY_MS) run inside the
// process's own slow paths, so a process that goes quiet keeps its caches
// and its free pages until it allocates or frees again.  With it, one
// thread of the allocator's own wakes every tick (half the shorter of the
// two periods) and runs both: front_end::MaybeDrainIdle and
// page_heap::RunAutomaticRelease.  The slow paths then leave the idle scan
// to it (front_end::SetIdleScanner), so that no malloc or free pays for one.
// jemalloc's background_thread option does the same job; Google's tcmalloc
// leaves starting such a thread to the program.
//
// Starting: not during initialisation (which may run inside the dynamic
// loader or a constructor) but from the first allocation slow path (a
// refill, a large allocation) one tick after it, so that short-lived
// processes (a compiler driver, git, sort) never start one; or earlier,
// from the first such slow path after the heap has mapped more than
// CIDMALLOC_RELEASE_BYTES in all (os::BytesMappedEver), so that a process
// that allocates much at once and then only frees or sleeps (everything in
// its first tick) has a thread to give the memory back.  Never from a
// free: glibc frees a dead thread's TLS while it holds the lock of its
// stack cache, which pthread_create takes too.  pthread_create allocates
// (the new thread's DTV), so the start happens with no allocator lock
// held, and the state machine below keeps the nested malloc from starting
// a second thread.  The call goes to whatever pthread_create the process
// resolves: a wrapper (a profiler's) that waits for a lock its caller's
// malloc holds would deadlock, as it would with any allocator that starts
// a thread.  The thread blocks every signal, is detached and is called
// "cidmalloc-bg".  If it cannot be created (seccomp, RLIMIT_NPROC), a
// one-line warning says so and the slow paths keep doing the work.
//
// fork: the child has no background thread.  Its state goes back to
// "pending" and the slow paths scan again, so a child that lives on starts
// its own one tick later.
#ifndef CIDMALLOC_ALLOCATOR_API_BACKGROUND_H_
#define CIDMALLOC_ALLOCATOR_API_BACKGROUND_H_

#include <stdint.h>

#include <atomic>

#include "allocator/os/config.h"
#include "rseq/state.h"  // CIDMALLOC_HIDDEN, CIDMALLOC_UNLIKELY

namespace cidmalloc::api {

enum class BackgroundState : uint8_t {
  kOff,       // Not asked for, or nothing to do (both periods 0).
  kPending,   // Asked for; the first slow path after the start time (or
              // once the heap is large) starts it.
  kStarting,  // One slow path is creating it.
  kRunning,
  kFailed,    // pthread_create failed; the slow paths do the work.
};

// Written by BackgroundInit, by the one slow path that wins the CAS from
// kPending, and by the fork child; read (relaxed) by every slow path.
// Relaxed throughout: the state only elects who starts the thread; the
// thread reads nothing but the configuration, published by
// initialisation's release store before any slow path runs.
extern std::atomic<BackgroundState> g_background_state CIDMALLOC_HIDDEN;

// From initialisation (before any slow path): kPending if `config` asks for
// the thread and gives it something to do, else kOff.
void BackgroundInit(const os::Config* config);

// The allocation slow paths' hook: starts the thread if it is pending and
// due.
__attribute__((noinline)) void StartBackgroundIfDue();
inline void MaybeStartBackground() {
  if (CIDMALLOC_UNLIKELY(g_background_state.load(std::memory_order_relaxed) ==
                         BackgroundState::kPending)) {
    StartBackgroundIfDue();
  }
}

// The fork child's handler (see above).
void BackgroundForkChild();

// The thread's ticks so far, and a state's name in cidmalloc_stats
// (statistics).
uint64_t BackgroundTicks();
const char* BackgroundStateName(BackgroundState s);

}  // namespace cidmalloc::api

#endif  // CIDMALLOC_ALLOCATOR_API_BACKGROUND_H_
