// allocator/api/background.cc: the background thread (background.h).
#include "allocator/api/background.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include "allocator/front_end/front_end.h"
#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"
#include "allocator/page_heap/page_heap.h"
#include "rseq/raw_io.h"

namespace cidmalloc::api {

constinit std::atomic<BackgroundState> g_background_state{
    BackgroundState::kOff};

namespace {

// Written by BackgroundInit, before any slow path runs; read by the thread,
// which pthread_create orders after it.
uint32_t g_tick_ms = 0;
// When the first start may happen (os::MonotonicMs).  Relaxed: a stale
// value only moves the start by a slow path.
std::atomic<uint64_t> g_start_ms{0};
// Or earlier, once the heap has mapped more than this (os::BytesMappedEver):
// CIDMALLOC_RELEASE_BYTES, more than a node keeps, so that there is memory
// to give back.  Written by BackgroundInit, before any slow path runs.
uint64_t g_early_start_bytes = 0;
// Relaxed: a statistic (cidmalloc_stats), counted by the thread and reset
// in a fork child.
std::atomic<uint64_t> g_ticks{0};

// Half the shorter of the two periods the thread serves (0 for a period
// that is off), at least 1 ms; 0 if both are off.
uint32_t TickMs(const os::Config& c) {
  uint32_t shortest = 0;
  for (const uint32_t period : {c.cache_idle_ms, c.release_delay_ms}) {
    if (period != 0 && (shortest == 0 || period < shortest)) shortest = period;
  }
  if (shortest == 0) return 0;
  return shortest / 2 > 0 ? shortest / 2 : 1;
}

void* BackgroundMain(void*) {
  prctl(PR_SET_NAME, "cidmalloc-bg", 0, 0, 0);
  const uint32_t tick = g_tick_ms;
  for (;;) {
    timespec left{static_cast<time_t>(tick / 1000),
                  static_cast<long>(tick % 1000) * 1000000L};
    // Every signal is blocked, but a stop and continue (SIGSTOP, ptrace)
    // can still cut the sleep short.
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &left, &left) == EINTR) {
    }
    front_end::MaybeDrainIdle(os::MonotonicMs());
    page_heap::RunAutomaticRelease();
    g_ticks.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

// On fd 2, like the allocator's other messages (and glibc's malloc's).
void WarnNotStarted(int err) {
  RawBuffer b;
  b.Str("cidmalloc: warning: CIDMALLOC_BACKGROUND_THREAD=on, but the thread "
        "could not be created (error ");
  b.Udec(static_cast<uint64_t>(err));
  b.Str("); the slow paths do its work\n");
  b.WriteTo(2);
}

// Creates the thread with every signal blocked (the mask is inherited), so
// that no signal meant for the program is delivered to it.  The stack is
// glibc's default size: only the pages it touches (a few KiB: an idle
// drain's batch buffer and the calls under it) become resident, and a
// smaller request would be shared with the program's static TLS, which
// can leave almost nothing.
int CreateThread() {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int err = pthread_create(&thread, &attr, BackgroundMain, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return err;
}

// "Pending", with the first start allowed one tick from now (at start-up,
// and again in a fork child); "off" if the clock cannot be read.
void ArmStart() {
  const uint64_t now = os::MonotonicMs();
  if (now == 0) {
    g_background_state.store(BackgroundState::kOff, std::memory_order_relaxed);
    return;
  }
  g_start_ms.store(now + g_tick_ms, std::memory_order_relaxed);
  g_background_state.store(BackgroundState::kPending,
                           std::memory_order_relaxed);
}

}  // namespace

void BackgroundInit(const os::Config* config) {
  g_tick_ms = config->background_thread ? TickMs(*config) : 0;
  g_early_start_bytes = config->release_threshold;
  if (g_tick_ms == 0) {
    g_background_state.store(BackgroundState::kOff, std::memory_order_relaxed);
    return;
  }
  ArmStart();
}

void StartBackgroundIfDue() {
  // Not from a signal handler that interrupted the allocator: the nested
  // allocations of pthread_create would wait for the locks it holds.
  if (os::t_spinlocks_held != 0) return;
  const uint64_t now = os::MonotonicMs();
  if (now < g_start_ms.load(std::memory_order_relaxed) &&
      os::BytesMappedEver() <= g_early_start_bytes) {
    return;
  }
  BackgroundState expected = BackgroundState::kPending;
  if (!g_background_state.compare_exchange_strong(
          expected, BackgroundState::kStarting, std::memory_order_relaxed)) {
    return;  // Another slow path starts it, or it runs already.
  }
  // pthread_create allocates (its nested malloc sees kStarting) and may
  // leave errno changed; the caller is a malloc or free.
  const int saved = errno;
  const int err = CreateThread();
  errno = saved;
  if (err != 0) {
    g_background_state.store(BackgroundState::kFailed,
                             std::memory_order_relaxed);
    WarnNotStarted(err);
    return;
  }
  front_end::SetIdleScanner(front_end::IdleScanner::kBackgroundThread);
  g_background_state.store(BackgroundState::kRunning,
                           std::memory_order_relaxed);
}

void BackgroundForkChild() {
  const BackgroundState s = g_background_state.load(std::memory_order_relaxed);
  if (s == BackgroundState::kOff || s == BackgroundState::kFailed) return;
  front_end::SetIdleScanner(front_end::IdleScanner::kSlowPaths);
  g_ticks.store(0, std::memory_order_relaxed);
  ArmStart();
}

const char* BackgroundStateName(BackgroundState s) {
  switch (s) {
    case BackgroundState::kOff:
      return "off";
    case BackgroundState::kPending:
      return "pending";
    case BackgroundState::kStarting:
      return "starting";
    case BackgroundState::kRunning:
      return "running";
    case BackgroundState::kFailed:
      return "failed";
  }
  return "?";
}

uint64_t BackgroundTicks() {
  return g_ticks.load(std::memory_order_relaxed);
}

}  // namespace cidmalloc::api
