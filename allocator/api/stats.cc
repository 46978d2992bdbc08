// allocator/api/stats.cc: the statistics of cidmalloc.h, the exit summary
// (CIDMALLOC_STATS=1), and the counters behind them.
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "allocator/api/alloc.h"
#include "allocator/api/background.h"
#include "allocator/api/cidmalloc.h"
#include "allocator/api/stats_internal.h"
#include "allocator/central/central_list.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/page_heap.h"
#include "rseq/raw_io.h"

namespace cidmalloc::api {

namespace {

// Per-ID counters, one cache line per ID, updated with rseq::CounterAdd
// (no atomics; exact sums) in counting mode: each is written only by its
// ID's operations (a critical section, or under the soft ID's hold), and
// Sum() reads them with relaxed loads (a recent total).
struct alignas(64) IdCounters {
  int64_t mallocs = 0;
  int64_t hits = 0;
  int64_t frees = 0;
  int64_t remote_frees = 0;
  int64_t local_allocs = 0;
};
static_assert(sizeof(IdCounters) == (1 << CIDMALLOC_COUNTER_STRIDE_SHIFT));
constinit IdCounters g_counters[front_end::kMaxIds];

uintptr_t Field(int64_t IdCounters::*field) {
  return reinterpret_cast<uintptr_t>(&(g_counters[0].*field));
}

uint64_t Sum(int64_t IdCounters::*field) {
  int64_t total = 0;
  for (const IdCounters& c : g_counters) {
    total += __atomic_load_n(&(c.*field), __ATOMIC_RELAXED);
  }
  return static_cast<uint64_t>(total);
}

// Written once by StatsInit, during initialisation: published by its
// release store of g_init_state, which the exit destructor acquires
// (Initialized(), or Config() waiting for it) before reading this.
bool g_print_at_exit = false;
bool g_print_classes_at_exit = false;  // CIDMALLOC_STATS=2; the same.

// Where the exit summary goes when stderr is gone.  Programs built on
// gnulib's closeout module (coreutils' ls, sort, ...) close stderr in an
// atexit handler, which runs before this library's destructor.  With
// CIDMALLOC_STATS=1, initialisation keeps a close-on-exec duplicate of
// stderr above the descriptors programs usually use, and records which
// file it is.  Written once during initialisation, read at exit.
struct SavedStderr {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
};
constinit SavedStderr g_saved_stderr;
constexpr int kSavedStderrMinFd = 512;

void SaveStderr() {
  struct stat st;
  if (fstat(2, &st) != 0) return;  // No stderr to keep.
  int fd = fcntl(2, F_DUPFD_CLOEXEC, kSavedStderrMinFd);
  if (fd < 0) fd = fcntl(2, F_DUPFD_CLOEXEC, 3);  // A low RLIMIT_NOFILE.
  if (fd < 0) return;
  g_saved_stderr = {fd, st.st_dev, st.st_ino};
}

// fd 2 while it is open; else the duplicate, if it still names the file
// stderr was (the program may have closed it and reused the number); else
// -1.
int SummaryFd() {
  if (fcntl(2, F_GETFD) != -1) return 2;
  const SavedStderr& saved = g_saved_stderr;
  struct stat st;
  if (saved.fd < 0 || fstat(saved.fd, &st) != 0 || st.st_dev != saved.dev ||
      st.st_ino != saved.ino) {
    return -1;
  }
  return saved.fd;
}

void Percent(RawBuffer& b, uint64_t num, uint64_t den) {
  if (den == 0) {
    b.Str("n/a");
    return;
  }
  const uint64_t tenths = num * 1000 / den;
  b.Udec(tenths / 10).Ch('.').Udec(tenths % 10).Ch('%');
}

void MiB(RawBuffer& b, uint64_t bytes) {
  const bool kib = bytes < (uint64_t{1} << 20);
  const uint64_t tenths = bytes * 10 / (kib ? 1024 : (1 << 20));
  b.Udec(tenths / 10).Ch('.').Udec(tenths % 10).Str(kib ? " KiB" : " MiB");
}

}  // namespace

void CountAlloc(void* p, Served served) {
  rseq::CounterAdd(Field(&IdCounters::mallocs), 1);
  if (served == Served::kCache) rseq::CounterAdd(Field(&IdCounters::hits), 1);
  page_heap::ChunkInfo* chunk =
      page_heap::LookupChunk(reinterpret_cast<uintptr_t>(p));
  if (chunk != nullptr && chunk->node == os::CurrentNode()) {
    rseq::CounterAdd(Field(&IdCounters::local_allocs), 1);
  }
}

void CountFree(void*, FreedOn where) {
  rseq::CounterAdd(Field(&IdCounters::frees), 1);
  if (where == FreedOn::kOtherNode) {
    rseq::CounterAdd(Field(&IdCounters::remote_frees), 1);
  }
}

void StatsInit(const os::Config& config) {
  if (config.stats) SaveStderr();
  g_print_at_exit = config.stats;
  g_print_classes_at_exit = config.stats_classes;
}

// Runs at exit (also for static links): the CIDMALLOC_STATS=1 summary
// (and with CIDMALLOC_STATS=2 the size-class table after it).
__attribute__((destructor)) void PrintStatsAtExit() {
  if (!Initialized()) {
    // A program that never allocated (`./cidmalloc run -- true`) never
    // initialised the allocator, and so never read the knob: read it now,
    // and initialise only if it asks for the summary.
    if (!os::StatsKnobOn()) return;
    Config();  // Initialises (or waits for the thread that does).
  }
  if (!g_print_at_exit) return;
  const int fd = SummaryFd();
  if (fd < 0) return;
  cidmalloc_print_stats(fd);
  if (g_print_classes_at_exit) cidmalloc_print_class_stats(fd);
}

}  // namespace cidmalloc::api

using cidmalloc::api::IdCounters;

extern "C" __attribute__((visibility("default"))) int cidmalloc_get_stats(struct cidmalloc_stats* out) {
  using namespace cidmalloc;
  api::Config();  // Initialises the allocator if nothing else did.
  memset(out, 0, sizeof(*out));
  const rseq::ProcessState& p = rseq::Process();
  out->mode = rseq::ModeName(p.mode);
  out->registration = rseq::RegistrationName(p.registration);
  out->num_nodes = static_cast<unsigned>(os::NumNodes());
  out->num_rseq_ids = p.num_rseq_ids;
  front_end::Stats fs;
  front_end::GetStats(&fs);
  out->slabs = fs.slabs;
  out->ids_seen = fs.ids_seen;
  out->max_slab_id = fs.max_id;
  out->slab_bytes = fs.slab_bytes;
  out->cached_bytes = fs.cached_bytes;
  out->idle_drains = fs.idle_drains;
  out->background_thread = api::BackgroundStateName(
      api::g_background_state.load(std::memory_order_relaxed));
  out->background_ticks = api::BackgroundTicks();
  out->meta_bytes = page_heap::MetaBytesMapped();
  out->counting = api::g_counting ? 1 : 0;
  out->mallocs = api::Sum(&IdCounters::mallocs);
  out->cache_hits = api::Sum(&IdCounters::hits);
  out->frees = api::Sum(&IdCounters::frees);
  out->remote_frees = api::Sum(&IdCounters::remote_frees);
  out->local_allocs = api::Sum(&IdCounters::local_allocs);
  out->span_bytes_purged = central::PurgedSpanBytes();
  for (int node = 0; node < os::NumNodes(); ++node) {
    page_heap::NodeStats ns;
    page_heap::GetNodeStats(node, &ns);
    uint64_t central_free = 0;
    for (int cls = 1; cls < central::kNumClasses; ++cls) {
      central::ClassStats cs;
      central::GetClassStats(node, cls, &cs);
      central_free += cs.free_objects * central::Class(cls).size;
    }
    out->node_mapped[node] = ns.mapped_bytes;
    out->node_free[node] = ns.free_bytes;
    out->node_released[node] = ns.released_bytes;
    out->node_bind_failures[node] = ns.bind_failures;
    const uint64_t used = ns.mapped_bytes - ns.free_bytes;
    out->node_in_use[node] = used > central_free ? used - central_free : 0;
  }
  return 0;
}

extern "C" __attribute__((visibility("default"))) size_t
cidmalloc_get_stats_sized(struct cidmalloc_stats* out, size_t size) {
  struct cidmalloc_stats all;
  cidmalloc_get_stats(&all);
  const size_t filled = size < sizeof(all) ? size : sizeof(all);
  memcpy(out, &all, filled);
  if (size > filled) {
    memset(reinterpret_cast<char*>(out) + filled, 0, size - filled);
  }
  return filled;
}

extern "C" __attribute__((visibility("default"))) void cidmalloc_print_stats(int fd) {
  using cidmalloc::RawBuffer;
  struct cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  {
    RawBuffer b;
    b.Str("cidmalloc: mode ").Str(s.mode).Str(" (rseq registration ");
    b.Str(s.registration).Str("), ").Udec(s.num_nodes).Str(" node(s), ");
    b.Udec(s.num_rseq_ids).Str(" rseq IDs\n");
    // What an ID is in this mode: "cids seen 2, slabs touched 2 (...)".
    const char* ids = strcmp(s.mode, "cid") == 0   ? "cids"
                      : strcmp(s.mode, "cpu") == 0 ? "cpus"
                                                   : "soft IDs";
    b.Str("cidmalloc: ").Str(ids).Str(" seen ").Udec(s.ids_seen);
    b.Str(", slabs touched ").Udec(s.slabs);
    b.Str(" (highest ID ").Udec(s.max_slab_id).Str("), slab memory ");
    cidmalloc::api::MiB(b, s.slab_bytes);
    b.Str(", cached objects ");
    cidmalloc::api::MiB(b, s.cached_bytes);
    b.Str(", idle caches drained ").Udec(s.idle_drains);
    b.Str(", sparse spans' free pages returned ");
    cidmalloc::api::MiB(b, s.span_bytes_purged);
    b.Str(", background thread ").Str(s.background_thread);
    if (s.background_ticks != 0) {
      b.Str(" (").Udec(s.background_ticks).Str(" ticks)");
    }
    b.Ch('\n');
    b.WriteTo(fd);
  }
  for (unsigned node = 0; node < s.num_nodes; ++node) {
    RawBuffer b;
    b.Str("cidmalloc: node ").Udec(node).Str(": mapped ");
    cidmalloc::api::MiB(b, s.node_mapped[node]);
    b.Str(", in use ");
    cidmalloc::api::MiB(b, s.node_in_use[node]);
    b.Str(", free ");
    cidmalloc::api::MiB(b, s.node_free[node]);
    b.Str(" (returned to the OS ");
    cidmalloc::api::MiB(b, s.node_released[node]);
    b.Ch(')');
    if (!cidmalloc::os::NodeHasMemory(static_cast<int>(node))) {
      b.Str(", no memory of its own (pages from the nearest node)");
    }
    if (s.node_bind_failures[node] != 0) {
      b.Str(", mbind failures ").Udec(s.node_bind_failures[node]);
    }
    b.Ch('\n');
    b.WriteTo(fd);
  }
  RawBuffer b;
  if (s.counting) {
    b.Str("cidmalloc: mallocs ").Udec(s.mallocs).Str(", front-end hit rate ");
    cidmalloc::api::Percent(b, s.cache_hits, s.mallocs);
    b.Str(", frees ").Udec(s.frees).Str(", remote frees ").Udec(s.remote_frees);
    b.Str(", node-local allocations ");
    cidmalloc::api::Percent(b, s.local_allocs, s.mallocs);
    b.Ch('\n');
  } else {
    b.Str("cidmalloc: operation counts off (set CIDMALLOC_STATS=1)\n");
  }
  b.WriteTo(fd);
}

extern "C" __attribute__((visibility("default"))) size_t cidmalloc_release_free_memory(void) {
  cidmalloc::api::Config();
  cidmalloc::front_end::DrainAll();
  cidmalloc::central::ReleaseEmptySpans();
  return cidmalloc::page_heap::ReleaseFreeMemory(0);
}
