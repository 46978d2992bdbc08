// tests/rseq/stress_threads.cc: what the threads of a stress run do: the
// workers and their SIGUSR1 handler, which run the per-ID operations, the
// drainer that quiesces IDs under them and the signal storm (part of the
// stress_*_test binaries; see stress_test.cc).
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "tests/rseq/stress.h"

namespace cidmalloc_rseq_stress {
namespace {

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
// with Path::kInlineFirst: the owner-protocol operations (none mode) or, with
// raw rseq IDs, PopUnchecked / PushUnchecked on the wide table (their own
// instructions: the ID's low 16 bits, no bound check), every other time
// in cid mode the mm_cid variant (IdBound::kWideMmCid: the allocator's
// inline sections, which an abort fails instead of restarting).  Elsewhere
// those fail at once.  A failed attempt leaves everything as it was, so
// the full operation follows.
__thread unsigned t_flip;
bool UseMmCid() { return rs::RawIdIsMmCid() && (++t_flip & 1) != 0; }

enum class Path : uint8_t { kFullOnly, kInlineFirst };
// How PushBack gives items back: one push, or one batch push.
enum class PushHow : uint8_t { kOne, kBatch };

void* PopMaybeOwner(void* const* table, uintptr_t off, Path path) {
  void* item;
  if (path == Path::kInlineFirst) {
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
                    Path path) {
  if (path == Path::kInlineFirst) {
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
uint32_t PushBack(World& w, void** v, uint32_t* n, PushHow how,
                  Path path = Path::kInlineFirst) {
  if (*n == 0) return 0;
  if (how == PushHow::kOne) {
    void* it = v[*n - 1];
    w.Release(it);
    if (PushMaybeOwner(w.stacks->table(), w.stacks->offset(), it, path)) {
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

}  // namespace

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
      while (h.n > 0 && PushBack(*w, h.held, &h.n, PushHow::kOne) == 1) {
      }
    } else if (h.n < kHandlerHeldMax) {
      void* it = PopMaybeOwner(w->stacks->table(), w->stacks->offset(),
                               Path::kInlineFirst);
      if (it != nullptr && w->Take(it)) h.held[h.n++] = it;
    }
  }
  errno = saved_errno;
}

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
      void* item = PopMaybeOwner(
          table, off, op == 0 ? Path::kInlineFirst : Path::kFullOnly);
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
        const uint32_t pushed = PushBack(w, tail, &n, PushHow::kBatch);
        held.resize(held.size() - asked + n);
        out->pushes += pushed;
        w.progress.fetch_add(pushed, std::memory_order_relaxed);
        if (pushed == 0) ++out->full_pushes;
      } else {
        n = static_cast<uint32_t>(held.size());
        const Path path =
            rng.Below(2) == 0 ? Path::kInlineFirst : Path::kFullOnly;
        if (PushBack(w, held.data(), &n, PushHow::kOne, path) == 1) {
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

std::vector<uint32_t> HotIds(int threads) {
  std::vector<uint32_t> ids;
  for (uint32_t id = 0; id < rs::NumRseqIds(); ++id) ids.push_back(id);
  for (uint32_t k = 0; k < static_cast<uint32_t>(threads) + 8; ++k) {
    const uint32_t id = rs::NumRseqIds() + k;
    if (id < rs::NumIds()) ids.push_back(id);
  }
  return ids;
}

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
      for (int i = 0; i < 2000; ++i) CpuRelax();
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
      PushBack(w, spare.data() + spare.size() - n, &n, PushHow::kBatch);
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

}  // namespace cidmalloc_rseq_stress
