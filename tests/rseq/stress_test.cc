// tests/rseq/stress_test.cc: many threads on few cores hammering the per-ID
// operations, with the test library's delay loops widening every critical
// section, with yields, with a signal storm whose handler runs the same
// operations, and with a drainer that takes IDs away under the workers'
// feet (QuiesceId).  Two invariants must hold at the end of every run:
//
//   counters      the per-ID counters sum to exactly the number of adds
//                 made (by the workers and by their signal handlers);
//   conservation  every item is in exactly one place: on one stack, in one
//                 worker's hands, in one handler's hands or in the
//                 drainer's spare list; no stack holds more than its
//                 capacity and nothing outside the documented layout is
//                 written.
//
// Items also carry an ownership flag that is flipped on every pop and
// before every push, which catches a duplicate at the moment it is popped.
//
// Half of the single pops and pushes first try the inline owner-protocol
// operations (SoftOwnerPop / SoftOwnerPush: none mode's fast path), and
// the signal handler always does, so that in none mode the handler
// interrupts them and the drainer quiesces IDs under them.
//
// Linked with //rseq:rseq_testing (CIDMALLOC_RSEQ_INJECT and
// CIDMALLOC_RSEQ_COMPARE_TWICE).  Built once per environment (BUILD):
// cid, cpu and none modes, and own registration.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "rseq/rseq.h"
#include "tests/rseq/stack_table.h"
#include "tests/rseq/test_util.h"

#ifndef CIDMALLOC_RSEQ_INJECT
#error "stress_test must be linked with //rseq:rseq_testing"
#endif

namespace {

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
void PrintTo(const Scenario& sc, std::ostream* os) { *os << sc.name; }

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

World* g_world = nullptr;

// Per-thread state of the signal handler: plain initial-exec TLS, touched
// only by the thread itself (in or out of the handler).
constexpr uint32_t kHandlerHeldMax = 256;
struct HandlerState {
  bool armed;
  uint32_t n;
  int64_t adds;
  uint64_t runs;
  void* held[kHandlerHeldMax];
};
__thread HandlerState t_handler;

// Pop and Push, first trying the allocator's inline fast-path sections
// when `owner_first`: the owner-protocol operations (none mode) or, with
// raw rseq IDs, PopUnchecked / PushUnchecked on the wide table (their own
// instructions: the ID's low 16 bits, no bound check), every other time
// in cid mode the mm_cid variant (IdBound::kWideMmCid: the allocator's
// inline sections, which an abort fails instead of restarting).  Elsewhere
// those fail at once.  A failed attempt leaves everything as it was, so
// the full operation follows.
__thread unsigned t_flip;
bool UseMmCid() { return rs::RawIdIsMmCid() && (++t_flip & 1) != 0; }

void* PopMaybeOwner(void* const* table, uintptr_t off, bool owner_first) {
  void* item;
  if (owner_first) {
    if (rs::SoftOwnerPop(table, off, &item)) return item;
    if (UseMmCid()) {
      if (rs::PopUnchecked<rs::IdKind::kRaw, rs::IdBound::kWideMmCid>(
              table, off, &item)) {
        return item;
      }
    } else if (rs::CurrentIdKind() == rs::IdKind::kRaw &&
               rs::PopUnchecked(table, off, &item)) {
      return item;
    }
  }
  return rs::Pop(table, off);
}
bool PushMaybeOwner(void* const* table, uintptr_t off, void* item,
                    bool owner_first) {
  if (owner_first) {
    if (rs::SoftOwnerPush(table, off, item)) return true;
    if (UseMmCid()) {
      if (rs::PushUnchecked<rs::IdKind::kRaw, rs::IdBound::kWideMmCid>(
              table, off, item)) {
        return true;
      }
    } else if (rs::CurrentIdKind() == rs::IdKind::kRaw &&
               rs::PushUnchecked(table, off, item)) {
      return true;
    }
  }
  return rs::Push(table, off, item);
}

// Pushes `*n` items of `v[0..*n)` (the last ones), keeping what does not
// fit.  Returns how many were pushed.
uint32_t PushBack(World& w, void** v, uint32_t* n, bool batch,
                  bool owner_first = true) {
  if (*n == 0) return 0;
  if (!batch) {
    void* it = v[*n - 1];
    w.Release(it);
    if (PushMaybeOwner(w.stacks->table(), w.stacks->offset(), it,
                       owner_first)) {
      --*n;
      return 1;
    }
    w.Unrelease(it);
    return 0;
  }
  for (uint32_t i = 0; i < *n; ++i) w.Release(v[i]);
  const uint32_t pushed =
      rs::PushBatch(w.stacks->table(), w.stacks->offset(), v, *n);
  if (pushed > *n) {
    w.Error("PushBatch pushed more than asked", pushed);
    return 0;
  }
  for (uint32_t i = pushed; i < *n; ++i) w.Unrelease(v[i]);
  // Keep the unpushed tail: move it to the front.
  for (uint32_t i = pushed; i < *n; ++i) v[i - pushed] = v[i];
  *n -= pushed;
  return pushed;
}

void OnSigusr1(int) {
  const int saved_errno = errno;
  HandlerState& h = t_handler;
  World* w = g_world;
  if (h.armed && w != nullptr) {
    ++h.runs;
    rs::CounterAdd(w->counters->base(), 1);
    ++h.adds;
    // Odd runs pop an item and keep it; even runs push back what the
    // handler holds.  A pop or push that interrupts the thread's own on
    // the same stack without stepping aside then duplicates or loses an
    // item (a pop pushed back at once would mostly undo itself).  The
    // owner-protocol operations go first: they must step aside when the
    // handler interrupted the thread's own operation.
    if (h.runs % 2 == 0) {
      while (h.n > 0 && PushBack(*w, h.held, &h.n, false) == 1) {
      }
    } else if (h.n < kHandlerHeldMax) {
      void* it = PopMaybeOwner(w->stacks->table(), w->stacks->offset(), true);
      if (it != nullptr && w->Take(it)) h.held[h.n++] = it;
    }
  }
  errno = saved_errno;
}

struct WorkerResult {
  std::vector<void*> held;
  std::vector<void*> handler_held;
  int64_t adds = 0;
  int64_t handler_adds = 0;
  uint64_t handler_runs = 0;
  uint64_t pops = 0, pushes = 0, empty_pops = 0, full_pushes = 0;
};

void Worker(World& w, const Scenario& sc, int index, const std::vector<int>& cpus,
            std::vector<void*> initial, std::atomic<int>* ready,
            std::atomic<bool>* go, std::atomic<int>* done, WorkerResult* out) {
  if (sc.pinned) PinToCpu(cpus[index % cpus.size()]);
  Rng rng(static_cast<uint64_t>(index) + 1);
  std::vector<void*> held = std::move(initial);
  held.reserve(w.items + 64);
  void* const* table = w.stacks->table();
  const uintptr_t off = w.stacks->offset();
  const uintptr_t base = w.counters->base();
  void* buf[32];

  // First use of every operation before any signal can arrive: a thread's
  // first operation may take the slow path (registration, soft ID).
  rs::CounterAdd(base, 1);
  out->adds = 1;
  if (void* it = rs::Pop(table, off)) {
    if (w.Take(it)) held.push_back(it);
  }
  t_handler.n = 0;
  t_handler.adds = 0;
  t_handler.runs = 0;
  t_handler.armed = true;

  ready->fetch_add(1);
  while (!go->load(std::memory_order_acquire)) sched_yield();

  for (uint32_t it = 0; it < sc.iters; ++it) {
    rs::CounterAdd(base, 1);
    ++out->adds;
    // Take something.
    const uint32_t op = rng.Below(4);
    if (op < 2) {
      void* item = PopMaybeOwner(table, off, op == 0);
      if (item == nullptr) {
        ++out->empty_pops;
      } else if (w.Take(item)) {
        ++out->pops;
        held.push_back(item);
      }
    } else if (op == 2) {
      const uint32_t want = 1 + rng.Below(16);
      const uint32_t n = rs::PopBatch(table, off, buf, want);
      if (n > want) {
        w.Error("PopBatch returned more than asked", n);
      } else {
        if (n == 0) ++out->empty_pops;
        for (uint32_t i = 0; i < n; ++i) {
          if (w.Take(buf[i])) held.push_back(buf[i]);
        }
        out->pops += n;
      }
    }
    if (sc.yield && rng.Below(2) == 0) sched_yield();
    // Give something back (possibly on another ID by now).
    if (!held.empty()) {
      uint32_t n;
      const bool batch = rng.Below(2) == 0;
      if (batch) {
        n = std::min<uint32_t>(static_cast<uint32_t>(held.size()),
                               1 + rng.Below(16));
        void** tail = held.data() + held.size() - n;
        const uint32_t asked = n;
        const uint32_t pushed = PushBack(w, tail, &n, true);
        held.resize(held.size() - asked + n);
        out->pushes += pushed;
        w.progress.fetch_add(pushed, std::memory_order_relaxed);
        if (pushed == 0) ++out->full_pushes;
      } else {
        n = static_cast<uint32_t>(held.size());
        if (PushBack(w, held.data(), &n, false, rng.Below(2) == 0) == 1) {
          held.pop_back();
          ++out->pushes;
          w.progress.fetch_add(1, std::memory_order_relaxed);
        } else {
          ++out->full_pushes;
        }
      }
    }
    if (sc.yield && rng.Below(4) == 0) sched_yield();
    if (sc.adjust && rng.Below(8) == 0) {
      // Shrinking below count is allowed: pushes then fail for a while.
      const int32_t delta = static_cast<int32_t>(rng.Below(17)) - 8;
      const int64_t c = rs::AdjustCapacity(table, off, delta, sc.capacity);
      if (c > static_cast<int64_t>(sc.capacity) || c < -1) {
        w.Error("AdjustCapacity returned a capacity beyond its limit",
                static_cast<uint32_t>(c));
      }
      // -1 only for an absent region, which only the drainer causes.
      if (c == -1 && !sc.drain) w.Error("AdjustCapacity failed", 0);
    }
  }

  // No more signals for this thread: the handler's state is final.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);
  t_handler.armed = false;
  out->handler_held.assign(t_handler.held, t_handler.held + t_handler.n);
  out->handler_adds = t_handler.adds;
  out->handler_runs = t_handler.runs;
  out->held = std::move(held);
  done->fetch_add(1, std::memory_order_release);
}

// IDs worth watching and draining: the rseq IDs and the soft IDs the
// workers (and the drainer) are likely to own.
std::vector<uint32_t> HotIds(int threads) {
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < rs::NumRseqIds(); ++id) ids.push_back(id);
  for (uint32_t k = 0; k < static_cast<uint32_t>(threads) + 8; ++k) {
    const uint32_t id = rs::NumRseqIds() + k;
    if (id < rs::NumIds()) ids.push_back(id);
  }
  return ids;
}

struct DrainResult {
  std::vector<void*> spare;
  uint64_t drains = 0, drained_items = 0;
};

// Takes IDs away from the workers one at a time: unpublish, quiesce, check
// that nobody touches the stack any more, empty it, republish.  Gives the
// items back through ordinary pushes.
void Drainer(World& w, const std::vector<uint32_t>& ids,
             std::atomic<bool>* stop, DrainResult* out) {
  void** table = w.stacks->mutable_table();
  std::vector<void*> spare;
  spare.reserve(w.items);
  Rng rng(4242);
  // At least one drain even if the workers finish before this thread first
  // runs (seen in none mode on an idle machine: the workers took 6 ms).
  do {
    for (uint32_t id : ids) {
      // Let the workers get something done between two drains: under heavy
      // load one fence can take milliseconds, and workers whose every
      // operation fails fast on an unpublished region could otherwise run
      // all their iterations within a few drains (seen: 0 pushes, 2 drains).
      const uint64_t seen = w.progress.load(std::memory_order_relaxed);
      while (w.progress.load(std::memory_order_relaxed) == seen &&
             !stop->load(std::memory_order_acquire)) {
        sched_yield();
      }
      void* region = __atomic_load_n(&table[id], __ATOMIC_RELAXED);
      __atomic_store_n(&table[id], nullptr, __ATOMIC_RELAXED);
      if (!rs::QuiesceId(id)) w.Error("QuiesceId returned false, ID", id);
      rs::Stack* s = w.stacks->stack(id);
      const uint64_t top0 = __atomic_load_n(&s->top, __ATOMIC_RELAXED);
      // Nothing may commit on an unpublished, quiesced ID.  Give an
      // operation that was still in flight time to (wrongly) commit.
      for (int i = 0; i < 2000; ++i) __builtin_ia32_pause();
      if (rng.Below(4) == 0) sched_yield();
      const uint64_t top1 = __atomic_load_n(&s->top, __ATOMIC_RELAXED);
      if (top1 != top0) w.Error("stack changed after QuiesceId, ID", id);
      const std::string chain = w.stacks->CheckChain(id);
      if (!chain.empty()) {
        w.Error(("drained stack: " + chain + ", ID").c_str(), id);
      } else {
        const uint32_t n1 = rs::Stack::CountOf(top1);
        for (void* it : w.stacks->Items(id)) {
          if (w.Take(it)) spare.push_back(it);
        }
        out->drained_items += n1;
      }
      __atomic_store_n(&s->top, uint64_t{0}, __ATOMIC_RELAXED);
      __atomic_store_n(&table[id], region, __ATOMIC_RELEASE);
      ++out->drains;
      // Return some of the spare items through the normal path.
      uint32_t n = std::min<uint32_t>(static_cast<uint32_t>(spare.size()),
                                      1 + rng.Below(16));
      const uint32_t asked = n;
      PushBack(w, spare.data() + spare.size() - n, &n, true);
      spare.resize(spare.size() - asked + n);
      if (stop->load(std::memory_order_acquire) && out->drains > 0) break;
    }
  } while (!stop->load(std::memory_order_acquire));
  out->spare = std::move(spare);
}

void SignalStorm(std::vector<pthread_t>* tids, std::atomic<bool>* stop,
                 uint64_t* sent) {
  const struct timespec pause = {0, 20 * 1000};
  while (!stop->load(std::memory_order_acquire)) {
    for (pthread_t t : *tids) {
      if (pthread_kill(t, SIGUSR1) == 0) ++*sent;
    }
    nanosleep(&pause, nullptr);
  }
}

// ---- The test -------------------------------------------------------------------

class Stress : public ::testing::TestWithParam<Scenario> {};

TEST_P(Stress, CountersAndItemsAreConserved) {
  const Scenario& sc = GetParam();
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  if (sc.drain && rs::NumRseqIds() > 0 && !rs::Process().fence_available) {
    GTEST_SKIP() << "draining rseq IDs needs the rseq fence (Linux 5.10+)";
  }

  StackTable stacks(sc.capacity);
  Counters counters;
  World w;
  w.stacks = &stacks;
  w.counters = &counters;
  w.items = sc.capacity * 3;
  w.held.reset(new std::atomic<uint8_t>[w.items + 1]);
  for (uint32_t i = 0; i <= w.items; ++i) w.held[i].store(1);
  g_world = &w;

  struct sigaction sa, old_sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnSigusr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old_sa), 0);

  for (int i = 0; i < CIDMALLOC_RSEQ_INJECT_POINTS; ++i) {
    cidmalloc_rseq_inject_loops[i] = sc.inject[i];
  }

  // Deal the items out to the workers; they push them in their loops.
  std::vector<std::vector<void*>> initial(sc.threads);
  for (uint32_t i = 1; i <= w.items; ++i) {
    initial[i % sc.threads].push_back(ItemFor(i));
  }

  std::atomic<int> ready{0}, done{0};
  std::atomic<bool> go{false}, stop_side{false};
  std::vector<WorkerResult> results(sc.threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < sc.threads; ++t) {
    workers.emplace_back(Worker, std::ref(w), std::cref(sc), t,
                         std::cref(cpus), std::move(initial[t]), &ready, &go,
                         &done, &results[t]);
  }
  while (ready.load() != sc.threads) sched_yield();

  std::vector<pthread_t> tids;
  for (auto& t : workers) tids.push_back(t.native_handle());
  uint64_t signals_sent = 0;
  std::thread storm;
  if (sc.signals) storm = std::thread(SignalStorm, &tids, &stop_side, &signals_sent);
  const std::vector<uint32_t> hot = HotIds(sc.threads + 1);
  DrainResult drain;
  std::thread drainer;
  if (sc.drain) drainer = std::thread(Drainer, std::ref(w), std::cref(hot), &stop_side, &drain);

  go.store(true, std::memory_order_release);
  // Watch the counts while the workers run.
  uint64_t over_capacity = 0;
  const struct timespec nap = {0, 500 * 1000};
  while (done.load(std::memory_order_acquire) != sc.threads) {
    for (uint32_t id : hot) {
      if (stacks.CountRelaxed(id) > sc.capacity) ++over_capacity;
    }
    nanosleep(&nap, nullptr);
  }
  stop_side.store(true, std::memory_order_release);
  if (storm.joinable()) storm.join();
  if (drainer.joinable()) drainer.join();
  for (auto& t : workers) t.join();

  for (int i = 0; i < CIDMALLOC_RSEQ_INJECT_POINTS; ++i) {
    cidmalloc_rseq_inject_loops[i] = 0;
  }
  sigaction(SIGUSR1, &old_sa, nullptr);
  g_world = nullptr;

  // ---- Verdict.
  EXPECT_EQ(w.errors.load(), 0u) << "first: " << w.first_error;
  EXPECT_EQ(over_capacity, 0u) << "a stack count exceeded its capacity";

  int64_t adds = 0, handler_adds = 0;
  uint64_t handler_runs = 0, pops = 0, pushes = 0, empty = 0, full = 0;
  std::vector<void*> all;
  for (const WorkerResult& r : results) {
    EXPECT_EQ(r.adds, int64_t{sc.iters} + 1);
    adds += r.adds;
    handler_adds += r.handler_adds;
    handler_runs += r.handler_runs;
    pops += r.pops;
    pushes += r.pushes;
    empty += r.empty_pops;
    full += r.full_pushes;
    all.insert(all.end(), r.held.begin(), r.held.end());
    all.insert(all.end(), r.handler_held.begin(), r.handler_held.end());
  }
  all.insert(all.end(), drain.spare.begin(), drain.spare.end());
  const size_t held_outside = all.size();
  stacks.CollectAll(&all);

  EXPECT_EQ(counters.Sum(), adds + handler_adds)
      << "worker adds " << adds << ", handler adds " << handler_adds;
  EXPECT_EQ(counters.CheckCanaries(), "");
  EXPECT_EQ(stacks.CheckLayout(sc.adjust), "");
  EXPECT_EQ(CheckConservation(all, w.items), "");
  // Every item on a stack must be marked free, every held one taken.
  size_t flag_mismatch = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    const uint32_t i = IndexOf(all[k]);
    if (i == 0 || i > w.items) continue;
    if (w.held[i].load() != (k < held_outside ? 1 : 0)) ++flag_mismatch;
  }
  EXPECT_EQ(flag_mismatch, 0u);

  // The run must have exercised what it claims to.
  EXPECT_GT(pops, 0u);
  EXPECT_GT(pushes, 0u);
  if (sc.signals) {
    EXPECT_GT(handler_runs, 0u) << "no signal reached a worker";
  }
  if (sc.drain) {
    EXPECT_GT(drain.drains, 0u);
  }
  printf("%s: mode %s, %d threads, %u iters: pops %lu pushes %lu empty %lu "
         "full %lu; signals sent %lu handled %lu; drains %lu (%lu items); "
         "on stacks %zu, held %zu\n",
         sc.name, rs::ModeName(rs::CurrentMode()), sc.threads, sc.iters,
         static_cast<unsigned long>(pops), static_cast<unsigned long>(pushes),
         static_cast<unsigned long>(empty), static_cast<unsigned long>(full),
         static_cast<unsigned long>(signals_sent),
         static_cast<unsigned long>(handler_runs),
         static_cast<unsigned long>(drain.drains),
         static_cast<unsigned long>(drain.drained_items),
         all.size() - held_outside, held_outside);
}

// Iteration counts keep each target around five seconds on two idle cores;
// the delay loops (~1 cycle per count) dominate where they are set.  In
// none mode only point 0 exists (inside the soft-ID lock).  No section has
// point 3 at the time of writing; its scenario keeps a small count so that
// it stays short once one does.
const Scenario kScenarios[] = {
    // name                threads pin   inject loops [0..3]          yield  sig    drain  cap  iters
    {"plain_pinned",          16, true,  {0, 0, 0, 0},                false, false, false, 64,  300000},
    {"plain_unpinned",        32, false, {0, 0, 0, 0},                false, false, false, 256, 120000},
    {"inject0",               16, false, {20000, 0, 0, 0},            false, false, false, 64,  1500},
    {"inject1_pinned",        16, true,  {0, 20000, 0, 0},            false, false, false, 64,  1500},
    {"inject2",               32, false, {0, 0, 20000, 0},            false, false, false, 128, 1000},
    {"inject3",               16, false, {0, 0, 0, 20000},            false, false, false, 64,  1500},
    {"inject_all",            16, false, {5000, 5000, 5000, 5000},    false, false, false, 64,  1500},
    {"inject2_long",          16, false, {0, 0, 100000, 0},           false, false, false, 64,  300},
    {"yield_pinned",          32, true,  {0, 0, 0, 0},                true,  false, false, 64,  6000},
    {"yield_inject1",         16, false, {0, 2000, 0, 0},             true,  false, false, 256, 6000},
    {"signals",               16, false, {0, 0, 0, 0},                false, true,  false, 64,  250000},
    {"signals_inject_pinned", 32, true,  {2000, 2000, 2000, 2000},    false, true,  false, 64,  2000},
    {"drain",                 32, false, {0, 0, 0, 0},                false, false, true,  64,  100000},
    {"drain_inject2",         16, false, {0, 0, 20000, 0},            false, false, true,  64,  2000},
    {"drain_signals_yield",   16, true,  {0, 5000, 0, 0},             true,  true,  true,  128, 1500},
    // The same with AdjustCapacity (last column) in the mix.
    {"adjust",                32, false, {0, 0, 0, 0},                false, false, false, 64,  80000, true},
    {"adjust_inject1",        16, false, {0, 5000, 0, 0},             false, false, false, 64,  2000,  true},
    {"adjust_signals_drain",  16, true,  {0, 0, 2000, 0},             true,  true,  true,  64,  2000,  true},
};

INSTANTIATE_TEST_SUITE_P(
    Scenarios, Stress, ::testing::ValuesIn(kScenarios),
    [](const ::testing::TestParamInfo<Scenario>& info) {
      return std::string(info.param.name);
    });

// The mode the target asked for (within what the kernel offers) is the one
// being stressed.
TEST(StressSetup, ModeIsTheOneTheTargetAskedFor) {
  const Expectation e = ExpectedForThisProcess();
  const rs::ProcessState& p = rs::Process();
  EXPECT_EQ(static_cast<int>(p.mode), e.mode)
      << "library mode " << rs::ModeName(p.mode) << ", expected "
      << ModeStr(e.mode);
  EXPECT_EQ(static_cast<int>(p.registration), e.registration);
  printf("stressing mode %s, registration %s\n", rs::ModeName(p.mode),
         rs::RegistrationName(p.registration));
  if (e.mode < e.cap) {
    GTEST_SKIP() << "the kernel offers only mode " << ModeStr(e.mode)
                 << "; the scenarios run in that mode";
  }
}

}  // namespace
