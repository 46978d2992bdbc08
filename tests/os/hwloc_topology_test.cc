// The allocator's node count comes from sysfs (allocator/os/topology.h);
// hwloc must agree with it, and report memory and distances per node.
#include "allocator/os/hwloc_topology.h"

#include <unistd.h>

#include "allocator/os/topology.h"
#include "gtest/gtest.h"

namespace cidmalloc::os {
namespace {

TEST(HwlocTopology, AgreesWithTheSysfsNodeCount) {
  HwlocTopology t;
  ASSERT_TRUE(LoadHwlocTopology(&t));
  InitTopology();
  EXPECT_EQ(t.num_nodes, NumNodes());
  EXPECT_EQ(t.num_cpus, sysconf(_SC_NPROCESSORS_ONLN));
}

TEST(HwlocTopology, ReportsMemoryAndLocalDistances) {
  HwlocTopology t;
  ASSERT_TRUE(LoadHwlocTopology(&t));
  ASSERT_GE(t.num_nodes, 1);
  uint64_t total = 0;
  for (int i = 0; i < t.num_nodes; ++i) {
    total += t.local_memory[i];
    // Where the kernel publishes distances, local access is the minimum.
    if (t.distance[i][i] != 0) {
      for (int j = 0; j < t.num_nodes; ++j) {
        EXPECT_LE(t.distance[i][i], t.distance[i][j]) << i << "->" << j;
      }
    }
  }
  // hwloc reads node meminfo, which a VM's balloon or hotplug accounting can
  // put well below _SC_PHYS_PAGES; it can never exceed it.
  const uint64_t phys = uint64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GT(total, 0u);
  EXPECT_LE(total, phys);
}

}  // namespace
}  // namespace cidmalloc::os
