// tests/allocator/numa_logic_test: the allocator's NUMA logic on a
// simulated two-node machine.
//
// A topology is injected (os::InjectTopology) before anything can allocate:
// two nodes, cpu0 on node 0 and cpu1 on node 1 (every other cpu on node 0).
// The machine really has one node, so the allocator's notion of "node 1"
// is all that is tested: chunk ownership, where frees go, and the cache
// flush on a node change.  Binding memory to node 1 (mbind) fails, and
// must only be counted.
//
// When to inject: the allocator initialises at the first malloc, and that
// happens before main() (libstdc++'s and gtest's static initialisers
// allocate); initialisation decides, from the node count, whether free's
// fast path may skip the node check.  So the injection runs from
// .preinit_array, which the dynamic loader runs before any library's
// initialiser.  main() then pins the main thread to cpu0 and drains every
// cache: every thread of the test is pinned, and no thread migrates between
// nodes unless a test moves it.
//
// Built with CIDMALLOC_STATS=1 (counting on: remote_frees, local_allocs) in
// each rseq mode, and without counting in cid and cpu mode, where the fast
// paths run (see BUILD).
#include <malloc.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include "allocator/api/alloc.h"
#include "allocator/api/cidmalloc.h"
#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "allocator/os/os.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"
#include "tests/allocator/alloc_probe.h"
#include "tests/allocator/test_util.h"

// These tests look at blocks after freeing them (and free them twice) on
// purpose; the pointers also go through Opaque() so the optimiser cannot
// reason about them.
#pragma GCC diagnostic ignored "-Wuse-after-free"

namespace {

using cidmalloc::central::Class;
using cidmalloc::central::ClassOf;
using cidmalloc::central::ClassStats;
using cidmalloc::central::GetClassStats;
using cidmalloc::central::kNumClasses;
using cidmalloc_test::Dirty;
using cidmalloc_test::NodeOfPointer;
using cidmalloc_test::PinToCpu;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

bool g_injected = false;
std::vector<int> g_allowed_cpus;  // Before main() pinned itself.

// Runs from .preinit_array: before the allocator's first use.
void InjectTwoNodes(int, char**, char**) {
  static const uint16_t kNodes[2] = {0, 1};
  g_injected = cidmalloc::os::InjectTopology(2, kNodes, 2);
}
__attribute__((section(".preinit_array"), used)) void (*const
    g_inject_two_nodes)(int, char**, char**) = InjectTwoNodes;

cidmalloc_stats Stats() {
  cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  return s;
}

bool CountingRequested() {
  const char* v = getenv("CIDMALLOC_STATS");
  return v != nullptr && strcmp(v, "1") == 0;
}

// Objects of `node` sitting in the class stacks of every slab.  Only
// meaningful while no other thread allocates or frees.
uint64_t CachedObjectsOfNode(int node) {
  using cidmalloc::front_end::g_slabs;
  using cidmalloc::front_end::kLayout;
  uint64_t n = 0;
  for (uint32_t id = 0; id < cidmalloc::front_end::kMaxIds; ++id) {
    char* slab = static_cast<char*>(__atomic_load_n(&g_slabs[id], __ATOMIC_ACQUIRE));
    if (slab == nullptr) continue;
    for (int c = 1; c < kNumClasses; ++c) {
      auto* s = reinterpret_cast<cidmalloc::rseq::Stack*>(slab + kLayout.offset[c]);
      s->ForEachHeld([&](void* p) { n += NodeOfPointer(p) == node; });
    }
  }
  return n;
}

// Runs fn on a new thread pinned to `cpu`; fails the test if the thread
// cannot be pinned.
void RunOnCpu(int cpu, const std::function<void()>& fn) {
  bool pinned = false;
  std::thread t([&] {
    pinned = PinToCpu(cpu);
    if (pinned) fn();
  });
  t.join();
  ASSERT_TRUE(pinned) << "cannot pin a thread to cpu " << cpu;
}

class NumaLogicTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(g_injected)
        << "os::InjectTopology failed: the cpu->node table was built "
           "before .preinit_array ran";
    const std::vector<int>& cpus = g_allowed_cpus;
    ASSERT_TRUE(std::find(cpus.begin(), cpus.end(), 0) != cpus.end() &&
                std::find(cpus.begin(), cpus.end(), 1) != cpus.end())
        << "cpus 0 and 1 must both be usable";
  }
};

TEST_F(NumaLogicTest, InjectedTopologyIsWhatTheAllocatorSees) {
  EXPECT_EQ(cidmalloc::os::NumNodes(), 2);
  EXPECT_EQ(Stats().num_nodes, 2u);
  // With more than one node, free's fast path must not skip the node check.
  EXPECT_EQ(cidmalloc::api::FastFlags() & cidmalloc::api::kFastFree, 0);
  int node0 = -1, node1 = -1;
  RunOnCpu(0, [&] { node0 = cidmalloc::os::CurrentNode(); });
  RunOnCpu(1, [&] { node1 = cidmalloc::os::CurrentNode(); });
  EXPECT_EQ(node0, 0);
  EXPECT_EQ(node1, 1);
}

// Every kind of block allocated on a cpu comes from that cpu's node.
void ExpectAllKindsOnNode(int cpu, int node) {
  std::vector<void*> blocks;
  blocks.reserve(200);
  RunOnCpu(cpu, [&] {
    malloc_trim(0);  // No cache holds another node's objects.
    for (int c = 1; c < kNumClasses; ++c) blocks.push_back(malloc(Class(c).size));
    blocks.push_back(calloc(10, 100));
    blocks.push_back(memalign(4096, 100));
    blocks.push_back(aligned_alloc(1 << 16, 1000));
    blocks.push_back(::operator new(777));
    blocks.push_back(malloc(200 * kKiB));
    blocks.push_back(malloc(kMiB));
    blocks.push_back(memalign(2 * kMiB, 100));
    blocks.push_back(malloc(3 * kMiB));
    blocks.push_back(aligned_alloc(4 * kMiB, 5 * kMiB));
    for (void* p : blocks) {
      if (p != nullptr) Dirty(p, 0x42, std::min<size_t>(malloc_usable_size(p), 4096));
    }
  });
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_NE(blocks[i], nullptr) << i;
    EXPECT_EQ(NodeOfPointer(blocks[i]), node)
        << "block " << i << " (" << malloc_usable_size(blocks[i])
        << " bytes) allocated on cpu " << cpu;
    // A small object's span tag names the node too (free's node-qualified
    // push relies on it).
    const uint32_t tag = cidmalloc::page_heap::LookupSpanTag(
        reinterpret_cast<uintptr_t>(blocks[i]));
    if (cidmalloc::central::TagClass(tag) != 0) {
      EXPECT_EQ(cidmalloc::central::TagNode(tag), node)
          << "span tag of block " << i;
    }
  }
  RunOnCpu(cpu, [&] {
    for (void* p : blocks) free(p);
  });
}

TEST_F(NumaLogicTest, BlocksAllocatedOnCpu1LiveInNode1Chunks) {
  ExpectAllKindsOnNode(1, 1);
}

TEST_F(NumaLogicTest, BlocksAllocatedOnCpu0LiveInNode0Chunks) {
  ExpectAllKindsOnNode(0, 0);
}

size_t MixedSize(int i) {
  return static_cast<size_t>((i * 37) % 4000 + 1) +
         (i % 500 == 0 ? 100 * kKiB : 0);
}

// 10^5 allocations of mixed sizes (a rolling window of live blocks) on a
// thread pinned to node 1: returns how many came from elsewhere.  Once
// pinned, and before allocating, the thread drains every cache if asked,
// and counts the node-0 objects the caches hold: from then on it is the
// only thread that allocates (creating it made the main thread allocate).
enum class Caches : uint8_t { kKeep, kDrainFirst };
int NonLocalAllocationsOnCpu1(Caches caches, uint64_t* cached_node0,
                              int* first_nonlocal) {
  constexpr int kAllocs = 100000;
  constexpr int kWindow = 2000;
  int nonlocal = 0;
  *first_nonlocal = -1;
  RunOnCpu(1, [&] {
    if (caches == Caches::kDrainFirst) malloc_trim(0);
    *cached_node0 = CachedObjectsOfNode(0);
    std::vector<void*> window(kWindow, nullptr);
    for (int i = 0; i < kAllocs; ++i) {
      void*& slot = window[i % kWindow];
      free(slot);
      slot = malloc(MixedSize(i));
      if (slot == nullptr || NodeOfPointer(slot) != 1) {
        if (nonlocal++ == 0) *first_nonlocal = i;
      }
    }
    for (void* p : window) free(p);
  });
  return nonlocal;
}

// Node 0 churns the sizes the node-1 thread will use, so node 0's central
// lists and caches are full of node-0 objects of every one of them.
void ChurnOnNode0() {
  RunOnCpu(0, [&] {
    std::vector<void*> v;
    for (int i = 0; i < 20000; ++i) v.push_back(malloc(MixedSize(i)));
    for (void* p : v) free(p);
  });
}

// A thread pinned to node 1 whose caches start empty never gets node-0
// memory: every refill comes from node 1's lists and page heap.
TEST_F(NumaLogicTest, PinnedThreadOnNode1GetsOnlyNode1Memory) {
  ChurnOnNode0();
  const cidmalloc_stats before = Stats();
  int first = -1;
  uint64_t cached_node0 = 0;
  // Empty caches: any node-0 object would have to come from below them.
  const int nonlocal = NonLocalAllocationsOnCpu1(Caches::kDrainFirst, &cached_node0,
                                                 &first);
  EXPECT_EQ(cached_node0, 0u);
  const cidmalloc_stats after = Stats();
  EXPECT_EQ(nonlocal, 0) << "allocations from node 0 (first at #" << first
                         << ") on a thread pinned to node 1";
  if (after.counting) {
    // Only the pinned thread allocated meanwhile (plus std::thread's state).
    EXPECT_GE(after.mallocs - before.mallocs, 100000u);
    EXPECT_GE(after.local_allocs - before.local_allocs, 100000u);
  }
}

// Without draining first, a node-1 thread may be handed what a cache
// filled on node 0 still holds (in cid mode a cid, and so a slab, moves
// between cpus: the fast path does not check the node; the first miss
// flushes the slab).  Never more than that: nothing of node 0 comes from
// the central lists or the page heap.  In cpu mode slabs never change
// node, and a soft ID's slab is drained when its thread exits: none at all.
TEST_F(NumaLogicTest, StaleCachesAreTheOnlySourceOfRemoteObjects) {
  ChurnOnNode0();
  int first = -1;
  uint64_t cached_node0 = 0;
  const int nonlocal = NonLocalAllocationsOnCpu1(Caches::kKeep, &cached_node0, &first);
  EXPECT_LE(static_cast<uint64_t>(nonlocal), cached_node0)
      << "node-0 objects handed out on node 1 beyond what caches held";
  const std::string mode = Stats().mode;
  if (mode != "cid") {
    EXPECT_EQ(nonlocal, 0) << "first at #" << first << " (mode " << mode
                           << ")";
  }
  printf("mode %s: %d of 100000 allocations on node 1 were node-0 objects "
         "(%llu node-0 objects were cached)\n",
         mode.c_str(), nonlocal,
         static_cast<unsigned long long>(cached_node0));
}

// A thread that moves from node 0 to node 1 may first get back what it
// cached on node 0; once its cache misses, the cache is flushed and every
// allocation is local.  With counting on, local_allocs counts exactly the
// allocations whose chunk is on the allocating thread's node: the ones
// after the move, less the node-0 objects the cache handed back.  A soft
// ID (none mode) stays with its thread, so there the cache is the one
// filled on node 0 and at least one allocation is not local.
TEST_F(NumaLogicTest, MigratingThreadTurnsLocalAfterItsCacheEmpties) {
  constexpr int kAllocs = 2000;
  const size_t size = 700;
  const int cls = ClassOf(size);
  std::vector<int> nodes;
  cidmalloc_stats before{}, after{};
  bool pinned = true;
  malloc_trim(0);
  std::thread t([&] {
    pinned = PinToCpu(0);
    // Room for every pointer and node, reserved on node 0: after the move
    // the test allocates nothing of its own (a miss of another class
    // would flush the cache), and only the kAllocs mallocs count.
    std::vector<void*> v;
    v.reserve(kAllocs);
    nodes.reserve(kAllocs);
    for (int i = 0; i < 200; ++i) v.push_back(malloc(size));
    for (void* p : v) free(p);  // The cache is full of node-0 objects.
    v.clear();
    pinned = pinned && PinToCpu(1);
    before = Stats();
    for (int i = 0; i < kAllocs; ++i) {
      void* p = malloc(size);
      v.push_back(p);
      nodes.push_back(NodeOfPointer(p));
    }
    after = Stats();
    for (void* p : v) free(p);
  });
  t.join();
  ASSERT_TRUE(pinned);
  size_t first_local = 0;
  while (first_local < nodes.size() && nodes[first_local] != 1) ++first_local;
  EXPECT_LE(first_local, Class(cls).max_capacity)
      << "node-0 objects handed out after the move";
  for (size_t i = first_local; i < nodes.size(); ++i) {
    ASSERT_EQ(nodes[i], 1) << "allocation #" << i << " after the move";
  }
  if (after.counting) {
    EXPECT_EQ(after.mallocs - before.mallocs, uint64_t{kAllocs});
    EXPECT_EQ(after.local_allocs - before.local_allocs, kAllocs - first_local)
        << first_local << " node-0 objects were handed out on node 1";
    if (std::string(after.mode) == "none") {
      EXPECT_GT(first_local, 0u)
          << "the soft ID's cache, filled on node 0, handed out nothing";
    }
  }
  if (first_local > 0) {
    printf("note: %zu node-0 objects were handed out on node 1 before the "
           "first miss flushed the cache\n",
           first_local);
  }
}

// Objects allocated on node 0 and freed on node 1 go back to node 0's
// central list, never to node 1's, and never into node 1's caches.
TEST_F(NumaLogicTest, RemoteFreesGoHomeToNode0) {
  constexpr int kObjects = 3000;
  const size_t size = 5000;
  const int cls = ClassOf(size);
  std::vector<void*> objects;
  cidmalloc::page_heap::CheckInvariants();
  RunOnCpu(0, [&] {
    for (int i = 0; i < kObjects; ++i) objects.push_back(malloc(size));
  });
  for (void* p : objects) {
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(NodeOfPointer(p), 0);
  }
  malloc_trim(0);  // Every cache drained: a stable baseline, and no node-0
                   // object left in any cache the node-1 thread may use.
  ClassStats home_before, away_before;
  GetClassStats(0, cls, &home_before);
  GetClassStats(1, cls, &away_before);
  const cidmalloc_stats before = Stats();

  std::vector<int> realloc_nodes;
  RunOnCpu(1, [&] {
    for (void* p : objects) free(p);
    // Allocating the same class on node 1 now must not hand back the
    // node-0 objects just freed.
    std::vector<void*> mine;
    for (int i = 0; i < 200; ++i) {
      void* p = malloc(size);
      mine.push_back(p);
      realloc_nodes.push_back(NodeOfPointer(p));
    }
    for (void* p : mine) free(p);
  });
  const cidmalloc_stats after_frees = Stats();
  malloc_trim(0);  // The remote stacks go home too.
  ClassStats home_after, away_after;
  GetClassStats(0, cls, &home_after);
  GetClassStats(1, cls, &away_after);

  const uint64_t in_use_before = home_before.total_objects - home_before.free_objects;
  const uint64_t in_use_after = home_after.total_objects - home_after.free_objects;
  EXPECT_EQ(in_use_before - in_use_after, uint64_t{kObjects})
      << "node 0's list did not get its objects back";
  // Node 1's list holds only the spans of its own 200 allocations, all
  // free again.
  EXPECT_EQ(away_after.total_objects - away_after.free_objects,
            away_before.total_objects - away_before.free_objects);
  for (size_t i = 0; i < realloc_nodes.size(); ++i) {
    ASSERT_EQ(realloc_nodes[i], 1) << "allocation #" << i
                                   << " on node 1 after the remote frees";
  }
  EXPECT_EQ(after_frees.counting, CountingRequested() ? 1 : 0);
  if (after_frees.counting) {
    EXPECT_GE(after_frees.remote_frees - before.remote_frees,
              unsigned{kObjects});
  } else {
    EXPECT_EQ(after_frees.remote_frees, 0u);
  }
  cidmalloc::central::CheckInvariants();
  cidmalloc::page_heap::CheckInvariants();
}

// A page run and a huge block freed on the other node are remote frees
// too, though they go straight to their own node's page heap; freed on
// their own node they are not.
TEST_F(NumaLogicTest, LargeBlocksFreedOnTheOtherNodeCountAsRemote) {
  constexpr size_t kRun = 300 * kKiB;  // Page runs: 128 KiB + 1 to 2 MiB.
  constexpr size_t kHuge = 3 * kMiB;   // A mapping of its own.
  void* blocks[4] = {};
  RunOnCpu(0, [&] {
    for (int i = 0; i < 4; ++i) blocks[i] = malloc(i % 2 == 0 ? kRun : kHuge);
  });
  for (void* p : blocks) {
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(NodeOfPointer(p), 0);
  }
  // Counted around the frees alone, on the thread that frees (reading the
  // statistics does not allocate).
  const auto free_on = [](int cpu, void* a, void* b, uint64_t* frees,
                          uint64_t* remote) {
    RunOnCpu(cpu, [&] {
      const cidmalloc_stats before = Stats();
      free(a);
      free(b);
      const cidmalloc_stats after = Stats();
      *frees = after.frees - before.frees;
      *remote = after.remote_frees - before.remote_frees;
    });
  };
  uint64_t frees_away = 0, remote_away = 0, frees_home = 0, remote_home = 0;
  free_on(1, blocks[0], blocks[1], &frees_away, &remote_away);
  free_on(0, blocks[2], blocks[3], &frees_home, &remote_home);
  if (CountingRequested()) {
    EXPECT_EQ(frees_away, 2u);
    EXPECT_EQ(remote_away, 2u) << "a run and a huge block freed on node 1";
    EXPECT_EQ(frees_home, 2u);
    EXPECT_EQ(remote_home, 0u) << "a run and a huge block freed on node 0";
  } else {
    EXPECT_EQ(remote_away + remote_home, 0u);
  }
}

TEST_F(NumaLogicTest, BindingToTheMissingNodeFailsAndIsCounted) {
  // The kernel refuses node 1 (it does not exist) and accepts node 0.
  const size_t len = 2 * kMiB;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_FALSE(cidmalloc::os::BindToNode(m, len, 1,
                                         cidmalloc::os::NumaPolicy::kBind));
  EXPECT_FALSE(cidmalloc::os::BindToNode(
      m, len, 1, cidmalloc::os::NumaPolicy::kPreferred));
  EXPECT_TRUE(cidmalloc::os::BindToNode(m, len, 0,
                                        cidmalloc::os::NumaPolicy::kBind));
  EXPECT_TRUE(
      cidmalloc::os::BindToNode(m, len, 1, cidmalloc::os::NumaPolicy::kOff));
  Dirty(m, 1, len);
  EXPECT_EQ(cidmalloc::os::NodeOfAddress(m), 0);
  munmap(m, len);

  // Node 1's page heap has grown (its chunks' mbind failed)...
  RunOnCpu(1, [] { free(malloc(100 * kKiB)); });
  // ...and a huge block on node 1 maps memory of its own, whose mbind
  // fails: one more failure, and the memory works.
  const cidmalloc_stats before = Stats();
  void* huge = nullptr;
  RunOnCpu(1, [&] { huge = malloc(6 * kMiB); });
  ASSERT_NE(huge, nullptr);
  EXPECT_EQ(NodeOfPointer(huge), 1);
  Dirty(huge, 0x11, 6 * kMiB);
  const cidmalloc_stats after = Stats();
  EXPECT_EQ(after.node_bind_failures[1] - before.node_bind_failures[1], 1u);
  EXPECT_GE(after.node_bind_failures[1], 2u)
      << "node 1's page heap chunks were never refused";
  EXPECT_EQ(after.node_bind_failures[0], 0u) << "binding to node 0 failed";
  free(huge);

  cidmalloc_test::FdCapture capture(2);
  cidmalloc_print_stats(2);
  const std::string text = capture.Finish();
  EXPECT_NE(text.find("cidmalloc: node 1: "), std::string::npos) << text;
  EXPECT_NE(text.find("mbind failures"), std::string::npos) << text;
}

}  // namespace

int main(int argc, char** argv) {
  g_allowed_cpus = cidmalloc_test::AllowedCpus();
  // The main thread stays on node 0, and the caches filled before main()
  // (by static initialisers, on whatever cpu) are emptied.
  if (!PinToCpu(0)) fprintf(stderr, "cannot pin the main thread to cpu0\n");
  malloc_trim(0);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
