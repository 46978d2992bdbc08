// bench/rseq_bench.h: what the sources of //bench:rseq_bench share
// (rseq_bench.cc, rseq_bench_cpu.cc, rseq_bench_counter.cc,
// rseq_bench_stack.cc, rseq_bench_shape.cc): the CPU feature checks, the
// skip when a thread is not on the rseq path, and the 64-byte objects the
// stacks hold.
#ifndef CIDMALLOC_BENCH_RSEQ_BENCH_H_
#define CIDMALLOC_BENCH_RSEQ_BENCH_H_

#include <benchmark/benchmark.h>
#include <cpuid.h>

#include "rseq/rseq.h"

namespace cidmalloc_rseq_bench {

namespace r = ::cidmalloc::rseq;

// ---- Feature checks -------------------------------------------------------
inline bool CpuHasRdpid() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (c >> 22) & 1;  // CPUID.(EAX=7,ECX=0):ECX.RDPID[bit 22]
}

inline bool CpuHasRdtscp() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000001, &a, &b, &c, &d)) return false;
  return (d >> 27) & 1;  // CPUID.80000001H:EDX.RDTSCP[bit 27]
}

// The rseq benchmarks measure the rseq path; without it they would measure
// a fallback under a misleading name.  Called on each benchmark thread.
inline bool SkipWithoutRseq(benchmark::State& state) {
  if (r::CurrentMode() == r::Mode::kNone) {
    state.SkipWithError("rseq mode none");
    return true;
  }
  // Settles the thread's path: registers its own rseq area when the rseq
  // layer (not glibc) registers them (e.g.
  // GLIBC_TUNABLES=glibc.pthread.rseq=0).
  (void)r::CurrentId();
  if (r::AreaCpuId() < 0) {
    state.SkipWithError("no rseq area registered for this thread");
    return true;
  }
  return false;
}

// The next value of a xorshift64 sequence in `x` (never started at 0): the
// fixed "random" orders of the stacks the benchmarks pop (rseq_bench_shape.cc,
// rseq_bench_stack.cc), the same in every run.
inline uint64_t NextXorshift(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

// 64-byte "objects" for the stacks and lists to hold (rseq_bench_stack.cc,
// rseq_bench_shape.cc): the rseq stack, its shape and the lists link
// through their first word; the array stacks and the ring never touch them.
struct alignas(64) Object {
  Object* next;
};

}  // namespace cidmalloc_rseq_bench

#endif  // CIDMALLOC_BENCH_RSEQ_BENCH_H_
