// bench/rseq_bench_shape.cc: BM_Shape_*, why random sizes cost a cache
// more than one size: pops from one of K stacks chosen at random, each
// pushed back to the stack its object belongs to, for five stack shapes
// (array, top item in the header, ring, list with a count, rseq::Stack's
// packed word); thread-local, no rseq (part of //bench:rseq_bench; see
// rseq_bench.cc).
#include <benchmark/benchmark.h>
#include <stdint.h>

#include <memory>

#include "bench/rseq_bench.h"
#include "rseq/rseq.h"

namespace {

using namespace cidmalloc_rseq_bench;  // NOLINT

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
    st->seq[i] = static_cast<uint32_t>(NextXorshift(x) % stacks);
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
