// tests/allocator/front_end_capacity_test.cc: how a class's capacity in the
// calling thread's slab follows its misses (front_end.h, "Capacity"), in a
// process that runs on cidmalloc.  A class that misses now and then keeps a
// quarter batch; one that misses in quick succession grows beyond a batch.
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <set>
#include <vector>

#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "gtest/gtest.h"
#include "rseq/rseq.h"

namespace {

namespace central = ::cidmalloc::central;
namespace fe = ::cidmalloc::front_end;
namespace rseq = ::cidmalloc::rseq;

// Sizes of two classes nothing else in this test allocates (gtest's own
// allocations are smaller), each exactly a class's size.
constexpr size_t kSparseSize = 1280;
constexpr size_t kDenseSize = 1792;

// The capacity of class `cls` in the slab of the calling thread's current
// ID, or -1 if that ID has no slab.
int Capacity(int cls) {
  void* slab = __atomic_load_n(&fe::g_slabs[rseq::CurrentId()],
                               __ATOMIC_ACQUIRE);
  if (slab == nullptr) return -1;
  const auto* s = reinterpret_cast<const rseq::Stack*>(
      static_cast<char*>(slab) + fe::kLayout.offset[cls]);
  return __atomic_load_n(&s->capacity, __ATOMIC_RELAXED);
}

// Keeps the thread on the cpu it runs on, so that its ID (a cpu, or a cid
// that nothing else in the process competes for) stays the same.
void PinToCurrentCpu() {
  const int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
}

void SleepMs(long ms) {
  timespec ts{0, ms * 1000000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// Each object written whole and distinct from every other.
void CheckDistinct(const std::vector<void*>& objs, size_t size) {
  const std::set<void*> unique(objs.begin(), objs.end());
  ASSERT_EQ(unique.size(), objs.size()) << "an object handed out twice";
  for (void* p : objs) {
    ASSERT_NE(p, nullptr);
    memset(p, 0xa5, size);
  }
}

TEST(FrontEndCapacity, ClassMissedNowAndThenKeepsAQuarterBatch) {
  PinToCurrentCpu();
  const int cls = central::ClassOf(kSparseSize);
  ASSERT_EQ(central::Class(cls).size, kSparseSize);
  const uint32_t batch = central::Class(cls).batch;
  const uint32_t sparse = batch / 4 < 2 ? 2 : batch / 4;
  ASSERT_LT(sparse, batch) << "the class cannot tell the two apart";
  const uint32_t id = rseq::CurrentId();
  std::vector<void*> held;
  // Each round empties the stack and misses once (objects held, none
  // freed): the refill takes `sparse` objects, one returned, the rest
  // popped by the round's other mallocs.  Rounds 5 ms apart: well beyond
  // kGrowWindow at any clock rate of 1-4 GHz.
  for (int round = 0; round < 12; ++round) {
    for (uint32_t i = 0; i < sparse; ++i) held.push_back(malloc(kSparseSize));
    SleepMs(5);
  }
  const int capacity = Capacity(cls);
  CheckDistinct(held, kSparseSize);
  for (void* p : held) free(p);
  if (rseq::CurrentId() != id) GTEST_SKIP() << "the thread's ID changed";
  EXPECT_EQ(capacity, static_cast<int>(sparse))
      << "batch " << batch << ": a class missed every 5 ms grew";
}

TEST(FrontEndCapacity, ClassMissedInQuickSuccessionGrowsBeyondABatch) {
  PinToCurrentCpu();
  const int cls = central::ClassOf(kDenseSize);
  ASSERT_EQ(central::Class(cls).size, kDenseSize);
  const uint32_t batch = central::Class(cls).batch;
  const uint32_t id = rseq::CurrentId();
  std::vector<void*> held;
  held.reserve(40 * batch);
  // Back to back: a miss every `batch` mallocs or fewer, microseconds
  // apart, and held, so that every miss needs a refill.
  for (uint32_t i = 0; i < 40 * batch; ++i) held.push_back(malloc(kDenseSize));
  const int grown_by_mallocs = Capacity(cls);
  CheckDistinct(held, kDenseSize);
  for (void* p : held) free(p);
  if (rseq::CurrentId() != id) GTEST_SKIP() << "the thread's ID changed";
  EXPECT_GT(grown_by_mallocs, static_cast<int>(batch))
      << "a class that missed " << 40 << " batches in a row did not grow";
}

}  // namespace
