// bench/demo/demo.cc: the demo workload of `./cidmalloc run`.
//
// THREADS threads (default 4) each run ROUNDS rounds (default 25) of mixed-
// size allocation: malloc, calloc, realloc, aligned_alloc, new[], mostly
// small objects with a sprinkling of large ones.  Every object is filled
// with a pattern derived from its owner, index and size, and the pattern is
// checked before the object is freed.  A quarter of each round's objects
// are handed to the next thread, which checks and frees them, so the run
// exercises cross-thread frees as well.  Deterministic: the same arguments
// always perform the same operations (the interleaving differs).
//
// Prints one line per thread and a total; exits 0 when every check passed,
// 1 otherwise.  It does not depend on cidmalloc: without LD_PRELOAD it
// exercises the system allocator and says so.
//
//   usage: demo [THREADS [ROUNDS]]
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace {

constexpr int kSlots = 4096;       // Live objects per thread.
constexpr int kOpsPerRound = 20000;

// splitmix64: small, fast and good enough to pick sizes and slots.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return Next() % n; }
};

enum class Kind : uint8_t { kMalloc, kCalloc, kAligned, kNewArray };

struct Block {
  unsigned char* p = nullptr;
  size_t size = 0;
  uint64_t tag = 0;  // Seeds the fill pattern.
  Kind kind = Kind::kMalloc;
};

// Mostly small sizes, as real programs allocate: 16..256 bytes most often,
// up to 64 KiB sometimes, and 64..512 KiB rarely (size classes up to 128
// KiB, page runs above).
size_t PickSize(Rng& r) {
  const uint64_t x = r.Below(1000);
  if (x < 700) return 1 + r.Below(256);
  if (x < 950) return 257 + r.Below(4096 - 256);
  if (x < 998) return 4097 + r.Below(64 * 1024 - 4096);
  return 64 * 1024 + 1 + r.Below(512 * 1024 - 64 * 1024);
}

unsigned char PatternByte(uint64_t tag, size_t i) {
  return static_cast<unsigned char>((tag >> ((i & 7) * 8)) ^ (i * 131));
}

// Fills at most the first and last 64 bytes and every 4 KiB in between:
// checks every page of large blocks without making the demo memory-bound.
template <typename F>
void ForSampled(size_t size, F f) {
  for (size_t i = 0; i < size && i < 64; ++i) f(i);
  for (size_t i = 4096; i + 64 < size; i += 4096) f(i);
  for (size_t i = size > 64 ? size - 64 : 64; i < size; ++i) f(i);
}

void Fill(const Block& b) {
  ForSampled(b.size, [&](size_t i) { b.p[i] = PatternByte(b.tag, i); });
}

bool Check(const Block& b) {
  bool ok = true;
  ForSampled(b.size, [&](size_t i) {
    if (b.p[i] != PatternByte(b.tag, i)) ok = false;
  });
  return ok;
}

void Release(const Block& b) {
  if (b.kind == Kind::kNewArray) {
    delete[] b.p;
  } else {
    free(b.p);
  }
}

struct Stats {
  uint64_t allocs = 0;
  uint64_t reallocs = 0;
  uint64_t frees = 0;
  uint64_t handed_off = 0;     // Given to the next thread.
  uint64_t remote_frees = 0;   // Received from the previous thread, freed.
  uint64_t bytes = 0;
  uint64_t errors = 0;
};

// One mailbox per thread: blocks the previous thread hands over.
struct Mailbox {
  std::mutex mu;
  std::vector<Block> blocks;
};

std::atomic<uint64_t> g_first_error{0};

void Error(Stats& st, const char* what, const Block& b) {
  ++st.errors;
  if (g_first_error.fetch_add(1) == 0) {
    fprintf(stderr, "demo: %s: block %p size %zu tag %llx\n", what,
            static_cast<void*>(b.p), b.size,
            static_cast<unsigned long long>(b.tag));
  }
}

bool Allocate(Rng& r, uint64_t tag, Block* b, Stats& st) {
  b->size = PickSize(r);
  b->tag = tag;
  const uint64_t k = r.Below(16);
  if (k < 10) {
    b->kind = Kind::kMalloc;
    b->p = static_cast<unsigned char*>(malloc(b->size));
  } else if (k < 12) {
    b->kind = Kind::kCalloc;
    b->p = static_cast<unsigned char*>(calloc(1, b->size));
    if (b->p != nullptr) {
      for (size_t i = 0; i < b->size; i += 61) {
        if (b->p[i] != 0) {
          Error(st, "calloc memory not zeroed", *b);
          break;
        }
      }
    }
  } else if (k < 14) {
    b->kind = Kind::kAligned;
    const size_t align = size_t{16} << r.Below(9);  // 16 .. 4096
    const size_t size = (b->size + align - 1) / align * align;
    b->p = static_cast<unsigned char*>(aligned_alloc(align, size));
    if (b->p != nullptr && reinterpret_cast<uintptr_t>(b->p) % align != 0) {
      Error(st, "aligned_alloc misaligned", *b);
    }
  } else {
    b->kind = Kind::kNewArray;
    b->p = new (std::nothrow) unsigned char[b->size];
  }
  if (b->p == nullptr) {
    Error(st, "allocation failed", *b);
    return false;
  }
  Fill(*b);
  ++st.allocs;
  st.bytes += b->size;
  return true;
}

void Free(const Block& b, Stats& st) {
  if (!Check(b)) Error(st, "pattern overwritten", b);
  Release(b);
  ++st.frees;
}

void DrainMailbox(Mailbox& box, Stats& st) {
  std::vector<Block> got;
  {
    std::lock_guard<std::mutex> lock(box.mu);
    got.swap(box.blocks);
  }
  for (const Block& b : got) {
    Free(b, st);
    ++st.remote_frees;
  }
}

void Worker(int id, int threads, int rounds, std::vector<Mailbox>* boxes,
            Stats* out) {
  Stats st;
  Rng r{0x5eed0000ull + static_cast<uint64_t>(id)};
  std::vector<Block> slots(kSlots);
  uint64_t serial = 0;
  Mailbox& next = (*boxes)[(id + 1) % threads];
  for (int round = 0; round < rounds; ++round) {
    std::vector<Block> outgoing;
    for (int op = 0; op < kOpsPerRound; ++op) {
      Block& s = slots[r.Below(kSlots)];
      if (s.p != nullptr) {
        const uint64_t what = r.Below(8);
        if (what == 0 && s.kind == Kind::kMalloc) {
          // realloc keeps the common prefix; the rest is refilled.
          if (!Check(s)) Error(st, "pattern overwritten", s);
          const size_t keep = s.size;
          Block grown = s;
          grown.size = PickSize(r);
          void* q = realloc(s.p, grown.size);
          if (q == nullptr) {
            Error(st, "realloc failed", grown);
            continue;
          }
          grown.p = static_cast<unsigned char*>(q);
          const size_t common = keep < grown.size ? keep : grown.size;
          for (size_t i = 0; i < common && i < 64; ++i) {
            if (grown.p[i] != PatternByte(s.tag, i)) {
              Error(st, "realloc lost data", grown);
              break;
            }
          }
          grown.tag = (static_cast<uint64_t>(id) << 56) | ++serial;
          Fill(grown);
          s = grown;
          ++st.reallocs;
          st.bytes += s.size;
          continue;
        }
        if (what < 3) {
          outgoing.push_back(s);  // Freed by the next thread.
        } else {
          Free(s, st);
        }
        s.p = nullptr;
      } else {
        Allocate(r, (static_cast<uint64_t>(id) << 56) | ++serial, &s, st);
      }
    }
    st.handed_off += outgoing.size();
    {
      std::lock_guard<std::mutex> lock(next.mu);
      next.blocks.insert(next.blocks.end(), outgoing.begin(), outgoing.end());
    }
    DrainMailbox((*boxes)[id], st);
  }
  for (Block& s : slots) {
    if (s.p != nullptr) Free(s, st);
  }
  *out = st;
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int ParseArg(const char* s, int lo, int hi, const char* what) {
  char* end = nullptr;
  const long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "demo: %s must be %d..%d, got '%s'\n", what, lo, hi, s);
    exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3) {
    fprintf(stderr, "usage: %s [THREADS [ROUNDS]]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 1 ? ParseArg(argv[1], 1, 256, "THREADS") : 4;
  const int rounds = argc > 2 ? ParseArg(argv[2], 1, 1000000, "ROUNDS") : 25;

  // Present only when libcidmalloc is loaded (preloaded or linked in).
  const bool cidmalloc = dlsym(RTLD_DEFAULT, "cidmalloc_get_stats") != nullptr;
  printf("demo: %d threads x %d rounds of %d operations, allocator: %s\n",
         threads, rounds, kOpsPerRound,
         cidmalloc ? "cidmalloc" : "system (cidmalloc not loaded)");
  fflush(stdout);

  const double start = Now();
  std::vector<Mailbox> boxes(threads);
  std::vector<Stats> stats(threads);
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back(Worker, i, threads, rounds, &boxes, &stats[i]);
  }
  for (std::thread& t : workers) t.join();
  // Hand-offs made after the receiver's last drain.
  Stats tail;
  for (Mailbox& box : boxes) DrainMailbox(box, tail);
  const double elapsed = Now() - start;

  Stats total = tail;
  for (int i = 0; i < threads; ++i) {
    const Stats& s = stats[i];
    printf("demo: thread %d: %llu allocs, %llu reallocs, %llu frees "
           "(%llu handed to thread %d, %llu received)\n",
           i, static_cast<unsigned long long>(s.allocs),
           static_cast<unsigned long long>(s.reallocs),
           static_cast<unsigned long long>(s.frees),
           static_cast<unsigned long long>(s.handed_off), (i + 1) % threads,
           static_cast<unsigned long long>(s.remote_frees));
    total.allocs += s.allocs;
    total.reallocs += s.reallocs;
    total.frees += s.frees;
    total.handed_off += s.handed_off;
    total.remote_frees += s.remote_frees;
    total.bytes += s.bytes;
    total.errors += s.errors;
  }
  const bool balanced = total.allocs == total.frees;
  printf("demo: total %llu allocs (%.1f MiB), %llu reallocs, %llu frees, "
         "%llu cross-thread; %.2f s\n",
         static_cast<unsigned long long>(total.allocs),
         static_cast<double>(total.bytes) / (1024.0 * 1024.0),
         static_cast<unsigned long long>(total.reallocs),
         static_cast<unsigned long long>(total.frees),
         static_cast<unsigned long long>(total.remote_frees), elapsed);
  if (total.errors != 0 || !balanced) {
    printf("demo: FAILED: %llu check(s) failed%s\n",
           static_cast<unsigned long long>(total.errors),
           balanced ? "" : ", allocs and frees do not balance");
    return 1;
  }
  printf("demo: self-check OK\n");
  return 0;
}
