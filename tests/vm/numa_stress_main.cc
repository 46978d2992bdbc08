// //tests/vm:numa_stress: cidmalloc (linked in) under cross-node traffic in
// the multi-node VMs: every object checked for loss, duplication, corrupted
// contents and its node.
//
//   numa_stress [--threads-per-node N] [--seconds S] [--large PCT]
//               [--huge PERMILLE] [--migrate-every K] [--mover] [--fork]
//               [--far-objects fail|count] [--seed X]
//
// Workers are pinned round-robin over the nodes' cpus.  Each allocates
// (malloc, calloc, posix_memalign; small sizes, and --large percent page
// runs, --huge per mille blocks above 2 MiB), keeps some, sends some to the
// next worker (on the next node), which frees them (remote frees) or
// reallocs them first, and now and then calls malloc_trim.  With
// --migrate-every K a worker re-pins itself to a random cpu (or lets the
// scheduler place it) every K operations; --mover re-pins random workers
// from outside every 2 ms; --fork forks 5 children that allocate on every
// node and check the allocator's invariants.
//
// Every live object is in a registry: a malloc that returns a live pointer
// is a duplicate, a free of an unregistered one an error, and what is left
// registered at the end was lost.  Objects carry a pattern from a cookie,
// checked before every free and across realloc.  An allocation made while
// getcpu(2) showed the same node before and after must be of that node
// (its span tag, or its chunk for large blocks; every 16th allocation's
// first page also by move_pages(2)): node-qualified IDs promise it; with
// --far-objects count (cpu mode, raw cids, none mode, where a slab may hold
// a few objects of the node a thread left) such objects are only counted.
// At the end, and in each fork child, the front end's, the central lists'
// and the page heap's CheckInvariants() run.  Prints
// "NUMA-STRESS PASS|FAIL ..." and exits 0 on PASS.
#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "allocator/central/central_list.h"
#include "allocator/front_end/front_end.h"
#include "allocator/page_heap/page_heap.h"
#include "allocator/page_heap/pagemap.h"
#include "tests/vm/numa_util.h"

namespace {

using namespace cidmalloc_vm;  // NOLINT(build/namespaces)

struct Options {
  int threads_per_node = 2;
  double seconds = 5;
  unsigned large_pct = 5;      // Page runs: 128 KiB + 1 to 2 MiB.
  unsigned huge_permille = 0;  // Mappings of their own: above 2 MiB.
  unsigned migrate_every = 0;
  bool mover = false;
  bool fork = false;
  bool far_objects_fail = true;
  unsigned seed = 1;
};
Options g_opt;

constexpr size_t kMaxPool = 64;    // Objects a worker keeps.
constexpr size_t kMaxQueue = 256;  // Objects waiting for a worker.

std::atomic<uint64_t> g_errors{0};
std::atomic<bool> g_stop{false};
std::vector<int> g_cpus;

// Counts an error; prints the first 40.
#define FAIL_ONE(...)                                    \
  do {                                                   \
    if (g_errors.fetch_add(1) < 40) printf(__VA_ARGS__); \
  } while (0)

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

unsigned Next(unsigned* s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

// ---- the registry of live objects -------------------------------------

struct Live {
  size_t size;
  uint64_t cookie;
};
struct Shard {
  std::mutex mu;
  std::unordered_map<uintptr_t, Live> live;  // Guarded by mu.
};
Shard g_shards[64];
Shard& ShardOf(const void* p) {
  return g_shards[Mix(reinterpret_cast<uintptr_t>(p)) >> 58];
}

void Register(void* p, Live l) {
  Shard& s = ShardOf(p);
  std::lock_guard<std::mutex> hold(s.mu);
  if (!s.live.emplace(reinterpret_cast<uintptr_t>(p), l).second) {
    FAIL_ONE("DUPLICATE %p (size %zu) handed out while live\n", p, l.size);
  }
}

bool Unregister(void* p, Live* l) {
  Shard& s = ShardOf(p);
  std::lock_guard<std::mutex> hold(s.mu);
  auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.live.end()) {
    FAIL_ONE("free of %p, which is not live\n", p);
    return false;
  }
  *l = it->second;
  s.live.erase(it);
  return true;
}

// ---- contents ----------------------------------------------------------

// Word i of an object is Mix(cookie + i); above 8 KiB only the first and
// last 64 words and one word per 4 KiB are written and checked.
template <typename F>
void ForEachWord(size_t size, F f) {
  const size_t words = size / 8;
  if (size <= 8192) {
    for (size_t i = 0; i < words; ++i) f(i);
    return;
  }
  for (size_t i = 0; i < 64; ++i) f(i);
  for (size_t i = 512; i + 64 < words; i += 512) f(i);
  for (size_t i = words - 64; i < words; ++i) f(i);
}

void Fill(void* p, size_t size, uint64_t cookie) {
  uint64_t* w = static_cast<uint64_t*>(p);
  ForEachWord(size, [&](size_t i) { w[i] = Mix(cookie + i); });
}

// Checks the first `size` bytes' words against the cookie.
void Check(const void* p, size_t size, uint64_t cookie, const char* when) {
  const uint64_t* w = static_cast<const uint64_t*>(p);
  bool ok = true;
  ForEachWord(size, [&](size_t i) {
    if (ok && w[i] != Mix(cookie + i)) {
      FAIL_ONE("CORRUPT %s: %p size %zu word %zu\n", when, p, size, i);
      ok = false;
    }
  });
}

// ---- nodes -------------------------------------------------------------

int NodeNow() {
  unsigned cpu, node;
  GetCpuNode(&cpu, &node);
  return static_cast<int>(node);
}

// The allocator's node of p: its span tag's (which must agree with its
// chunk's), or its chunk's for a large block.
int AllocatorNode(const void* p) {
  namespace ph = cidmalloc::page_heap;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t tag = ph::LookupSpanTag(a);
  const ph::ChunkInfo* c = ph::LookupChunk(a);
  if (c == nullptr) return -1;
  if (cidmalloc::central::TagClass(tag) != 0 &&
      cidmalloc::central::TagNode(tag) != c->node) {
    FAIL_ONE("span tag of %p says node %d, its chunk %d\n", p,
             cidmalloc::central::TagNode(tag), c->node);
  }
  return c->node;
}

// ---- workers -----------------------------------------------------------

struct Counts {
  uint64_t mallocs = 0, frees = 0, reallocs = 0, sent = 0, large = 0,
           huge = 0, migrations = 0, node_checked = 0, far = 0,
           pages_checked = 0, far_pages = 0;
};

struct alignas(64) Worker {
  int index = 0;
  int home_cpu = 0;
  std::atomic<pid_t> tid{0};
  unsigned rng = 1;
  std::mutex mu;
  std::deque<void*> inbox;  // Guarded by mu.
  Counts n;
};
std::vector<Worker*> g_workers;

size_t PickSize(unsigned* r) {
  if (Next(r) % 1000 < g_opt.huge_permille) {
    return (size_t{2} << 20) + 8 + Next(r) % (3u << 20) / 8 * 8;
  }
  if (Next(r) % 100 < g_opt.large_pct) {
    return (size_t{128} << 10) + 8 + Next(r) % (1920u << 10) / 8 * 8;
  }
  switch (Next(r) % 4) {
    case 0:
      return 8 + Next(r) % 16 * 8;
    case 1:
      return 1 + Next(r) % 2048;
    case 2:
      return 1024 + Next(r) % 16384;
    default:
      return 16384 + Next(r) % (112u << 10);
  }
}

void CheckNode(Worker* w, const void* p, size_t size, int node) {
  const int an = AllocatorNode(p);
  ++w->n.node_checked;
  if (an != node) {
    ++w->n.far;
    if (g_opt.far_objects_fail) {
      FAIL_ONE("FAR %p size %zu of node %d to worker %d on node %d\n", p,
               size, an, w->index, node);
    }
  }
  if (w->n.mallocs % 16 != 0) return;
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) &
                                       ~uintptr_t{4095});
  int status = -1;
  if (PageNodes(1, &page, &status) && status >= 0) {
    ++w->n.pages_checked;
    if (status != an) {
      ++w->n.far_pages;
      FAIL_ONE("PAGE %p of the allocator's node %d is on node %d\n", p, an,
               status);
    }
  }
}

void* Allocate(Worker* w) {
  const size_t size = PickSize(&w->rng);
  const int before = NodeNow();
  void* p = nullptr;
  const unsigned how = Next(&w->rng) % 16;
  if (how == 0) {
    p = calloc(1, size);
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; p != nullptr && i < size; i += 4096) {
      if (b[i] != 0) {
        FAIL_ONE("calloc(%zu) at %p: byte %zu not zero\n", size, p, i);
        break;
      }
    }
  } else if (how == 1 && size <= 65536) {
    const size_t align = size_t{16} << Next(&w->rng) % 8;
    if (posix_memalign(&p, align, size) != 0) p = nullptr;
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % align != 0) {
      FAIL_ONE("posix_memalign(%zu): %p\n", align, p);
    }
  } else {
    p = malloc(size);
  }
  const int after = NodeNow();
  if (p == nullptr) {
    FAIL_ONE("allocation of %zu failed, errno %d\n", size, errno);
    return nullptr;
  }
  ++w->n.mallocs;
  w->n.large += size > (size_t{128} << 10);
  w->n.huge += size > (size_t{2} << 20);
  const Live l{size, Mix(static_cast<uint64_t>(w->index) << 40 ^ w->n.mallocs)};
  Register(p, l);
  Fill(p, size, l.cookie);
  if (before == after) CheckNode(w, p, size, before);
  return p;
}

void Release(Worker* w, void* p, const char* when) {
  Live l;
  if (!Unregister(p, &l)) return;
  Check(p, l.size, l.cookie, when);
  free(p);
  ++w->n.frees;
}

// realloc to another size, then free: the common prefix must survive.
void ReallocAndRelease(Worker* w, void* p) {
  Live l;
  if (!Unregister(p, &l)) return;
  const size_t size = PickSize(&w->rng);
  void* q = realloc(p, size);
  if (q == nullptr) {
    FAIL_ONE("realloc(%zu) failed\n", size);
    return;
  }
  ++w->n.reallocs;
  // The first words both sizes hold (at most 64: written at any size).
  const size_t kept = (size < l.size ? size : l.size) / 8;
  const uint64_t* words = static_cast<const uint64_t*>(q);
  for (size_t i = 0; i < kept && i < 64; ++i) {
    if (words[i] != Mix(l.cookie + i)) {
      FAIL_ONE("CORRUPT after realloc %zu -> %zu: %p word %zu\n", l.size,
               size, q, i);
      break;
    }
  }
  const Live now{size, Mix(l.cookie)};
  Register(q, now);
  Fill(q, size, now.cookie);
  Release(w, q, "realloced");
}

void Migrate(Worker* w) {
  ++w->n.migrations;
  if (Next(&w->rng) % 3 != 0) {
    PinToCpu(g_cpus[Next(&w->rng) % g_cpus.size()]);
    return;
  }
  cpu_set_t all;  // Anywhere: the scheduler places it.
  CPU_ZERO(&all);
  for (int c : g_cpus) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof all, &all);
}

void Run(Worker* w) {
  w->tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
  PinToCpu(w->home_cpu);
  Worker* peer = g_workers[(w->index + 1) % g_workers.size()];
  std::vector<void*> pool;
  for (uint64_t op = 1; !g_stop.load(std::memory_order_relaxed); ++op) {
    if (g_opt.migrate_every != 0 && op % g_opt.migrate_every == 0) Migrate(w);
    const unsigned what = Next(&w->rng) % 100;
    if (what < 40) {  // Keep one, letting another go if the pool is full.
      if (void* p = Allocate(w)) {
        if (pool.size() < kMaxPool) {
          pool.push_back(p);
        } else {
          std::swap(p, pool[Next(&w->rng) % pool.size()]);
          Release(w, p, "from the pool");
        }
      }
    } else if (what < 70) {  // Send one to the peer, on the next node.
      if (void* p = Allocate(w)) {
        std::unique_lock<std::mutex> hold(peer->mu);
        if (peer->inbox.size() < kMaxQueue) {
          peer->inbox.push_back(p);
          ++w->n.sent;
        } else {
          hold.unlock();
          Release(w, p, "not sent");
        }
      }
    } else if (what < 95) {  // Free what others sent (remote frees).
      void* got[8];
      size_t n = 0;
      {
        std::lock_guard<std::mutex> hold(w->mu);
        for (; n < 8 && !w->inbox.empty(); ++n) {
          got[n] = w->inbox.front();
          w->inbox.pop_front();
        }
      }
      for (size_t i = 0; i < n; ++i) {
        if (Next(&w->rng) % 8 == 0) {
          ReallocAndRelease(w, got[i]);
        } else {
          Release(w, got[i], "received");
        }
      }
    } else if (!pool.empty()) {
      const size_t i = Next(&w->rng) % pool.size();
      std::swap(pool[i], pool.back());
      Release(w, pool.back(), "from the pool");
      pool.pop_back();
    }
    if (op % 65536 == 0) malloc_trim(0);  // Drains every ID's slab.
  }
  for (void* p : pool) Release(w, p, "at the end");
}

// Re-pins a random worker every 2 ms.
void Mover() {
  unsigned r = g_opt.seed * 31 + 7;
  while (!g_stop.load(std::memory_order_relaxed)) {
    usleep(2000);
    const pid_t tid = g_workers[Next(&r) % g_workers.size()]->tid.load();
    if (tid == 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(g_cpus[Next(&r) % g_cpus.size()], &one);
    sched_setaffinity(tid, sizeof one, &one);
  }
}

void CheckAllInvariants() {
  cidmalloc::front_end::CheckInvariants();
  cidmalloc::central::CheckInvariants();
  cidmalloc::page_heap::CheckInvariants();
}

// 5 children, 300 ms apart: each allocates and frees on every node, then
// checks the invariants (a CHECK aborts it).
void Forker(const std::vector<Node>& nodes) {
  for (int i = 0; i < 5 && !g_stop.load(std::memory_order_relaxed); ++i) {
    usleep(300000);
    const pid_t pid = fork();
    if (pid == 0) {
      for (const Node& node : nodes) {
        PinToCpu(node.cpus[0]);
        std::vector<void*> v;
        for (int k = 0; k < 2000; ++k) {
          const size_t size = k % 100 == 0 ? 200000 : 16 + k % 64 * 24;
          void* p = malloc(size);
          if (p == nullptr) _exit(3);
          memset(p, k, size);
          v.push_back(p);
        }
        for (void* p : v) free(p);
      }
      CheckAllInvariants();
      _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      FAIL_ONE("fork child %d: status %#x\n", i, status);
    }
  }
}

bool ParseArgs(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (strcmp(a, "--mover") == 0) {
      g_opt.mover = true;
      continue;
    }
    if (strcmp(a, "--fork") == 0) {
      g_opt.fork = true;
      continue;
    }
    if (v == nullptr) return false;
    ++i;
    if (strcmp(a, "--threads-per-node") == 0) {
      g_opt.threads_per_node = atoi(v);
    } else if (strcmp(a, "--seconds") == 0) {
      g_opt.seconds = atof(v);
    } else if (strcmp(a, "--large") == 0) {
      g_opt.large_pct = static_cast<unsigned>(atoi(v));
    } else if (strcmp(a, "--huge") == 0) {
      g_opt.huge_permille = static_cast<unsigned>(atoi(v));
    } else if (strcmp(a, "--migrate-every") == 0) {
      g_opt.migrate_every = static_cast<unsigned>(atoi(v));
    } else if (strcmp(a, "--far-objects") == 0 &&
               (strcmp(v, "fail") == 0 || strcmp(v, "count") == 0)) {
      g_opt.far_objects_fail = strcmp(v, "fail") == 0;
    } else if (strcmp(a, "--seed") == 0) {
      g_opt.seed = static_cast<unsigned>(atoi(v)) | 1;
    } else {
      return false;
    }
  }
  return g_opt.threads_per_node > 0 && g_opt.seconds > 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!ParseArgs(argc, argv)) {
    fprintf(stderr, "usage: see tests/vm/numa_stress_main.cc\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::vector<Node> nodes = NodesWithCpus();
  for (const Node& node : nodes) {
    g_cpus.insert(g_cpus.end(), node.cpus.begin(), node.cpus.end());
  }
  // Round-robin over the nodes: worker i + 1 is on the next node.
  for (int k = 0; k < g_opt.threads_per_node; ++k) {
    for (const Node& node : nodes) {
      Worker* w = new Worker;
      w->index = static_cast<int>(g_workers.size());
      w->home_cpu = node.cpus[k % node.cpus.size()];
      w->rng = g_opt.seed * 7919u + static_cast<unsigned>(w->index) * 104729u;
      g_workers.push_back(w);
    }
  }
  std::vector<std::thread> threads;
  for (Worker* w : g_workers) threads.emplace_back(Run, w);
  std::thread mover, forker;
  if (g_opt.mover) mover = std::thread(Mover);
  if (g_opt.fork) forker = std::thread(Forker, std::cref(nodes));
  usleep(static_cast<useconds_t>(g_opt.seconds * 1e6));
  g_stop.store(true);
  for (std::thread& t : threads) t.join();
  if (mover.joinable()) mover.join();
  if (forker.joinable()) forker.join();
  Counts total;
  for (Worker* w : g_workers) {
    for (void* p : w->inbox) Release(w, p, "left in an inbox");
    const Counts& n = w->n;
    total.mallocs += n.mallocs;
    total.frees += n.frees;
    total.reallocs += n.reallocs;
    total.sent += n.sent;
    total.large += n.large;
    total.huge += n.huge;
    total.migrations += n.migrations;
    total.node_checked += n.node_checked;
    total.far += n.far;
    total.pages_checked += n.pages_checked;
    total.far_pages += n.far_pages;
  }
  size_t lost = 0;
  for (Shard& s : g_shards) lost += s.live.size();
  if (lost != 0) FAIL_ONE("%zu objects still registered: lost\n", lost);
  if (total.mallocs != total.frees) {
    FAIL_ONE("%llu allocations, %llu frees\n",
             static_cast<unsigned long long>(total.mallocs),
             static_cast<unsigned long long>(total.frees));
  }
  CheckAllInvariants();
  cidmalloc_release_free_memory();
  CheckAllInvariants();
  cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  const uint64_t errors = g_errors.load();
  printf("NUMA-STRESS %s errors=%llu mode=%s nodes=%u workers=%zu "
         "mallocs=%llu reallocs=%llu sent=%llu large=%llu huge=%llu "
         "migrations=%llu node_checked=%llu far=%llu pages_checked=%llu "
         "far_pages=%llu\n",
         errors == 0 ? "PASS" : "FAIL",
         static_cast<unsigned long long>(errors), s.mode, s.num_nodes,
         g_workers.size(), static_cast<unsigned long long>(total.mallocs),
         static_cast<unsigned long long>(total.reallocs),
         static_cast<unsigned long long>(total.sent),
         static_cast<unsigned long long>(total.large),
         static_cast<unsigned long long>(total.huge),
         static_cast<unsigned long long>(total.migrations),
         static_cast<unsigned long long>(total.node_checked),
         static_cast<unsigned long long>(total.far),
         static_cast<unsigned long long>(total.pages_checked),
         static_cast<unsigned long long>(total.far_pages));
  return errors == 0 ? 0 : 1;
}
