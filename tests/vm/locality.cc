#include "tests/vm/locality.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/vm/numa_util.h"

extern "C" {
// glibc 2.35+: where the thread's rseq area is (weak: absent elsewhere).
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace cidmalloc_vm {

namespace {

constexpr int kMaxBatch = 4096;
constexpr size_t kPage = 4096;

// Sizes handed to malloc: small classes of every kind, page-sized objects,
// and a few large ones (above cidmalloc's 64 KiB small-object limit).
constexpr size_t kSizes[] = {8,    16,   24,   32,   48,   64,    80,   96,
                             128,  160,  200,  256,  320,  448,   512,  768,
                             1000, 1024, 1500, 2048, 3000, 4096,  6000, 8192,
                             12000, 16384, 24000, 32768, 48000, 65536};
constexpr size_t kLargeSize = 100000;
constexpr int kNumSizes = sizeof kSizes / sizeof kSizes[0];

uint64_t NextRandom(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

size_t PickSize(uint64_t* rng) {
  const uint64_t r = NextRandom(rng);
  if (r % 64 == 0) return kLargeSize;
  // Bias towards small sizes: the square of a uniform index.
  const uint64_t u = (r >> 8) % (kNumSizes * kNumSizes);
  int i = 0;
  while (static_cast<uint64_t>((i + 1) * (i + 1)) <= u) ++i;
  return kSizes[i];
}

// Writes the first bytes and one byte in every page of the object, so that
// each of its pages is present (first-touch placement happens here).
void Touch(void* p, size_t size, unsigned char tag) {
  unsigned char* b = static_cast<unsigned char*>(p);
  memset(b, tag, size < 64 ? size : 64);
  for (size_t off = kPage - (reinterpret_cast<uintptr_t>(b) % kPage);
       off < size; off += kPage) {
    b[off] = tag;
  }
  b[size - 1] = tag;
}

// A one-slot hand-off between a thread and its peer.
struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  bool full = false;
  int n = 0;
  void* items[kMaxBatch];

  void Put(void* const* src, int count) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return !full; });
    memcpy(items, src, sizeof(void*) * static_cast<size_t>(count));
    n = count;
    full = true;
    cv.notify_all();
  }
  int Take(void** dst) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return full; });
    const int count = n;
    memcpy(dst, items, sizeof(void*) * static_cast<size_t>(count));
    full = false;
    cv.notify_all();
    return count;
  }
};

// The calling thread's mm_cid from glibc's rseq area, or -1 (no glibc
// registration, or a kernel without mm_cid).  Diagnostics only: read
// outside any critical section, so it may be stale by the time it is used.
int CurrentCidForDiagnostics() {
  if (&__rseq_size == nullptr || &__rseq_offset == nullptr || __rseq_size == 0) {
    return -1;
  }
  const char* area =
      static_cast<const char*>(__builtin_thread_pointer()) + __rseq_offset;
  unsigned cid;
  memcpy(&cid, area + 24, sizeof cid);  // struct rseq: mm_cid at byte 24
  return cid > 0xFFFF ? -1 : static_cast<int>(cid);
}

// A round in which a thread got remote objects.
struct RemoteEvent {
  int round;
  int cid_prev;    // mm_cid at the end of the previous round
  int cid_before;  // mm_cid at the start of the round
  int cid_after;   // and after its allocations
  int remote;
  int first_index;  // index in the batch of the first remote object
  size_t sizes[4];  // sizes of the first remote objects
  int status[4];    // their nodes
};
constexpr size_t kMaxEvents = 16;

struct ThreadResult {
  int node = 0;
  int cpu = 0;
  uint64_t objects = 0;
  uint64_t local = 0;
  uint64_t remote = 0;
  uint64_t unknown = 0;     // move_pages gave an error for the page
  uint64_t wrong_cpu = 0;   // rounds that ran off the pinned cpu/node
  bool pinned = false;
  bool null_result = false;
  uint64_t cid_changes = 0;  // rounds that began with another mm_cid
  std::vector<RemoteEvent> events;
};

struct Worker {
  int node_id;
  int cpu;
  Mailbox inbox;
  Mailbox* peer = nullptr;
  ThreadResult result;
};

void Run(Worker* w, const LocalityOptions& o, uint64_t seed) {
  ThreadResult& r = w->result;
  r.node = w->node_id;
  r.cpu = w->cpu;
  r.pinned = PinToCpu(w->cpu);
  uint64_t rng = seed;
  std::vector<void*> mine(static_cast<size_t>(o.batch));
  std::vector<void*> theirs(static_cast<size_t>(o.batch));
  std::vector<size_t> sizes(static_cast<size_t>(o.batch));
  std::vector<int> status(static_cast<size_t>(o.batch));
  const int keep = o.batch / 4;  // freed by this thread itself
  int cid_prev = -1;
  for (int round = 0; round < o.rounds; ++round) {
    unsigned cpu, node;
    GetCpuNode(&cpu, &node);
    if (static_cast<int>(node) != w->node_id) ++r.wrong_cpu;
    const int cid_before = CurrentCidForDiagnostics();
    for (int i = 0; i < o.batch; ++i) {
      sizes[i] = PickSize(&rng);
      mine[i] = malloc(sizes[i]);
      if (mine[i] == nullptr) {
        r.null_result = true;
        sizes[i] = 1;
        mine[i] = malloc(1);
        if (mine[i] == nullptr) abort();
      }
      Touch(mine[i], sizes[i], static_cast<unsigned char>(round + i));
    }
    for (int i = 0; i < o.batch; ++i) status[i] = -1000;
    if (!PageNodes(static_cast<unsigned long>(o.batch), mine.data(),
                   status.data())) {
      r.unknown += static_cast<uint64_t>(o.batch);
    } else {
      RemoteEvent ev{};
      for (int i = 0; i < o.batch; ++i) {
        if (status[i] < 0) {
          ++r.unknown;
        } else if (status[i] == w->node_id) {
          ++r.local;
        } else {
          ++r.remote;
          if (ev.remote < 4) {
            ev.sizes[ev.remote] = sizes[i];
            ev.status[ev.remote] = status[i];
          }
          if (ev.remote == 0) ev.first_index = i;
          ++ev.remote;
        }
      }
      if (ev.remote > 0 && r.events.size() < kMaxEvents) {
        ev.round = round;
        ev.cid_prev = cid_prev;
        ev.cid_before = cid_before;
        ev.cid_after = CurrentCidForDiagnostics();
        r.events.push_back(ev);
      }
    }

    r.objects += static_cast<uint64_t>(o.batch);
    for (int i = 0; i < keep; ++i) free(mine[i]);
    w->peer->Put(mine.data() + keep, o.batch - keep);
    const int n = w->inbox.Take(theirs.data());
    for (int i = 0; i < n; ++i) free(theirs[i]);
    // The cid this thread ends the round with; the thread then sleeps in
    // Take() or Put(), and may wake up with another.
    const int cid_now = CurrentCidForDiagnostics();
    if (cid_prev >= 0 && cid_now != cid_prev) ++r.cid_changes;
    cid_prev = cid_now;
  }
}

const char* DetectAllocator() {
  if (dlsym(RTLD_DEFAULT, "cidmalloc_get_stats") != nullptr) {
    return "cidmalloc";
  }
  if (dlsym(RTLD_DEFAULT, "mallctl") != nullptr) return "jemalloc";
  return "glibc";
}

void Usage() {
  fprintf(stderr,
          "usage: locality [--threads-per-node N] [--rounds N] [--batch N]\n"
          "                [--min-local PCT] [--expect-nodes N]\n"
          "                [--expect-mode cid|cpu|none] [--label NAME]\n"
          "                [--known-bug-floor PCT]\n"
          "Threads pinned on every node allocate batches, check on which\n"
          "node each object's page is (move_pages), and free three quarters\n"
          "of each batch on the next node.  Prints LOCALITY lines; exits 1\n"
          "if a node's local share is below --min-local, 3 if it is below\n"
          "--min-local but not below --known-bug-floor and all else held.\n");
}

bool ParseInt(const char* s, int lo, int hi, int* out) {
  char* end;
  errno = 0;
  const long v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

double Pct(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) /
                                static_cast<double>(whole);
}

}  // namespace

int LocalityMain(int argc, char** argv, const char* default_label,
                 AfterHook after) {
  LocalityOptions o;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (ok && strcmp(a, "--threads-per-node") == 0) {
      ok = ParseInt(v, 1, 256, &o.threads_per_node);
    } else if (ok && strcmp(a, "--rounds") == 0) {
      ok = ParseInt(v, 1, 1000000, &o.rounds);
    } else if (ok && strcmp(a, "--batch") == 0) {
      ok = ParseInt(v, 4, kMaxBatch, &o.batch);
    } else if (ok && strcmp(a, "--min-local") == 0) {
      char* end;
      o.min_local_pct = strtod(v, &end);
      ok = *end == '\0' && o.min_local_pct >= 0 && o.min_local_pct <= 100;
    } else if (ok && strcmp(a, "--known-bug-floor") == 0) {
      char* end;
      o.known_bug_floor_pct = strtod(v, &end);
      ok = *end == '\0' && o.known_bug_floor_pct >= 0 &&
           o.known_bug_floor_pct <= 100;
    } else if (ok && strcmp(a, "--expect-nodes") == 0) {
      ok = ParseInt(v, 1, 1024, &o.expect_nodes);
    } else if (ok && strcmp(a, "--expect-mode") == 0) {
      o.expect_mode = v;
    } else if (ok && strcmp(a, "--label") == 0) {
      o.label = v;
    } else {
      ok = false;
    }
    if (!ok) {
      Usage();
      return 2;
    }
    ++i;
  }
  const char* label = o.label != nullptr       ? o.label
                      : default_label != nullptr ? default_label
                                                 : DetectAllocator();

  const std::vector<Node> nodes = NodesWithCpus();
  bool ok = true;
  if (nodes.size() < 2) {
    printf("LOCALITY allocator=%s error=fewer-than-2-nodes-with-cpus\n",
           label);
    ok = false;
  }
  if (o.expect_nodes > 0 && static_cast<int>(nodes.size()) != o.expect_nodes) {
    printf("LOCALITY allocator=%s error=nodes-with-cpus-%zu-expected-%d\n",
           label, nodes.size(), o.expect_nodes);
    ok = false;
  }

  // workers[node index][k]; worker (n, k) sends to (n + 1, k).
  const int nn = static_cast<int>(nodes.size());
  const int tpn = o.threads_per_node;
  std::vector<Worker*> workers;
  for (int n = 0; n < nn; ++n) {
    for (int k = 0; k < tpn; ++k) {
      Worker* w = new Worker;
      w->node_id = nodes[n].id;
      w->cpu = nodes[n].cpus[k % nodes[n].cpus.size()];
      workers.push_back(w);
    }
  }
  for (int n = 0; n < nn; ++n) {
    for (int k = 0; k < tpn; ++k) {
      workers[n * tpn + k]->peer = &workers[((n + 1) % nn) * tpn + k]->inbox;
    }
  }

  timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  std::vector<std::thread> threads;
  if (nn >= 2) {
    for (size_t i = 0; i < workers.size(); ++i) {
      threads.emplace_back(Run, workers[i], std::cref(o),
                           0x1234567ull * (i + 1));
    }
  }
  for (std::thread& t : threads) t.join();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double seconds = static_cast<double>(t1.tv_sec - t0.tv_sec) +
                         1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);

  ThreadResult total;
  double min_node_pct = 100.0;
  for (int n = 0; n < nn; ++n) {
    ThreadResult sum;
    bool pinned = true, nulls = false;
    for (int k = 0; k < tpn; ++k) {
      const ThreadResult& r = workers[n * tpn + k]->result;
      sum.objects += r.objects;
      sum.local += r.local;
      sum.remote += r.remote;
      sum.unknown += r.unknown;
      sum.wrong_cpu += r.wrong_cpu;
      pinned = pinned && r.pinned;
      nulls = nulls || r.null_result;
    }
    const double pct = Pct(sum.local, sum.objects);
    if (pct < min_node_pct) min_node_pct = pct;
    printf("LOCALITY-NODE allocator=%s node=%d threads=%d objects=%llu "
           "local=%llu remote=%llu unknown=%llu local_pct=%.2f%s%s\n",
           label, nodes[n].id, tpn,
           static_cast<unsigned long long>(sum.objects),
           static_cast<unsigned long long>(sum.local),
           static_cast<unsigned long long>(sum.remote),
           static_cast<unsigned long long>(sum.unknown), pct,
           nn < 2 || (pinned && sum.wrong_cpu == 0) ? "" : " error=not-pinned",
           nulls ? " error=malloc-returned-null" : "");
    if (nn >= 2 && (!pinned || sum.wrong_cpu != 0 || nulls)) ok = false;
    total.objects += sum.objects;
    total.local += sum.local;
    total.remote += sum.remote;
    total.unknown += sum.unknown;
  }
  if (nn < 2) min_node_pct = 0;  // (no threads ran)
  // Where remote objects came from (at most 24 lines): the round, the
  // thread's cid around it, the sizes and nodes of the first ones.
  int lines = 0;
  for (const Worker* w : workers) {
    for (const RemoteEvent& ev : w->result.events) {
      if (++lines > 24) break;
      printf("LOCALITY-REMOTE allocator=%s node=%d cpu=%d round=%d remote=%d "
             "first_index=%d cid_prev=%d cid_before=%d cid_after=%d "
             "thread_cid_changes=%llu first:",
             label, w->node_id, w->cpu, ev.round, ev.remote, ev.first_index,
             ev.cid_prev, ev.cid_before, ev.cid_after,
             static_cast<unsigned long long>(w->result.cid_changes));
      for (int i = 0; i < ev.remote && i < 4; ++i) {
        printf(" %zu@node%d", ev.sizes[i], ev.status[i]);
      }
      printf("\n");
    }
  }
  printf("LOCALITY allocator=%s nodes=%d threads=%d objects=%llu local=%llu "
         "remote=%llu unknown=%llu local_pct=%.2f min_node_pct=%.2f "
         "seconds=%.1f\n",
         label, nn, nn * tpn, static_cast<unsigned long long>(total.objects),
         static_cast<unsigned long long>(total.local),
         static_cast<unsigned long long>(total.remote),
         static_cast<unsigned long long>(total.unknown),
         Pct(total.local, total.objects), min_node_pct, seconds);
  bool local_ok = true;
  if (o.min_local_pct >= 0 && min_node_pct < o.min_local_pct) {
    printf("LOCALITY allocator=%s error=min_node_pct-%.2f-below-%.2f\n", label,
           min_node_pct, o.min_local_pct);
    local_ok = false;
  }
  fflush(stdout);
  if (after != nullptr && !after(o)) ok = false;
  for (Worker* w : workers) delete w;
  if (!ok) return 1;
  if (local_ok) return 0;
  return o.known_bug_floor_pct >= 0 && min_node_pct >= o.known_bug_floor_pct
             ? 3
             : 1;
}

}  // namespace cidmalloc_vm
