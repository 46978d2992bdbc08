// bench/rseq_bench_counter.cc: BM_Counter_*, incrementing a per-ID
// counter: rseq CounterAdd against sched_getcpu() or the vDSO's getcpu() and
// an atomic add on a padded per-cpu slot, and one shared atomic, with 1 and
// 2 threads (part of //bench:rseq_bench; see rseq_bench.cc).
#include <benchmark/benchmark.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#include <atomic>

#include "bench/rseq_bench.h"
#include "rseq/abi.h"
#include "rseq/rseq.h"

namespace {

using namespace cidmalloc_rseq_bench;  // NOLINT

// One counter per cache line, as CounterAdd expects (rseq/abi.h).
struct alignas(64) PaddedCounter {
  std::atomic<int64_t> value{0};
};
static_assert(sizeof(PaddedCounter) == 1u << CIDMALLOC_COUNTER_STRIDE_SHIFT);

// Shared by the threads of a run; sized for every ID (rseq) or cpu.
PaddedCounter* Counters() {
  static PaddedCounter* counters = [] {
    uint32_t n = r::NumIds();
    if (r::Process().possible_cpus > n) n = r::Process().possible_cpus;
    const long conf = sysconf(_SC_NPROCESSORS_CONF);
    if (conf > 0 && static_cast<uint32_t>(conf) > n) n = conf;
    return new PaddedCounter[n];
  }();
  return counters;
}

PaddedCounter g_shared;

void BM_Counter_RseqCounterAdd(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(Counters());
  for (auto _ : state) {
    r::CounterAdd(base, 1);
  }
}
BENCHMARK(BM_Counter_RseqCounterAdd)->Threads(1)->Threads(2);

void BM_Counter_SchedGetcpuAtomicAdd(benchmark::State& state) {
  PaddedCounter* counters = Counters();
  for (auto _ : state) {
    const int cpu = sched_getcpu();
    counters[cpu].value.fetch_add(1);
  }
}
BENCHMARK(BM_Counter_SchedGetcpuAtomicAdd)->Threads(1)->Threads(2);

// The same with the cpu from the vDSO, as sched_getcpu() was before glibc
// 2.35 read its rseq area.
void BM_Counter_VdsoGetcpuAtomicAdd(benchmark::State& state) {
  PaddedCounter* counters = Counters();
  for (auto _ : state) {
    unsigned cpu;
    getcpu(&cpu, nullptr);
    counters[cpu].value.fetch_add(1);
  }
}
BENCHMARK(BM_Counter_VdsoGetcpuAtomicAdd)->Threads(1)->Threads(2);

void BM_Counter_SharedAtomicAdd(benchmark::State& state) {
  for (auto _ : state) {
    g_shared.value.fetch_add(1);
  }
}
BENCHMARK(BM_Counter_SharedAtomicAdd)->Threads(1)->Threads(2);

}  // namespace
