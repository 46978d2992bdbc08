// bench/rseq_bench.cc: the rseq layer against the alternatives, one run:
// main() of //bench:rseq_bench, whose benchmarks are in the four sources
// below (shared helpers in rseq_bench.h).
//
//   bazel run -c opt //bench:rseq_bench -- --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_min_time=0.2
//   (one command line)
//
// Five groups (the stack file holds two), registered (and so listed and
// run) in the order of the sources in bench/BUILD's srcs, which is this one
// (docs/benchmarks/rseq_layer.md for the first two; for the others the
// allocator's updates, docs/benchmarks.md and
// docs/benchmarks/allocator_history.md, and docs/benchmarks/tuning_log.md):
//   BM_Cpu_*      rseq_bench_cpu.cc:
//                 reading the current cpu (node, cid, ID): an empty loop as
//                 the baseline, the rseq area loads of rseq/rseq.h, glibc's
//                 sched_getcpu() and getcpu(), the getcpu system call, and
//                 the rdpid / rdtscp instructions where the CPU has them.
//   BM_Counter_*  rseq_bench_counter.cc:
//                 incrementing a per-ID counter: rseq CounterAdd against
//                 sched_getcpu() + an atomic add on a padded per-cpu slot,
//                 (and the vDSO's getcpu() + the same), and one shared
//                 atomic, with 1 and 2 threads.
//   BM_Stack_*    rseq_bench_stack.cc:
//                 a pop and a push back, each a call of its own (as malloc
//                 and free are): the allocator's per-ID stack critical
//                 sections, against a thread-local array stack and a
//                 thread-local linked free list without rseq.  The floor
//                 under a cache's malloc+free pair, without the size class,
//                 the span lookup or the checks.
//   BM_TwoStacks_* rseq_bench_stack.cc:
//                 cid mode's pop and push on two stacks (two size classes),
//                 one stack, at random or in turn, with the push's stack
//                 offset known before the push (sized delete) or loaded by
//                 the object's address (free()'s span map): what a second
//                 class costs the pair, and why.
//   BM_Shape_*    rseq_bench_shape.cc:
//                 why random sizes cost a cache more than one size (no rseq,
//                 thread-local): pops from one of K stacks chosen at random
//                 (malloc's size class), each pushed back to the stack a
//                 table keyed by the object names (free's span map), for an
//                 array stack (count, then the slot: two dependent loads
//                 before the item is known), a stack whose top item
//                 sits in its header (one load), a ring (first in,
//                 first out: a pop reads what pushes wrote long before, so
//                 it waits for no recent push), a list through the objects
//                 with a count beside its head (gperftools' shape), and
//                 rseq::Stack's shape (the count packed with the head in
//                 one word).  K = 1 and 32.
//
// With ->Threads(n), Google Benchmark's "Time" is wall time divided by the
// iterations of all threads (a throughput figure) and "CPU" is the CPU time
// of all threads divided by the same: the cost of one operation to the
// thread that performs it.  docs/benchmarks.md quotes CPU time.
#include <benchmark/benchmark.h>

#include "bench/rseq_bench.h"
#include "rseq/rseq.h"

using namespace cidmalloc_rseq_bench;  // NOLINT: r, CpuHasRdpid, CpuHasRdtscp

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const r::ProcessState& p = r::Process();
  benchmark::AddCustomContext("rseq_mode", r::ModeName(p.mode));
  benchmark::AddCustomContext("rseq_registration",
                              r::RegistrationName(p.registration));
  benchmark::AddCustomContext("rseq_node_id", p.has_node_id ? "yes" : "no");
  benchmark::AddCustomContext("rdpid", CpuHasRdpid() ? "yes" : "no");
  benchmark::AddCustomContext("rdtscp", CpuHasRdtscp() ? "yes" : "no");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
