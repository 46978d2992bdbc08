// bench/rseq_bench.cc: the rseq layer against the alternatives, one run.
//
//   bazel run -c opt //bench:rseq_bench -- --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true --benchmark_min_time=0.2
//   (one command line)
//
// Two groups (docs/benchmarks.md, "rseq layer"):
//   BM_Cpu_*      reading the current cpu (node, cid, ID): an empty loop as
//                 the baseline, the rseq area loads of rseq/rseq.h, glibc's
//                 sched_getcpu() and getcpu(), the getcpu system call, and
//                 the rdpid / rdtscp instructions where the CPU has them.
//   BM_Counter_*  incrementing a per-ID counter: rseq CounterAdd against
//                 sched_getcpu() + an atomic add on a padded per-cpu slot,
//                 (and the vDSO's getcpu() + the same), and one shared
//                 atomic, with 1 and 2 threads.
//   BM_Stack_*    a pop and a push back, each a call of its own (as malloc
//                 and free are): the allocator's per-ID stack critical
//                 sections, against a thread-local array stack and a
//                 thread-local linked free list without rseq.  The floor
//                 under a cache's malloc+free pair, without the size class,
//                 the span lookup or the checks.
//   BM_Shape_*    why random sizes cost a cache more than one size (no rseq,
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
#include <cpuid.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <cstddef>
#include <string>

#include "rseq/abi.h"
#include "rseq/area.h"
#include "rseq/rseq.h"

namespace {

namespace r = ::cidmalloc::rseq;

// ---- Feature checks -------------------------------------------------------
bool CpuHasRdpid() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (c >> 22) & 1;  // CPUID.(EAX=7,ECX=0):ECX.RDPID[bit 22]
}

bool CpuHasRdtscp() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000001, &a, &b, &c, &d)) return false;
  return (d >> 27) & 1;  // CPUID.80000001H:EDX.RDTSCP[bit 27]
}

// The rseq benchmarks measure the rseq path; without it they would measure
// a fallback under a misleading name.  Called on each benchmark thread.
bool SkipWithoutRseq(benchmark::State& state) {
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

// ---- Reading the current cpu ------------------------------------------------

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

// ---- Per-ID counters ------------------------------------------------------

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

// ---- Per-ID stacks: the floor of a malloc+free pair ----------------------

constexpr uint32_t kStackCapacity = 64;
constexpr uint32_t kStackFill = 32;
// One per ID: a header line (as a slab has), then the stack.
struct alignas(64) StackRegion {
  char header[64];
  r::Stack stack;
};
constexpr uintptr_t kStackOffset = offsetof(StackRegion, stack);

// 64-byte "objects" for the stacks and lists to hold: the rseq stack and
// the lists link through their first word; the array stacks never touch
// them.
struct alignas(64) Object {
  Object* next;
};

// kWideTableIds entries, as the allocator's sections need (rseq.h,
// PopUnchecked); a region for each of the NumIds() IDs, null beyond.
void* const* StackTable() {
  static void** table = [] {
    const uint32_t n = r::NumIds();
    void** t = new void*[r::kWideTableIds]();
    for (uint32_t id = 0; id < n; ++id) {
      auto* region = new StackRegion{};
      region->stack.capacity = kStackCapacity;
      auto* objects = new Object[kStackFill];
      for (uint32_t i = 0; i < kStackFill; ++i) {
        region->stack.PushHeld(&objects[i]);
      }
      t[id] = region;
    }
    return t;
  }();
  return table;
}

// The sections of the allocator's cpu mode (front_end::TryAllocAt /
// TryFreeAt), out of line like malloc and free.
__attribute__((noinline)) void* RseqPop(void* const* table) {
  void* item;
  return r::PopUnchecked(table, kStackOffset, &item) ? item : nullptr;
}
__attribute__((noinline)) bool RseqPush(void* const* table, void* item) {
  return r::PushUnchecked(table, kStackOffset, item);
}

// Pops and pushes one object per iteration with the given sections (out
// of line, like malloc and free).  A thread that moves to another ID
// between its pop and its push moves an object between stacks; over a
// long run a stack may so run empty or full.  Both are counted (they
// should stay near 0); so is an abort of the mm_cid sections, which fails
// them.
template <void* (*kPop)(void* const*), bool (*kPush)(void* const*, void*)>
void RunRseqPopPush(benchmark::State& state) {
  void* const* table = StackTable();
  int64_t empty = 0, full = 0;
  for (auto _ : state) {
    void* p = kPop(table);
    benchmark::DoNotOptimize(p);
    if (CIDMALLOC_UNLIKELY(p == nullptr)) {
      ++empty;
      continue;
    }
    if (CIDMALLOC_UNLIKELY(!kPush(table, p))) ++full;
  }
  state.counters["empty"] = static_cast<double>(empty);
  state.counters["full"] = static_cast<double>(full);
}

void BM_Stack_RseqPopPush(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  RunRseqPopPush<RseqPop, RseqPush>(state);
}
BENCHMARK(BM_Stack_RseqPopPush)->Threads(1)->Threads(2);

// The sections of the allocator's cid mode (front_end::TryAllocCid /
// TryFreeCid: mm_cid at its place in the area, no restart loop), the floor
// under malloc and free there.  Cid mode only.
__attribute__((noinline)) void* RseqMmCidPop(void* const* table) {
  void* item;
  return r::PopUnchecked<r::IdKind::kRaw, r::IdBound::kWideMmCid>(
             table, kStackOffset, &item)
             ? item
             : nullptr;
}
__attribute__((noinline)) bool RseqMmCidPush(void* const* table, void* item) {
  return r::PushUnchecked<r::IdKind::kRaw, r::IdBound::kWideMmCid>(
      table, kStackOffset, item);
}

void BM_Stack_RseqMmCidPopPush(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  if (!r::RawIdIsMmCid()) {
    state.SkipWithError("not in cid mode");
    return;
  }
  RunRseqPopPush<RseqMmCidPop, RseqMmCidPush>(state);
}
BENCHMARK(BM_Stack_RseqMmCidPopPush)->Threads(1)->Threads(2);

// A thread-local array stack: count and slots, no rseq.
struct ArrayStack {
  uint32_t count;
  void* slots[kStackCapacity];
};
thread_local ArrayStack t_array;

__attribute__((noinline)) void* ArrayPop() {
  if (t_array.count == 0) return nullptr;
  return t_array.slots[--t_array.count];
}
__attribute__((noinline)) bool ArrayPush(void* item) {
  if (t_array.count == kStackCapacity) return false;
  t_array.slots[t_array.count++] = item;
  return true;
}

void BM_Stack_ThreadLocalArray(benchmark::State& state) {
  auto* objects = new Object[kStackFill];
  for (uint32_t i = 0; i < kStackFill; ++i) ArrayPush(&objects[i]);
  for (auto _ : state) {
    void* p = ArrayPop();
    benchmark::DoNotOptimize(p);
    ArrayPush(p);
  }
  while (ArrayPop() != nullptr) {
  }
  delete[] objects;
}
BENCHMARK(BM_Stack_ThreadLocalArray)->Threads(1)->Threads(2);

// A thread-local singly linked free list through the objects (the shape of
// gperftools' and glibc's thread caches), no rseq.
thread_local Object* t_list;

__attribute__((noinline)) Object* ListPop() {
  Object* p = t_list;
  if (p != nullptr) t_list = p->next;
  return p;
}
__attribute__((noinline)) void ListPush(Object* p) {
  p->next = t_list;
  t_list = p;
}

void BM_Stack_ThreadLocalList(benchmark::State& state) {
  auto* objects = new Object[kStackFill];
  for (uint32_t i = 0; i < kStackFill; ++i) ListPush(&objects[i]);
  for (auto _ : state) {
    Object* p = ListPop();
    benchmark::DoNotOptimize(p);
    ListPush(p);
  }
  t_list = nullptr;
  delete[] objects;
}
BENCHMARK(BM_Stack_ThreadLocalList)->Threads(1)->Threads(2);

// ---- Stack shapes under random classes -------------------------------------
constexpr uint32_t kShapeStacks = 32, kShapeFill = 32, kShapeSeq = 4096;

struct alignas(64) ShapeArray {  // count, then the slots
  uint32_t count;
  void* slots[kShapeFill];
};
struct alignas(64) ShapeTop {    // the top item in the header
  void* top;
  uint32_t below;                // items in slots[] under the top
  void* slots[kShapeFill];
};

struct alignas(64) ShapeRing {   // pushes at head, pops at tail
  uint32_t head, tail;
  void* slots[2 * kShapeFill];   // a power of two
};

struct alignas(64) ShapeList {   // a list through the objects and a count
  Object* head;
  uint32_t count;
};
struct alignas(64) ShapePacked {  // the rseq::Stack shape: one word,
  uint64_t top;                   // head | count << 48
};

struct ShapeState {
  ShapeList list[kShapeStacks];
  ShapePacked packed[kShapeStacks];
  ShapeArray array[kShapeStacks];
  ShapeTop top[kShapeStacks];
  ShapeRing ring[kShapeStacks];
  Object objects[kShapeStacks * kShapeFill];
  uint8_t stack_of[kShapeStacks * kShapeFill];  // object index -> stack
  uint32_t seq[kShapeSeq];                      // the stacks to pop, in turn
  uint32_t StackOf(const void* p) const {
    return stack_of[static_cast<const Object*>(p) - objects];
  }
};

// Per thread (thread_local would be a TLS access per call): the benchmark
// allocates one for each of its threads.
__attribute__((noinline)) void* ShapeArrayPop(ShapeState* st, uint32_t k) {
  ShapeArray& a = st->array[k];
  if (a.count == 0) return nullptr;
  return a.slots[--a.count];
}
__attribute__((noinline)) void ShapeArrayPush(ShapeState* st, void* p) {
  ShapeArray& a = st->array[st->StackOf(p)];
  a.slots[a.count++] = p;
}
__attribute__((noinline)) void* ShapeTopPop(ShapeState* st, uint32_t k) {
  ShapeTop& t = st->top[k];
  void* p = t.top;
  if (p == nullptr) return nullptr;
  t.top = t.below == 0 ? nullptr : t.slots[--t.below];
  return p;
}
__attribute__((noinline)) void ShapeTopPush(ShapeState* st, void* p) {
  ShapeTop& t = st->top[st->StackOf(p)];
  if (t.top != nullptr) t.slots[t.below++] = t.top;
  t.top = p;
}

__attribute__((noinline)) void* ShapeRingPop(ShapeState* st, uint32_t k) {
  ShapeRing& r = st->ring[k];
  if (r.tail == r.head) return nullptr;
  return r.slots[r.tail++ % (2 * kShapeFill)];
}
__attribute__((noinline)) void ShapeRingPush(ShapeState* st, void* p) {
  ShapeRing& r = st->ring[st->StackOf(p)];
  r.slots[r.head++ % (2 * kShapeFill)] = p;  // Never more than kShapeFill.
}

__attribute__((noinline)) void* ShapeListPop(ShapeState* st, uint32_t k) {
  ShapeList& l = st->list[k];
  Object* p = l.head;
  if (p == nullptr) return nullptr;
  l.head = p->next;
  l.count--;
  return p;
}
__attribute__((noinline)) void ShapeListPush(ShapeState* st, void* v) {
  ShapeList& l = st->list[st->StackOf(v)];
  if (l.count >= 2 * kShapeFill) __builtin_trap();  // Never full here.
  Object* p = static_cast<Object*>(v);
  p->next = l.head;
  l.head = p;
  l.count++;
}
__attribute__((noinline)) void* ShapePackedPop(ShapeState* st, uint32_t k) {
  ShapePacked& s = st->packed[k];
  void* p = r::Stack::ItemOf(s.top);
  if (p == nullptr) return nullptr;
  s.top = r::Stack::Link(p);
  return p;
}
__attribute__((noinline)) void ShapePackedPush(ShapeState* st, void* p) {
  ShapePacked& s = st->packed[st->StackOf(p)];
  const uint32_t n = r::Stack::CountOf(s.top);
  if (n >= 2 * kShapeFill) __builtin_trap();  // Never full here.
  r::Stack::Link(p) = s.top;
  s.top = r::Stack::TopWord(p, n + 1);
}

enum class Shape { kArray, kCachedTop, kRing, kList, kPacked };

void* ShapePop(Shape shape, ShapeState* st, uint32_t k) {
  switch (shape) {
    case Shape::kArray: return ShapeArrayPop(st, k);
    case Shape::kCachedTop: return ShapeTopPop(st, k);
    case Shape::kRing: return ShapeRingPop(st, k);
    case Shape::kList: return ShapeListPop(st, k);
    case Shape::kPacked: return ShapePackedPop(st, k);
  }
  return nullptr;
}
void ShapePush(Shape shape, ShapeState* st, void* p) {
  switch (shape) {
    case Shape::kArray: return ShapeArrayPush(st, p);
    case Shape::kCachedTop: return ShapeTopPush(st, p);
    case Shape::kRing: return ShapeRingPush(st, p);
    case Shape::kList: return ShapeListPush(st, p);
    case Shape::kPacked: return ShapePackedPush(st, p);
  }
}

template <Shape kShape>
void BM_Shape(benchmark::State& state) {
  const uint32_t stacks = static_cast<uint32_t>(state.range(0));
  auto st = std::make_unique<ShapeState>();  // Zeroed: stacks start empty.
  uint64_t x = 0x9e3779b97f4a7c15ull + state.thread_index();
  for (uint32_t i = 0; i < kShapeSeq; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    st->seq[i] = static_cast<uint32_t>(x % stacks);
  }
  for (uint32_t k = 0; k < kShapeStacks; ++k) {
    for (uint32_t j = 0; j < kShapeFill; ++j) {
      Object* o = &st->objects[k * kShapeFill + j];
      st->stack_of[o - st->objects] = static_cast<uint8_t>(k);
      ShapePush(kShape, st.get(), o);
    }
  }
  uint32_t i = 0;
  for (auto _ : state) {
    const uint32_t k = st->seq[i++ & (kShapeSeq - 1)];
    void* p = ShapePop(kShape, st.get(), k);
    benchmark::DoNotOptimize(p);
    ShapePush(kShape, st.get(), p);
  }
}
void BM_Shape_Array(benchmark::State& s) { BM_Shape<Shape::kArray>(s); }
void BM_Shape_CachedTop(benchmark::State& s) { BM_Shape<Shape::kCachedTop>(s); }
void BM_Shape_Ring(benchmark::State& s) { BM_Shape<Shape::kRing>(s); }
BENCHMARK(BM_Shape_Array)->ArgName("stacks")->Arg(1)->Arg(32);
BENCHMARK(BM_Shape_CachedTop)->ArgName("stacks")->Arg(1)->Arg(32);
BENCHMARK(BM_Shape_Ring)->ArgName("stacks")->Arg(1)->Arg(32);
void BM_Shape_List(benchmark::State& s) { BM_Shape<Shape::kList>(s); }
void BM_Shape_Packed(benchmark::State& s) { BM_Shape<Shape::kPacked>(s); }
BENCHMARK(BM_Shape_List)->ArgName("stacks")->Arg(1)->Arg(32);
BENCHMARK(BM_Shape_Packed)->ArgName("stacks")->Arg(1)->Arg(32);

}  // namespace

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
