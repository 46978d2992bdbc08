// tests/allocator/front_end_invariants_test.cc: front_end::CheckInvariants
// in a process that runs on cidmalloc.  It holds after threads allocate and
// free across each other, and it aborts on a stack whose links a use after
// free has overwritten.  Also the fast paths' size table against the
// classes, the slab layout's inverse, and where slabs are placed.
#include <stdint.h>
#include <stdlib.h>

#include <mutex>
#include <thread>
#include <vector>

#include "allocator/api/alloc.h"
#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "gtest/gtest.h"
#include "rseq/rseq.h"

namespace {

namespace fe = ::cidmalloc::front_end;

uint64_t Rand(uint64_t* x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

// malloc's fast path takes the stack from the size alone (kOffsetIndex);
// its slow path takes the class from the stack offset.  Both must agree
// with the size classes for every small size.
TEST(FrontEndLayout, SizeTableAgreesWithTheClassesAndInverts) {
  namespace central = ::cidmalloc::central;
  for (size_t size = 0; size <= central::kMaxSmallSize; ++size) {
    const uintptr_t offset = size <= fe::kMaxSmallOffsetIndexed
                                 ? fe::SmallStackOffsetOf(size)
                                 : fe::MidStackOffsetOf(size);
    const int cls = central::ClassOf(size);
    ASSERT_EQ(offset, fe::kLayout.offset[cls]) << "size " << size;
    ASSERT_EQ(fe::ClassOfStackOffset(static_cast<uint32_t>(offset)), cls)
        << "size " << size;
    ASSERT_GE(central::kClasses.info[cls].size, size == 0 ? 1 : size);
  }
}

TEST(FrontEndInvariants, HoldAfterThreadsAllocateAndFreeAcrossEachOther) {
  constexpr int kThreads = 4;
  constexpr int kOps = 200000;
  std::mutex mu;
  std::vector<void*> shared;  // Objects any thread may free.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 0x9e3779b97f4a7c15ull * (t + 1);
      std::vector<void*> mine;
      for (int i = 0; i < kOps; ++i) {
        const uint64_t r = Rand(&x);
        if (r % 3 != 0 || mine.empty()) {
          void* p = malloc(1 + (r >> 8) % 2048);
          ASSERT_NE(p, nullptr);
          static_cast<char*>(p)[0] = 1;
          mine.push_back(p);
        } else {
          free(mine.back());
          mine.pop_back();
        }
        if (r % 61 == 0 && !mine.empty()) {  // Hand one to another thread.
          std::lock_guard<std::mutex> l(mu);
          shared.push_back(mine.back());
          mine.pop_back();
        }
        if (r % 67 == 0) {
          std::lock_guard<std::mutex> l(mu);
          if (!shared.empty()) {
            free(shared.back());
            shared.pop_back();
          }
        }
      }
      for (void* p : mine) free(p);
    });
  }
  for (std::thread& th : threads) th.join();
  for (void* p : shared) free(p);
  fe::Stats stats;
  fe::GetStats(&stats);
  EXPECT_GT(stats.cached_bytes, 0u) << "nothing cached: the check is vacuous";
  fe::CheckInvariants();  // Aborts on a broken stack.
  ::cidmalloc::central::CheckInvariants();
}

// Slab placement (front_end.cc): no class stack (nor the remote stack) of
// any slab shares its page offset with the statics the fast paths load on
// every operation: the rseq area's offset and ID field's offset, the API
// layer's g_state, and the slab's own g_slabs entry.
TEST(FrontEndLayout, NoStackSharesAPageOffsetWithTheFastPathsStatics) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) free(malloc(16 + i % 1000));
    });
  }
  for (std::thread& th : threads) th.join();
  constexpr uintptr_t kPage = 4096;
  const uintptr_t stacks_begin = fe::kHeaderBytes;
  const uintptr_t stacks_end =
      fe::kLayout.remote_offset + sizeof(::cidmalloc::rseq::Stack);
  const auto shares = [&](uintptr_t slab, uintptr_t at, size_t bytes) {
    for (uintptr_t b = at; b < at + bytes; ++b) {
      for (uintptr_t s = slab + stacks_begin; s < slab + stacks_end; ++s) {
        if (b % kPage == s % kPage) return true;
      }
    }
    return false;
  };
  int slabs = 0;
  for (uint32_t id = 0; id < fe::kMaxIds; ++id) {
    const uintptr_t slab = reinterpret_cast<uintptr_t>(
        __atomic_load_n(&fe::g_slabs[id], __ATOMIC_ACQUIRE));
    if (slab == 0) continue;
    ++slabs;
    EXPECT_FALSE(shares(slab,
                        reinterpret_cast<uintptr_t>(
                            ::cidmalloc::rseq::SectionStatics()),
                        ::cidmalloc::rseq::kSectionStaticsBytes))
        << "slab of ID " << id;
    EXPECT_FALSE(shares(slab,
                        reinterpret_cast<uintptr_t>(&::cidmalloc::api::g_state),
                        sizeof(uintptr_t)))
        << "slab of ID " << id;
    EXPECT_FALSE(shares(slab, reinterpret_cast<uintptr_t>(&fe::g_slabs[id]),
                        sizeof(void*)))
        << "slab of ID " << id;
  }
  EXPECT_GT(slabs, 0);
}

TEST(FrontEndInvariantsDeathTest, AbortOnALinkOverwrittenAfterFree) {
  // A class nothing else in this process uses: gtest's own allocations do
  // not take these objects off the stack while the test holds them there.
  constexpr size_t kSize = 20000;
  void* a = malloc(kSize);
  void* b = malloc(kSize);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // The address of b, hidden from GCC's use-after-free warning: this test
  // writes to the freed object on purpose.
  uintptr_t b_bits = reinterpret_cast<uintptr_t>(b);
  asm volatile("" : "+r"(b_bits));
  free(a);
  free(b);  // b is on top (on this thread's ID, or another's if it moved).
  fe::CheckInvariants();
  uint64_t& link = *reinterpret_cast<uint64_t*>(b_bits);
  const uint64_t saved = link;
  link = 0x5eed;  // A use after free writes the object's first word.
  EXPECT_DEATH(fe::CheckInvariants(), "stack: a link's count is not one less");
  link = saved;
  fe::CheckInvariants();
}

}  // namespace
