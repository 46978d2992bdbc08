// tests/rseq/stress.h: what the stress test's sources share (stress_test.cc,
// stress_threads.cc): what one run does (Scenario), the state its threads
// share (World, which the signal handler reaches through g_world) and the
// threads' bodies, defined in stress_threads.cc.
#ifndef CIDMALLOC_TESTS_RSEQ_STRESS_H_
#define CIDMALLOC_TESTS_RSEQ_STRESS_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <memory>
#include <ostream>
#include <vector>

#include "rseq/rseq.h"
#include "tests/rseq/stack_table.h"
#include "tests/rseq/test_util.h"

#ifndef CIDMALLOC_RSEQ_INJECT
#error "stress_test must be linked with //rseq:rseq_testing"
#endif

namespace cidmalloc_rseq_stress {

using namespace cidmalloc_test;  // NOLINT
namespace rs = ::cidmalloc::rseq;

// ---- What one run does ----------------------------------------------------------

struct Scenario {
  const char* name;
  int threads;
  bool pinned;           // Thread i pinned to allowed cpu i % n.
  uint32_t inject[4];    // cidmalloc_rseq_inject_loops during the run.
  bool yield;            // sched_yield between a pop and the push back.
  bool signals;          // A SIGUSR1 storm on the workers.
  bool drain;            // A drainer thread quiescing IDs.
  uint32_t capacity;     // Slots of every per-ID stack.
  uint32_t iters;        // Per worker.
  bool adjust = false;   // Workers also resize their stack (AdjustCapacity)
                         // within [0, capacity].
};

// gtest prints a failing parameter with this.
inline void PrintTo(const Scenario& sc, std::ostream* os) { *os << sc.name; }

// ---- Shared state (the signal handler reaches it through g_world) -------------

struct World {
  StackTable* stacks = nullptr;
  Counters* counters = nullptr;
  uint32_t items = 0;
  // 0: the item sits on a stack (or is being pushed); 1: someone holds it.
  std::unique_ptr<std::atomic<uint8_t>[]> held;
  std::atomic<uint64_t> errors{0};
  // Successful pushes by the workers, for the drainer to pace itself by.
  std::atomic<uint64_t> progress{0};
  std::atomic<bool> has_first{false};
  char first_error[200] = {0};

  // Async-signal-safe.
  void Error(const char* what, uint32_t value) {
    errors.fetch_add(1, std::memory_order_relaxed);
    if (!has_first.exchange(true)) {
      size_t n = 0;
      for (const char* p = what; *p != '\0' && n + 16 < sizeof first_error;) {
        first_error[n++] = *p++;
      }
      const char* tail = " (";
      for (const char* p = tail; *p != '\0';) first_error[n++] = *p++;
      char digits[12];
      int d = 0;
      do {
        digits[d++] = static_cast<char>('0' + value % 10);
        value /= 10;
      } while (value != 0 && d < 11);
      while (d > 0 && n + 2 < sizeof first_error) first_error[n++] = digits[--d];
      first_error[n++] = ')';
      first_error[n] = '\0';
    }
  }

  // A popped item: must be well formed and not held by anyone else.
  bool Take(void* item) {
    const uint32_t i = IndexOf(item);
    if (i == 0 || i > items) {
      Error("popped a foreign value", 0);
      return false;
    }
    if (held[i].exchange(1, std::memory_order_acq_rel) != 0) {
      Error("popped an item someone already holds (duplicate): item", i);
    }
    return true;
  }
  // Before pushing.
  void Release(void* item) {
    held[IndexOf(item)].store(0, std::memory_order_release);
  }
  // After a push that reported failure: nobody may have taken it.
  void Unrelease(void* item) {
    const uint32_t i = IndexOf(item);
    if (held[i].exchange(1, std::memory_order_acq_rel) != 0) {
      Error("a failed push still published its item: item", i);
    }
  }
};

inline World* g_world = nullptr;

// ---- The threads of a run (stress_threads.cc) -----------------------------------

// The SIGUSR1 handler: in an armed worker, a counter add and a pop (kept)
// or the push back of what it holds, on the workers' stacks and counters.
void OnSigusr1(int);

struct WorkerResult {
  std::vector<void*> held;
  std::vector<void*> handler_held;
  int64_t adds = 0;
  int64_t handler_adds = 0;
  uint64_t handler_runs = 0;
  uint64_t pops = 0, pushes = 0, empty_pops = 0, full_pushes = 0;
};

// A worker thread: counts itself in `ready`, waits for `go`, then runs
// `sc.iters` rounds of a counter add, a pop and a push back (single or
// batch; with `sc.adjust` also capacity changes), starting with the items
// of `initial`; reports in `out` and counts itself in `done`.
void Worker(World& w, const Scenario& sc, int index, const std::vector<int>& cpus,
            std::vector<void*> initial, std::atomic<int>* ready,
            std::atomic<bool>* go, std::atomic<int>* done, WorkerResult* out);

// IDs worth watching and draining: the rseq IDs and the soft IDs the
// workers (and the drainer) are likely to own.
std::vector<uint32_t> HotIds(int threads);

struct DrainResult {
  std::vector<void*> spare;
  uint64_t drains = 0, drained_items = 0;
};

// Takes IDs away from the workers one at a time: unpublish, quiesce, check
// that nobody touches the stack any more, empty it, republish.  Gives the
// items back through ordinary pushes.
void Drainer(World& w, const std::vector<uint32_t>& ids,
             std::atomic<bool>* stop, DrainResult* out);

// Sends SIGUSR1 to every thread of `tids`, every 20 us, until `stop`.
void SignalStorm(std::vector<pthread_t>* tids, std::atomic<bool>* stop,
                 uint64_t* sent);

}  // namespace cidmalloc_rseq_stress

#endif  // CIDMALLOC_TESTS_RSEQ_STRESS_H_
