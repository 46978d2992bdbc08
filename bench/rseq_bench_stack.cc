// bench/rseq_bench_stack.cc: BM_Stack_*, the floor under a cache's
// malloc+free pair: a pop and a push back, each a call of its own, with the
// allocator's per-ID stack critical sections (cpu mode's and cid mode's)
// against a thread-local array stack and a thread-local linked free list
// without rseq; and BM_TwoStacks_*, the cid sections on two stacks, with
// the push's stack known early, looked up from the object as free() does,
// or computed from the object's address (part of //bench:rseq_bench; see
// rseq_bench.cc).
#include <benchmark/benchmark.h>
#include <stdint.h>

#include <cstddef>

#include "bench/rseq_bench.h"
#include "rseq/rseq.h"

namespace {

using namespace cidmalloc_rseq_bench;  // NOLINT

constexpr uint32_t kStackCapacity = 64;
constexpr uint32_t kStackFill = 32;
// One per ID: a header line (as a slab has), then the stack.
struct alignas(64) StackRegion {
  char header[64];
  r::Stack stack;
};
constexpr uintptr_t kStackOffset = offsetof(StackRegion, stack);

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

// Two stacks per ID, as two size classes of a slab, popped and pushed in
// the order `order` picks (0: always the first; 1: at random; 2: in turn),
// with the push's stack offset found as PushOffset `offset` says: why a
// second class costs the allocator's pairs more than it costs these
// sections alone, and what finding the class by arithmetic on the address
// (a layout with a region per class) would give back (docs/benchmarks.md).
enum PushOffset : int64_t {
  kKnown = 0,     // the one the pop used, known before the push starts (as
                  // for sized delete, whose size gives it);
  kLoaded = 1,    // loaded from a side table by the object's address (as
                  // free() finds it in the span map);
  kComputed = 2,  // computed from the object's address: stack k's objects
                  // are the k-th half of a 4 KiB-aligned array.
};
struct alignas(64) TwoStackRegion {
  char header[64];
  r::Stack stack[2];
};
constexpr uintptr_t kTwoStackOffset = offsetof(TwoStackRegion, stack);
constexpr uint32_t kOrderLength = 4096;  // A power of two.

struct alignas(4096) TwoStackState {
  Object objects[2 * kStackFill];  // First: 4 KiB-aligned (kComputed).
  uint32_t offset_of[2 * kStackFill];  // object index -> stack offset
  uint8_t order[kOrderLength];         // the stack of each pair
  TwoStackRegion region;
  void** table;
};

TwoStackState* MakeTwoStackState(int order) {
  auto* st = new TwoStackState{};
  st->table = new void*[r::kWideTableIds]();
  // One region, for every ID this thread may have: the thread keeps its
  // objects whichever ID it runs on (no other thread uses the table).
  TwoStackRegion* region = &st->region;
  for (uint32_t k = 0; k < 2; ++k) {
    region->stack[k].capacity = kStackCapacity;
    for (uint32_t i = 0; i < kStackFill; ++i) {
      const uint32_t index = k * kStackFill + i;
      st->offset_of[index] =
          static_cast<uint32_t>(kTwoStackOffset + k * sizeof(r::Stack));
      region->stack[k].PushHeld(&st->objects[index]);
    }
  }
  for (uint32_t id = 0; id < r::NumIds(); ++id) st->table[id] = region;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint32_t i = 0; i < kOrderLength; ++i) {
    const uint64_t random = NextXorshift(x);
    st->order[i] = order == 0 ? 0 : order == 1 ? (random & 1) : (i & 1);
  }
  return st;
}

__attribute__((noinline)) void* TwoStackPop(void* const* table,
                                            uintptr_t offset) {
  void* item;
  return r::PopUnchecked<r::IdKind::kRaw, r::IdBound::kWideMmCid>(
             table, offset, &item)
             ? item
             : nullptr;
}
__attribute__((noinline)) bool TwoStackPush(void* const* table,
                                            uintptr_t offset, void* item) {
  return r::PushUnchecked<r::IdKind::kRaw, r::IdBound::kWideMmCid>(
      table, offset, item);
}
// The push's offset from the object's address by arithmetic (kComputed):
// bit 11 of the address is the stack's index.
static_assert(kStackFill * sizeof(Object) == 2048 && sizeof(r::Stack) == 16);
__attribute__((noinline)) bool TwoStackPushComputed(const TwoStackState* st,
                                                    void* item) {
  const uintptr_t off =
      kTwoStackOffset +
      ((reinterpret_cast<uintptr_t>(item) >> (11 - 4)) & sizeof(r::Stack));
  return r::PushUnchecked<r::IdKind::kRaw, r::IdBound::kWideMmCid>(
      st->table, off, item);
}
// The push's offset from the object's address, through a table load.
__attribute__((noinline)) bool TwoStackPushLooked(const TwoStackState* st,
                                                  void* item) {
  const size_t index = static_cast<size_t>(
      static_cast<const Object*>(item) - st->objects);
  return r::PushUnchecked<r::IdKind::kRaw, r::IdBound::kWideMmCid>(
      st->table, st->offset_of[index], item);
}

void BM_TwoStacks_RseqMmCid(benchmark::State& state) {
  if (SkipWithoutRseq(state)) return;
  if (!r::RawIdIsMmCid()) {
    state.SkipWithError("not in cid mode");
    return;
  }
  TwoStackState* st = MakeTwoStackState(static_cast<int>(state.range(0)));
  const auto how = static_cast<PushOffset>(state.range(1));
  int64_t empty = 0;
  uint32_t i = 0;
  for (auto _ : state) {
    const uintptr_t offset = kTwoStackOffset + sizeof(r::Stack) *
                                 st->order[i++ & (kOrderLength - 1)];
    void* p = TwoStackPop(st->table, offset);
    benchmark::DoNotOptimize(p);
    if (CIDMALLOC_UNLIKELY(p == nullptr)) {
      ++empty;
      continue;
    }
    switch (how) {
      case kKnown:
        TwoStackPush(st->table, offset, p);
        break;
      case kLoaded:
        TwoStackPushLooked(st, p);
        break;
      case kComputed:
        TwoStackPushComputed(st, p);
        break;
    }
  }
  state.counters["empty"] = static_cast<double>(empty);
  delete[] st->table;
  delete st;
}
BENCHMARK(BM_TwoStacks_RseqMmCid)
    ->ArgNames({"order", "offset"})
    ->ArgsProduct({{0, 1, 2}, {kKnown, kLoaded, kComputed}});

}  // namespace
