// bench/rseq_bench_cpu.cc: BM_Cpu_*, reading the current cpu (node, cid,
// ID): the rseq area loads of rseq/rseq.h against an empty loop, glibc's
// sched_getcpu() and getcpu(), the getcpu system call and the rdpid /
// rdtscp instructions (part of //bench:rseq_bench; see rseq_bench.cc).
#include <benchmark/benchmark.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench/rseq_bench.h"
#include "rseq/abi.h"
#include "rseq/area.h"
#include "rseq/rseq.h"

namespace {

using namespace cidmalloc_rseq_bench;  // NOLINT

void BM_Cpu_EmptyLoop(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Cpu_EmptyLoop);

// The inline load of cpu_id (rseq::CurrentCpu).
void BM_Cpu_RseqCurrentCpu(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  for (auto _ : state) {
    int cpu = r::CurrentCpu();
    benchmark::DoNotOptimize(cpu);
  }
}
BENCHMARK(BM_Cpu_RseqCurrentCpu);

// cpu and node in one critical section (rseq::GetCpu).
void BM_Cpu_RseqGetCpu(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  if (!r::Process().has_node_id) {
    state.SkipWithError("the kernel does not fill node_id (Linux < 6.3)");
    return;
  }
  for (auto _ : state) {
    unsigned cpu, node;
    int rc = r::GetCpu(&cpu, &node);
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(cpu);
    benchmark::DoNotOptimize(node);
  }
}
BENCHMARK(BM_Cpu_RseqGetCpu);

// The bare load of cpu_id from the area, without CurrentCpu's checks (that
// the area is registered, that cpu_id is not negative).
void BM_Cpu_RseqCpuIdField(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  for (auto _ : state) {
    int cpu = r::AreaField(CIDMALLOC_RSEQ_OFF_CPU_ID);
    benchmark::DoNotOptimize(cpu);
  }
}
BENCHMARK(BM_Cpu_RseqCpuIdField);

// The node (rseq::CurrentNode): node_id, or the cpu -> node table.
void BM_Cpu_RseqCurrentNode(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  for (auto _ : state) {
    int node = r::CurrentNode();
    benchmark::DoNotOptimize(node);
  }
}
BENCHMARK(BM_Cpu_RseqCurrentNode);

// The inline load of mm_cid from the area (rseq::CurrentCid is out of line).
void BM_Cpu_RseqCidField(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  if (r::Process().feature_size < CIDMALLOC_RSEQ_FEATURE_MM_CID) {
    state.SkipWithError("the kernel does not fill mm_cid (Linux < 6.3)");
    return;
  }
  for (auto _ : state) {
    int cid = r::AreaField(CIDMALLOC_RSEQ_OFF_MM_CID);
    benchmark::DoNotOptimize(cid);
  }
}
BENCHMARK(BM_Cpu_RseqCidField);

// The ID per-ID operations use (out of line: path check + load).
void BM_Cpu_RseqCurrentId(benchmark::State& state) {
  for (auto _ : state) {
    uint32_t id = r::CurrentId();
    benchmark::DoNotOptimize(id);
  }
}
BENCHMARK(BM_Cpu_RseqCurrentId);

// glibc's sched_getcpu(): reads glibc's rseq area since 2.35, else vDSO.
void BM_Cpu_GlibcSchedGetcpu(benchmark::State& state) {
  for (auto _ : state) {
    int cpu = sched_getcpu();
    benchmark::DoNotOptimize(cpu);
  }
}
BENCHMARK(BM_Cpu_GlibcSchedGetcpu);

// glibc's getcpu(): the vDSO.
void BM_Cpu_GlibcGetcpuVdso(benchmark::State& state) {
  for (auto _ : state) {
    unsigned cpu, node;
    int rc = getcpu(&cpu, &node);
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(cpu);
    benchmark::DoNotOptimize(node);
  }
}
BENCHMARK(BM_Cpu_GlibcGetcpuVdso);

// The real system call.
void BM_Cpu_GetcpuSyscall(benchmark::State& state) {
  for (auto _ : state) {
    unsigned cpu, node;
    long rc = syscall(SYS_getcpu, &cpu, &node, nullptr);
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(cpu);
    benchmark::DoNotOptimize(node);
  }
}
BENCHMARK(BM_Cpu_GetcpuSyscall);

// RDPID: IA32_TSC_AUX, which Linux sets to (node << 12) | cpu.
void BM_Cpu_Rdpid(benchmark::State& state) {
  if (!CpuHasRdpid()) {
    state.SkipWithError("the CPU has no RDPID");
    return;
  }
  for (auto _ : state) {
    uint64_t aux;
    asm volatile("rdpid %0" : "=r"(aux));
    unsigned cpu = aux & 0xfff;
    benchmark::DoNotOptimize(cpu);
  }
}
BENCHMARK(BM_Cpu_Rdpid);

// RDTSCP: the TSC and IA32_TSC_AUX; serialising with respect to earlier
// instructions, so much slower than RDPID.
void BM_Cpu_Rdtscp(benchmark::State& state) {
  if (!CpuHasRdtscp()) {
    state.SkipWithError("the CPU has no RDTSCP");
    return;
  }
  for (auto _ : state) {
    uint32_t lo, hi, aux;
    asm volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux));
    unsigned cpu = aux & 0xfff;
    benchmark::DoNotOptimize(cpu);
  }
}
BENCHMARK(BM_Cpu_Rdtscp);

}  // namespace
