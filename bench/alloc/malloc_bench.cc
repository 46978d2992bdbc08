// bench/alloc/malloc_bench.cc: the malloc + free fast path of whichever
// allocator the process runs with.
//
// This binary is NOT linked with cidmalloc: it uses plain glibc malloc
// unless an allocator is preloaded, so one binary is measured under each
// allocator (bench/alloc/BUILD also builds it with an allocator linked in,
// malloc_bench_<allocator>):
//
//   malloc_bench                                    # glibc
//   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 malloc_bench
//   LD_PRELOAD=bazel-bin/libcidmalloc.so malloc_bench
//
// bench/alloc/compare.sh runs it under glibc, jemalloc, mimalloc, tcmalloc
// and cidmalloc, interleaved, and prints the comparison table
// (docs/benchmarks.md, section "Allocator").
//
// Benchmarks, each with 1 and 2 threads:
//   BM_Pair/<size>     malloc(size) then free() of that pointer, sizes 16,
//                      32, 64, 128, 256, 512 and 1024: the fast path of a
//                      thread-local cache, nothing else.
//   BM_PairRandom      the same with sizes drawn uniformly from [8, 1024],
//                      precomputed (the same sequence under every
//                      allocator), so the size-class lookup is not one
//                      predicted branch.
//   BM_PairClasses/classes:K/alternate:A
//                      pairs whose size is one of K sizes 32 bytes apart
//                      (32, 64, ..., 32K: K size classes), in a precomputed
//                      random order (A=0) or in turn (A=1): how the cost
//                      of a pair depends on how predictable its class is,
//                      apart from how many classes there are.  1 thread.
//   BM_NewDelete/<size>  ::operator new(size) then sized ::operator
//                      delete, sizes 16, 64 and 256: the same pair as a C++
//                      program makes it.
//   BM_NewDeleteRandom the same with the precomputed random sizes.
//   BM_Batch/64        malloc 1000 objects of 64 bytes, then free them in
//                      allocation order.
//   BM_BatchRandom     the same with the precomputed random sizes.
//   BM_ManyInFlight/<size>/<count>
//                      malloc <count> objects of <size> bytes, then free
//                      them in allocation order, for more objects (and
//                      bytes) of one class in flight than BM_Batch: 8000
//                      of 16 bytes, 4000 of 64, 1000 and 4000 of 256.
//                      Where the count exceeds what a thread's cache keeps
//                      of a class, the objects go through the shared lists.
//                      1 thread.
//   BM_AlignedPair/<align>  posix_memalign of 1000 bytes at an alignment of
//                      4 KiB or 64 KiB, then free.  1 thread.
//   BM_LargePair/<KiB>  malloc of 72, 128, 192 or 512 KiB, a byte written
//                      at its start, free: a large buffer.  cidmalloc's
//                      size classes reach 128 KiB (72 and 128 were page
//                      runs until dc8cb7d); 192 KiB is a page run from the
//                      ID's run stack (up to 256 KiB), 512 KiB one from the
//                      page heap (its parked run, under the heap's lock).
//                      1 and 2 threads.
//   BM_CallocPair/bytes:<bytes>/touch:<0|1>  calloc of 64 B, 4 KiB, 100
//                      KiB or 1 MiB, a byte written (and, touch:1, one in
//                      each 4 KiB page), free.  1 thread.
//   BM_ReallocGrow/<bytes>  a buffer grown by realloc from 16 bytes to 4
//                      KiB, 64 KiB or 1 MiB, 1.5x a step, then freed; ns
//                      per realloc.  1 thread.
//   BM_HugeBuffer/<MiB>  malloc a buffer of 1, 3 or 8 MiB, write a byte in
//                      each of its 4 KiB pages, free it: a temporary buffer
//                      a program takes again and again.  Above 2 MiB
//                      cidmalloc gives each a mapping of its own; what it
//                      costs depends on whether a freed one is kept for the
//                      next (page faults and two system calls otherwise).
//                      1 thread.
//
// Reported time: Google Benchmark's CPU time per iteration (with 2 threads,
// the CPU time of both threads over the iterations of both: the cost of one
// operation to the thread that performs it).  Each benchmark's counter
// "pairs_per_iter" says how many malloc+free pairs one iteration performs
// (1 or 1000); compare.sh divides by it to give ns per pair.
//
// The context lines "malloc_from" (the object that malloc resolves to) and,
// under cidmalloc, "cidmalloc_mode" / "cidmalloc_registration" record what
// was actually measured.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include <string>

namespace {

// ---- Precomputed random sizes ------------------------------------------
constexpr uint32_t kNumSizes = 4096;  // Power of two: index & (kNumSizes-1).
constexpr uint32_t kMinRandom = 8;
constexpr uint32_t kMaxRandom = 1024;

// xorshift64*, started from a fixed seed: the same sequence under every
// allocator and in every run.  (No std:: distribution: nothing here may
// allocate.)
struct Xorshift {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  uint32_t Next() {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return static_cast<uint32_t>((x * 0x2545f4914f6cdd1dull) >> 32);
  }
};

struct RandomSizes {
  uint32_t size[kNumSizes];
  RandomSizes() {
    Xorshift rng;
    for (uint32_t i = 0; i < kNumSizes; ++i) {
      size[i] = kMinRandom + rng.Next() % (kMaxRandom - kMinRandom + 1);
    }
  }
};
const RandomSizes g_random;

// Each thread starts at its own place in the sequence.
uint32_t StartIndex(const benchmark::State& state) {
  return static_cast<uint32_t>(state.thread_index()) * 1031u;
}

void SetPairsPerIter(benchmark::State& state, double pairs) {
  // kAvgThreads: the same value whatever the thread count.
  state.counters["pairs_per_iter"] =
      benchmark::Counter(pairs, benchmark::Counter::kAvgThreads);
}

// ---- malloc + free pairs --------------------------------------------------

void BM_Pair(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = malloc(size);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_Pair)
    ->Arg(16)->Arg(32)->Arg(64)->Arg(128)->Arg(256)->Arg(512)->Arg(1024)
    ->Threads(1)->Threads(2);

void BM_PairRandom(benchmark::State& state) {
  uint32_t i = StartIndex(state);
  for (auto _ : state) {
    void* p = malloc(g_random.size[i++ & (kNumSizes - 1)]);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_PairRandom)->Threads(1)->Threads(2);

// Sizes from K classes: 32 * (1 + r % K) for a fixed random sequence r, or
// 32 * (1 + i % K) in turn.
enum class Order : uint8_t { kRandom, kInTurn };
struct ClassSizes {
  uint32_t size[kNumSizes];
  ClassSizes(uint32_t classes, Order order) {
    Xorshift rng;
    for (uint32_t i = 0; i < kNumSizes; ++i) {
      const uint32_t r = rng.Next();
      size[i] = 32 * (1 + (order == Order::kInTurn ? i : r) % classes);
    }
  }
};

void BM_PairClasses(benchmark::State& state) {
  // Static: 16 KiB, rebuilt for each benchmark (1 thread, so no race).
  static ClassSizes sizes(1, Order::kRandom);
  sizes = ClassSizes(static_cast<uint32_t>(state.range(0)),
                     state.range(1) != 0 ? Order::kInTurn : Order::kRandom);
  uint32_t i = 0;
  for (auto _ : state) {
    void* p = malloc(sizes.size[i++ & (kNumSizes - 1)]);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_PairClasses)
    ->ArgNames({"classes", "alternate"})
    ->Args({1, 0})->Args({2, 0})->Args({2, 1})->Args({8, 0})->Args({31, 0});

// operator new + sized operator delete: a C++ program's pair.  Under glibc
// these are libstdc++'s, which call malloc and free; jemalloc, mimalloc,
// tcmalloc and cidmalloc replace them.
void BM_NewDelete(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = ::operator new(size);
    benchmark::DoNotOptimize(p);
    ::operator delete(p, size);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_NewDelete)->Arg(16)->Arg(64)->Arg(256)->Threads(1)->Threads(2);

void BM_NewDeleteRandom(benchmark::State& state) {
  uint32_t i = StartIndex(state);
  for (auto _ : state) {
    const size_t size = g_random.size[i++ & (kNumSizes - 1)];
    void* p = ::operator new(size);
    benchmark::DoNotOptimize(p);
    ::operator delete(p, size);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_NewDeleteRandom)->Threads(1)->Threads(2);

// ---- Batches: 1000 mallocs, then 1000 frees ---------------------------------
constexpr int kBatch = 1000;

// Each iteration: `count` objects of `size` bytes into ptrs[], then all
// freed in allocation order.
inline void AllocThenFree(benchmark::State& state, void** ptrs, int count,
                          size_t size) {
  for (auto _ : state) {
    for (int j = 0; j < count; ++j) {
      ptrs[j] = malloc(size);
      benchmark::DoNotOptimize(ptrs[j]);
    }
    for (int j = 0; j < count; ++j) free(ptrs[j]);
  }
  SetPairsPerIter(state, count);
}

void BM_Batch(benchmark::State& state) {
  void* ptrs[kBatch];
  AllocThenFree(state, ptrs, kBatch, static_cast<size_t>(state.range(0)));
}
BENCHMARK(BM_Batch)->Arg(64)->Threads(1)->Threads(2);

void BM_BatchRandom(benchmark::State& state) {
  uint32_t i = StartIndex(state);
  void* ptrs[kBatch];
  for (auto _ : state) {
    for (int j = 0; j < kBatch; ++j) {
      ptrs[j] = malloc(g_random.size[i++ & (kNumSizes - 1)]);
      benchmark::DoNotOptimize(ptrs[j]);
    }
    for (int j = 0; j < kBatch; ++j) free(ptrs[j]);
  }
  SetPairsPerIter(state, kBatch);
}
BENCHMARK(BM_BatchRandom)->Threads(1)->Threads(2);

// ---- Many objects of one class in flight ------------------------------------
constexpr int kMaxInFlight = 8000;

void BM_ManyInFlight(benchmark::State& state) {
  // Static: 64 KB, too much for the stack of every thread (1 thread).
  static void* ptrs[kMaxInFlight];
  AllocThenFree(state, ptrs, static_cast<int>(state.range(1)),
                static_cast<size_t>(state.range(0)));
}
BENCHMARK(BM_ManyInFlight)
    ->Args({16, 8000})->Args({64, 4000})->Args({256, 1000})
    ->Args({256, 4000});

// ---- Aligned ---------------------------------------------------------------
void BM_AlignedPair(benchmark::State& state) {
  const size_t align = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (posix_memalign(&p, align, 1000) != 0) {
      state.SkipWithError("posix_memalign failed");
      return;
    }
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_AlignedPair)->Arg(4096)->Arg(65536);

// ---- Above the size classes ------------------------------------------------
// Each iteration: malloc(bytes), writes (its first byte, or a byte in each
// 4 KiB page), free.
enum class Touch : uint8_t { kFirstByte, kEveryPage };
void BigPairs(benchmark::State& state, size_t bytes, Touch touch) {
  const size_t step = touch == Touch::kEveryPage ? 4096 : bytes;
  for (auto _ : state) {
    char* p = static_cast<char*>(malloc(bytes));
    if (p == nullptr) {
      state.SkipWithError("malloc failed");
      return;
    }
    for (size_t i = 0; i < bytes; i += step) p[i] = static_cast<char>(1 + i);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, 1);
}

void BM_LargePair(benchmark::State& state) {
  BigPairs(state, static_cast<size_t>(state.range(0)) << 10, Touch::kFirstByte);
}
BENCHMARK(BM_LargePair)
    ->Arg(72)
    ->Arg(128)
    ->Arg(192)
    ->Arg(512)
    ->Threads(1)
    ->Threads(2);

// ---- A large temporary buffer, again and again ------------------------------
void BM_HugeBuffer(benchmark::State& state) {
  BigPairs(state, static_cast<size_t>(state.range(0)) << 20, Touch::kEveryPage);
}
BENCHMARK(BM_HugeBuffer)->Arg(1)->Arg(3)->Arg(8);

// ---- calloc and realloc -----------------------------------------------------
// calloc(1, bytes), a byte written at its start (touch 0) or in each of
// its 4 KiB pages (touch 1), free: the clearing each allocator does (or
// skips, for memory it knows to be zero or has the kernel zero) on top of a
// pair.  64 B and 4 KiB are size classes everywhere; 100 KiB is one of
// cidmalloc's classes (to 128 KiB) and tcmalloc's, a chunk of glibc's heap;
// 1 MiB a page run (cidmalloc, jemalloc, tcmalloc) or, the first time, an
// mmap of glibc's (it then raises its mmap threshold).
void BM_CallocPair(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t step = state.range(1) != 0 ? 4096 : bytes;
  for (auto _ : state) {
    char* p = static_cast<char*>(calloc(1, bytes));
    if (p == nullptr) {
      state.SkipWithError("calloc failed");
      return;
    }
    for (size_t i = 0; i < bytes; i += step) p[i] = 1;
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, 1);
}
BENCHMARK(BM_CallocPair)
    ->ArgNames({"bytes", "touch"})
    ->Args({64, 0})
    ->Args({4096, 0})
    ->Args({100 << 10, 0})
    ->Args({1 << 20, 0})
    ->Args({1 << 20, 1});

// A buffer grown by realloc from 16 bytes until it holds at least `final`
// bytes, each step half as large again (rounded up to 16), writing a byte at
// each step's end, then freed: a growing string or vector.  To 4 KiB (13
// reallocs, ending at 5040 bytes: classes), to 64 KiB (20, 86304 bytes) and
// to 1 MiB (27, 1474704 bytes: classes, then page runs, which may grow in
// place).  pairs_per_iter counts the reallocs; the malloc and free are the
// iteration's too.
size_t GrownSize(size_t n) { return (n + n / 2 + 15) & ~size_t{15}; }

void BM_ReallocGrow(benchmark::State& state) {
  const size_t final_bytes = static_cast<size_t>(state.range(0));
  int steps = 0;
  for (size_t n = 16; n < final_bytes; n = GrownSize(n)) ++steps;
  for (auto _ : state) {
    size_t n = 16;
    char* p = static_cast<char*>(malloc(n));
    while (p != nullptr && n < final_bytes) {
      n = GrownSize(n);
      p = static_cast<char*>(realloc(p, n));
      if (p != nullptr) p[n - 1] = 1;
    }
    if (p == nullptr) {
      state.SkipWithError("malloc or realloc failed");
      return;
    }
    benchmark::DoNotOptimize(p);
    free(p);
  }
  SetPairsPerIter(state, steps);
}
BENCHMARK(BM_ReallocGrow)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20);

// ---- Context: which allocator was measured ----------------------------------

// The leading fields of cidmalloc's struct cidmalloc_stats
// (allocator/api/cidmalloc.h); this binary must not link cidmalloc, so it
// finds cidmalloc_get_stats with dlsym and reads only these two.  The
// buffer is far larger than the whole struct.
struct StatsPrefix {
  const char* mode;
  const char* registration;
};

void AddAllocatorContext() {
  Dl_info info;
  void* const malloc_addr = reinterpret_cast<void*>(&malloc);
  const char* from = "?";
  if (dladdr(malloc_addr, &info) != 0 && info.dli_fname != nullptr) {
    from = info.dli_fname;
  }
  benchmark::AddCustomContext("malloc_from", from);

  using GetStats = int (*)(void*);
  auto get_stats =
      reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "cidmalloc_get_stats"));
  if (get_stats != nullptr) {
    alignas(64) static unsigned char buf[64 * 1024];
    get_stats(buf);
    const StatsPrefix* s = reinterpret_cast<const StatsPrefix*>(buf);
    benchmark::AddCustomContext("cidmalloc_mode", s->mode ? s->mode : "?");
    benchmark::AddCustomContext("cidmalloc_registration",
                                s->registration ? s->registration : "?");
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  AddAllocatorContext();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
