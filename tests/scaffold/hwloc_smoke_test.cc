// Smoke test: hwloc (Debian libhwloc-dev) links and sees >= 1 NUMA node.
#include <hwloc.h>

#include <gtest/gtest.h>

TEST(HwlocSmoke, FindsAtLeastOneNumaNode) {
  hwloc_topology_t topology;
  ASSERT_EQ(hwloc_topology_init(&topology), 0);
  ASSERT_EQ(hwloc_topology_load(topology), 0);
  const int numa_nodes =
      hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  hwloc_topology_destroy(topology);
  EXPECT_GE(numa_nodes, 1);
}
