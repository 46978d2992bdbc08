// allocator/os/hwloc_topology.h: hwloc's view of the NUMA topology.
//
// Layer 2, but a target of its own (//allocator/os:hwloc_topology) that
// the allocator library does not link: loading libhwloc (and libudev) costs
// every preloaded process start-up time, and hwloc allocates.  Tools
// (`cidmalloc info`) and tests use it to report memory and distances per
// node and to check the sysfs-derived node count the allocator uses.
#ifndef CIDMALLOC_ALLOCATOR_OS_HWLOC_TOPOLOGY_H_
#define CIDMALLOC_ALLOCATOR_OS_HWLOC_TOPOLOGY_H_

#include <stdint.h>

namespace cidmalloc::os {

inline constexpr int kMaxHwlocNodes = 64;

struct HwlocTopology {
  int num_nodes = 0;
  int num_cpus = 0;                     // Processing units.
  int os_index[kMaxHwlocNodes] = {};    // Kernel node number of each node.
  uint64_t local_memory[kMaxHwlocNodes] = {};  // Bytes.
  // distance[i][j]: relative latency from node i to node j (10 = local),
  // 0 where hwloc has no distance matrix.
  uint32_t distance[kMaxHwlocNodes][kMaxHwlocNodes] = {};
};

// Loads the topology with hwloc.  Returns false if hwloc fails.
bool LoadHwlocTopology(HwlocTopology* out);

}  // namespace cidmalloc::os

#endif  // CIDMALLOC_ALLOCATOR_OS_HWLOC_TOPOLOGY_H_
