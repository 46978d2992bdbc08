// tests/os/topology_test.cc: the topology read from sysfs (os::InitTopology)
// and which nodes it takes for memoryless (os::MemorylessNodes, from a node
// list as /sys/devices/system/node/has_memory gives it).  A node of cpus
// only gets no mbind (os::BindToNode): the kernel refuses one, and a
// reviewer's qemu topology with such a node counted a refused mbind for
// every chunk of its heap.  This binary uses glibc's malloc.
#include <sys/mman.h>

#include "allocator/os/os.h"
#include "allocator/os/topology.h"
#include "gtest/gtest.h"

namespace {

namespace os = ::cidmalloc::os;

TEST(Topology, MemorylessNodesAreThoseMissingFromHasMemory) {
  EXPECT_EQ(os::MemorylessNodes(3, "0-1\n"), uint64_t{1} << 2);
  EXPECT_EQ(os::MemorylessNodes(4, "0,2\n"), (uint64_t{1} << 1) | (1u << 3));
  EXPECT_EQ(os::MemorylessNodes(2, "0-1\n"), 0u);
  EXPECT_EQ(os::MemorylessNodes(1, "0\n"), 0u);
  // Nodes listed beyond num_nodes change nothing; all 64 nodes work.
  EXPECT_EQ(os::MemorylessNodes(2, "0-5\n"), 0u);
  EXPECT_EQ(os::MemorylessNodes(64, "0-62\n"), uint64_t{1} << 63);
}

TEST(Topology, AnUnreadableListMeansEveryNodeHasMemory) {
  EXPECT_EQ(os::MemorylessNodes(4, nullptr), 0u);
  EXPECT_EQ(os::MemorylessNodes(4, ""), 0u);
  EXPECT_EQ(os::MemorylessNodes(4, "zero"), 0u);
  EXPECT_EQ(os::MemorylessNodes(4, "2-1"), 0u);
}

TEST(Topology, ThisMachinesNodesAllHaveMemory) {
  os::InitTopology();
  ASSERT_GE(os::NumNodes(), 1);
  for (int node = 0; node < os::NumNodes(); ++node) {
    EXPECT_TRUE(os::NodeHasMemory(node)) << "node " << node;
  }
}

TEST(Topology, BindingToAMemorylessNodeIsSkipped) {
  os::InitTopology();
  const size_t len = 2 << 20;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  if (os::NumNodes() != 1) {
    munmap(m, len);
    GTEST_SKIP() << "needs a one-node machine, to pretend node 1 exists";
  }
  // Node 1 does not exist here: the kernel refuses it...
  EXPECT_FALSE(os::BindToNode(m, len, 1, os::NumaPolicy::kBind));
  // ...and, taken for a node of cpus only, it is not asked.
  const os::TopologyState saved = os::g_topology;
  os::g_topology.num_nodes = 2;
  os::g_topology.memoryless = uint64_t{1} << 1;
  EXPECT_FALSE(os::NodeHasMemory(1));
  EXPECT_TRUE(os::BindToNode(m, len, 1, os::NumaPolicy::kBind));
  EXPECT_TRUE(os::BindToNode(m, len, 1, os::NumaPolicy::kPreferred));
  EXPECT_TRUE(os::BindToNode(m, len, 0, os::NumaPolicy::kBind));
  os::g_topology = saved;
  munmap(m, len);
}

}  // namespace
