// tests/rseq/fork_test.cc: the rseq layer in a fork child.
//
// The child has one thread and a new mm: its rseq registration is inherited,
// its membarrier registration is not (the library re-registers from its
// atfork child handler), and soft-ID locks held by threads that did not
// survive the fork must not stay held.  Checked: reads, per-ID operations,
// Fence() and QuiesceId() in the child and in a grandchild, threads started
// in the child, and forks taken while other threads run operations (the
// child must not deadlock: every child arms alarm()).
//
// Children report through a pipe and their exit status; they never use
// gtest.  Built once per environment (BUILD), against the production
// library.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rseq/rseq.h"
#include "tests/rseq/stack_table.h"
#include "tests/rseq/test_util.h"

namespace {

using namespace cidmalloc_test;  // NOLINT
namespace rs = ::cidmalloc::rseq;

constexpr int kChildTimeoutSeconds = 30;

// Failures found in a child: one line each into a pipe to the parent.
class ChildChecks {
 public:
  explicit ChildChecks(int fd) : fd_(fd) {}
  void Check(bool ok, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    if (ok) return;
    // Report the first few; the count tells the rest.
    if (failures_.fetch_add(1) >= 10) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n > static_cast<int>(sizeof buf) - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t unused = write(fd_, buf, static_cast<size_t>(n));
    (void)unused;
  }
  int failures() const { return failures_.load(); }
  int fd() const { return fd_; }

 private:
  int fd_;
  std::atomic<int> failures_{0};
};

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    s.append(buf, static_cast<size_t>(r));
  }
  return s;
}

// Forks; the child runs body(checks) under an alarm and exits 0 iff every
// check passed.  Returns "" in the parent if the child did, else what went
// wrong.
template <typename Body>
std::string RunInChild(Body body) {
  int p[2];
  if (pipe(p) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(p[0]);
    alarm(kChildTimeoutSeconds);
    ChildChecks checks(p[1]);
    body(checks);
    _exit(checks.failures() == 0 ? 0 : 1);
  }
  close(p[1]);
  const std::string msgs = ReadAll(p[0]);
  close(p[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status)) {
    return std::string("child killed by signal ") +
           std::to_string(WTERMSIG(status)) +
           (WTERMSIG(status) == SIGALRM ? " (timed out: deadlock?)" : "") +
           "; " + msgs;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !msgs.empty()) {
    return "child exit status " + std::to_string(WEXITSTATUS(status)) +
           ": " + msgs;
  }
  return "";
}

// A small conservation run: `threads` threads pop and push `items` items
// on fresh per-ID stacks and count their operations.  Returns "" if the
// counters and the items are conserved.  If `ids` is given, it receives
// the CurrentId() of every thread, sampled while all of them are alive.
std::string RunOps(int threads, uint32_t iters, std::vector<uint32_t>* ids) {
  StackTable stacks(32);
  Counters counters;
  const uint32_t items = 96;
  std::vector<std::vector<void*>> held(threads);
  for (uint32_t i = 1; i <= items; ++i) held[i % threads].push_back(ItemFor(i));
  std::vector<uint32_t> seen_ids(threads);
  SpinBarrier all_alive(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      Rng rng(static_cast<uint64_t>(t) + 7);
      std::vector<void*>& mine = held[t];
      void* const* table = stacks.table();
      const uintptr_t off = stacks.offset();
      seen_ids[t] = rs::CurrentId();
      all_alive.Wait();
      void* buf[8];
      for (uint32_t i = 0; i < iters; ++i) {
        rs::CounterAdd(counters.base(), 1);
        if (rng.Below(2) == 0) {
          if (void* it = rs::Pop(table, off)) mine.push_back(it);
        } else {
          const uint32_t n = rs::PopBatch(table, off, buf, 1 + rng.Below(8));
          mine.insert(mine.end(), buf, buf + n);
        }
        if (!mine.empty()) {
          if (rng.Below(2) == 0) {
            if (rs::Push(table, off, mine.back())) mine.pop_back();
          } else {
            const uint32_t k = std::min<uint32_t>(
                static_cast<uint32_t>(mine.size()), 1 + rng.Below(8));
            const uint32_t pushed =
                rs::PushBatch(table, off, mine.data() + mine.size() - k, k);
            // Pushed: the first `pushed` of the last k.
            mine.erase(mine.end() - k, mine.end() - k + pushed);
          }
        }
      }
      all_alive.Wait();
    });
  }
  for (auto& t : ts) t.join();
  if (ids != nullptr) *ids = seen_ids;
  std::string err;
  if (counters.Sum() != int64_t{threads} * iters) {
    err += "counter sum " + std::to_string(counters.Sum()) + " != " +
           std::to_string(int64_t{threads} * iters) + "; ";
  }
  err += counters.CheckCanaries();
  err += stacks.CheckLayout();
  std::vector<void*> all;
  for (auto& h : held) all.insert(all.end(), h.begin(), h.end());
  stacks.CollectAll(&all);
  err += CheckConservation(all, items);
  return err;
}

// The items on `stacks` are well formed and unique, and no count exceeds
// the capacity.  Used on a copy taken by fork while threads were running:
// every rseq operation commits with one store, so any instant is
// consistent.  (The soft path works under a lock and promises nothing about
// intermediate states, so in none mode only the layout is checked.)
std::string CheckSnapshot(const StackTable& stacks, uint32_t items) {
  std::string err = stacks.CheckLayout();
  if (rs::CurrentMode() == rs::Mode::kNone) return err;
  std::vector<void*> all;
  stacks.CollectAll(&all);
  std::vector<int> seen(items + 1, 0);
  for (void* it : all) {
    const uint32_t i = IndexOf(it);
    if (i == 0 || i > items) {
      err += " foreign item on a stack;";
    } else if (++seen[i] > 1) {
      err += " item " + std::to_string(i) + " on two stacks;";
    }
  }
  return err;
}

// Checks everything a single-threaded child can check about itself.
void CheckChildBasics(ChildChecks& c, const Expectation& e,
                      rs::Mode parent_mode, bool parent_fence,
                      const char* who) {
  c.Check(rs::CurrentMode() == parent_mode, "%s: mode changed to %s", who,
          rs::ModeName(rs::CurrentMode()));
  const std::vector<int> cpus = AllowedCpus();
  for (int cpu : cpus) {
    if (!PinToCpu(cpu)) {
      c.Check(false, "%s: cannot pin to %d", who, cpu);
      continue;
    }
    c.Check(rs::CurrentCpu() == cpu, "%s: CurrentCpu() %d pinned to %d", who,
            rs::CurrentCpu(), cpu);
    c.Check(sched_getcpu() == cpu, "%s: sched_getcpu() %d", who,
            sched_getcpu());
    unsigned gc = ~0u, gn = ~0u, sc = ~0u, sn = ~0u;
    c.Check(rs::GetCpu(&gc, &gn) == 0 && SyscallGetcpu(&sc, &sn) &&
                gc == sc && gn == sn,
            "%s: GetCpu (%u,%u) vs getcpu (%u,%u)", who, gc, gn, sc, sn);
    if (rs::CurrentMode() == rs::Mode::kCpu) {
      c.Check(rs::CurrentId() == static_cast<uint32_t>(cpu),
              "%s: cpu mode ID %u on cpu %d", who, rs::CurrentId(), cpu);
    }
  }
  const int cid = rs::CurrentCid();
  c.Check((cid >= 0) == e.cid_readable, "%s: CurrentCid() %d", who, cid);
  if (rs::CurrentMode() == rs::Mode::kCid) {
    int checked = 0;
    for (int i = 0; i < 1000 && checked < 100; ++i) {
      const long sw = ThreadSwitches();
      const int c1 = rs::CurrentCid();
      const uint32_t id = rs::CurrentId();
      if (rs::CurrentCid() != c1 || ThreadSwitches() != sw) continue;
      c.Check(id == static_cast<uint32_t>(c1), "%s: cid mode ID %u, cid %d",
              who, id, c1);
      ++checked;
    }
    c.Check(checked > 0, "%s: never a stable cid", who);
  }
  const uint32_t id = rs::CurrentId();
  c.Check(id < rs::NumIds(), "%s: CurrentId() %u out of range", who, id);
  // The fence works in the child exactly when it worked in the parent,
  // which needs the child's new mm to be registered for it.
  c.Check(rs::Fence() == parent_fence, "%s: Fence() %d, parent %d", who,
          rs::Fence(), parent_fence);
  if (parent_fence) {
    c.Check(RawRseqFenceWorks(),
            "%s: membarrier(PRIVATE_EXPEDITED_RSEQ) fails: the child's mm "
            "is not registered",
            who);
  }
  const bool soft = id >= rs::NumRseqIds();
  c.Check(rs::QuiesceId(id) == (soft || parent_fence),
          "%s: QuiesceId(%u) failed", who, id);
  // Per-ID operations on fresh data, single-threaded: whatever ID they hit,
  // everything pushed comes back.
  {
    StackTable stacks(8);
    Counters counters;
    for (uint32_t i = 1; i <= 5; ++i) {
      rs::CounterAdd(counters.base(), 2);
      c.Check(rs::Push(stacks.table(), stacks.offset(), ItemFor(i)),
              "%s: push %u failed", who, i);
    }
    c.Check(counters.Sum() == 10, "%s: counter sum %ld", who,
            static_cast<long>(counters.Sum()));
    std::vector<void*> all;
    stacks.CollectAll(&all);
    c.Check(CheckConservation(all, 5).empty(), "%s: %s", who,
            CheckConservation(all, 5).c_str());
    stacks.Clear();
    c.Check(rs::Pop(stacks.table(), stacks.offset()) == nullptr,
            "%s: pop on empty stacks", who);
  }
  // Threads started in the child.
  std::vector<uint32_t> ids;
  const std::string err = RunOps(4, 20000, &ids);
  c.Check(err.empty(), "%s: threads in the child: %s", who, err.c_str());
  if (rs::CurrentMode() == rs::Mode::kNone) {
    // Soft IDs: one per live thread, the forking thread's included.
    std::set<uint32_t> distinct(ids.begin(), ids.end());
    c.Check(distinct.size() == ids.size() && distinct.count(id) == 0,
            "%s: live threads share a soft ID (main %u)", who, id);
  }
}

TEST(Fork, ChildAndGrandchildCanUseEverything) {
  const Expectation e = ExpectedForThisProcess();
  const rs::Mode mode = rs::CurrentMode();
  const bool fence = rs::Fence();
  EXPECT_EQ(fence, e.fence);
  // Make the parent's own state non-trivial first.
  EXPECT_EQ(RunOps(3, 5000, nullptr), "");
  const std::string r = RunInChild([&](ChildChecks& c) {
    CheckChildBasics(c, e, mode, fence, "child");
    // And once more in a grandchild (another new mm).
    const std::string gr = RunInChild([&](ChildChecks& g) {
      CheckChildBasics(g, e, mode, fence, "grandchild");
    });
    c.Check(gr.empty(), "grandchild: %s", gr.c_str());
    // The child still works after forking.
    c.Check(rs::Fence() == fence, "child after fork: Fence()");
  });
  EXPECT_EQ(r, "");
  // The parent is unaffected.
  EXPECT_EQ(rs::Fence(), fence);
  EXPECT_EQ(RunOps(3, 5000, nullptr), "");
}

TEST(Fork, ForkWhileOtherThreadsRunOperations) {
  const rs::Mode mode = rs::CurrentMode();
  const bool fence = rs::Fence();
  constexpr int kWorkers = 6;
  constexpr uint32_t kItems = 200;
  StackTable stacks(64);
  Counters counters;
  std::atomic<bool> stop{false};
  std::vector<std::vector<void*>> held(kWorkers);
  std::vector<int64_t> adds(kWorkers, 0);
  for (uint32_t i = 1; i <= kItems; ++i) held[i % kWorkers].push_back(ItemFor(i));
  std::vector<std::thread> workers;
  for (int t = 0; t < kWorkers; ++t) {
    workers.emplace_back([&, t] {
      Rng rng(static_cast<uint64_t>(t) + 99);
      std::vector<void*>& mine = held[t];
      void* buf[8];
      while (!stop.load(std::memory_order_relaxed)) {
        rs::CounterAdd(counters.base(), 1);
        ++adds[t];
        const uint32_t n =
            rs::PopBatch(stacks.table(), stacks.offset(), buf, 1 + rng.Below(8));
        mine.insert(mine.end(), buf, buf + n);
        if (!mine.empty() && rs::Push(stacks.table(), stacks.offset(), mine.back())) {
          mine.pop_back();
        }
        if (!mine.empty()) {
          const uint32_t k = std::min<uint32_t>(
              static_cast<uint32_t>(mine.size()), 1 + rng.Below(8));
          const uint32_t pushed = rs::PushBatch(
              stacks.table(), stacks.offset(), mine.data() + mine.size() - k, k);
          mine.erase(mine.end() - k, mine.end() - k + pushed);
        }
        // Soft-ID locks and fences in flight at fork time too.
        if (rng.Below(64) == 0) rs::QuiesceId(rs::CurrentId());
        if (rng.Below(256) == 0) sched_yield();
      }
    });
  }

  const std::vector<uint32_t> hot = [] {
    std::vector<uint32_t> v;
    for (uint32_t id = 0; id < rs::NumRseqIds(); ++id) v.push_back(id);
    for (uint32_t k = 0; k < kWorkers + 4; ++k) v.push_back(rs::NumRseqIds() + k);
    return v;
  }();
  constexpr int kForks = 25;
  int failed = 0;
  for (int f = 0; f < kForks && failed < 3; ++f) {
    const std::string r = RunInChild([&](ChildChecks& c) {
      c.Check(rs::CurrentMode() == mode, "mode changed in the child");
      // The copy of the shared data is consistent.
      const std::string snap = CheckSnapshot(stacks, kItems);
      c.Check(snap.empty(), "inherited stacks: %s", snap.c_str());
      // Every ID can be quiesced: no soft lock is left held by a thread
      // that does not exist here.
      for (uint32_t id : hot) {
        const bool soft = id >= rs::NumRseqIds();
        c.Check(rs::QuiesceId(id) == (soft || fence), "QuiesceId(%u)", id);
      }
      // Operations on the inherited data work and keep it consistent.
      const int64_t before = counters.Sum();
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        rs::CounterAdd(counters.base(), 1);
        if (void* it = rs::Pop(stacks.table(), stacks.offset())) mine.push_back(it);
        if (i % 3 == 0 && !mine.empty() &&
            rs::Push(stacks.table(), stacks.offset(), mine.back())) {
          mine.pop_back();
        }
      }
      c.Check(counters.Sum() - before == 2000, "inherited counters: +%ld",
              static_cast<long>(counters.Sum() - before));
      for (void* it : mine) {
        c.Check(IndexOf(it) >= 1 && IndexOf(it) <= kItems, "foreign item");
      }
      c.Check(rs::Fence() == fence, "Fence() %d in the child, parent %d",
              rs::Fence(), fence);
      std::vector<uint32_t> ids;
      const std::string err = RunOps(2, 3000, &ids);
      c.Check(err.empty(), "threads in the child: %s", err.c_str());
      if (mode == rs::Mode::kNone) {
        const uint32_t me = rs::CurrentId();
        c.Check(ids.size() == 2 && ids[0] != ids[1] && ids[0] != me &&
                    ids[1] != me,
                "live threads share a soft ID");
      }
    });
    if (!r.empty()) ++failed;
    EXPECT_EQ(r, "") << "fork " << f;
    const struct timespec nap = {0, 2 * 1000 * 1000};
    nanosleep(&nap, nullptr);
  }
  stop.store(true);
  for (auto& t : workers) t.join();

  // Forking did not disturb the parent.
  int64_t total = 0;
  for (int64_t a : adds) total += a;
  EXPECT_EQ(counters.Sum(), total);
  std::vector<void*> all;
  for (auto& h : held) all.insert(all.end(), h.begin(), h.end());
  stacks.CollectAll(&all);
  EXPECT_EQ(CheckConservation(all, kItems), "");
  EXPECT_EQ(stacks.CheckLayout(), "");
  EXPECT_EQ(counters.CheckCanaries(), "");
}

}  // namespace
