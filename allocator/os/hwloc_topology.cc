#include "allocator/os/hwloc_topology.h"

#include <hwloc.h>

namespace cidmalloc::os {

bool LoadHwlocTopology(HwlocTopology* out) {
  *out = HwlocTopology();
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return false;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return false;
  }
  const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  out->num_nodes = n;
  out->num_cpus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  hwloc_obj_t nodes[kMaxHwlocNodes];
  for (int i = 0; i < n && i < kMaxHwlocNodes; ++i) {
    nodes[i] = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    out->os_index[i] = static_cast<int>(nodes[i]->os_index);
    out->local_memory[i] =
        nodes[i]->attr != nullptr ? nodes[i]->attr->numanode.local_memory : 0;
  }
  // The kernel's SLIT latencies (hwloc 2.x distances API).
  struct hwloc_distances_s* dist = nullptr;
  unsigned nr = 1;
  if (hwloc_distances_get_by_type(topo, HWLOC_OBJ_NUMANODE, &nr, &dist,
                                  HWLOC_DISTANCES_KIND_MEANS_LATENCY,
                                  0) == 0 &&
      nr == 1) {
    for (unsigned i = 0; i < dist->nbobjs; ++i) {
      for (unsigned j = 0; j < dist->nbobjs; ++j) {
        const int a = static_cast<int>(dist->objs[i]->logical_index);
        const int b = static_cast<int>(dist->objs[j]->logical_index);
        if (a < kMaxHwlocNodes && b < kMaxHwlocNodes) {
          out->distance[a][b] =
              static_cast<uint32_t>(dist->values[i * dist->nbobjs + j]);
        }
      }
    }
    hwloc_distances_release(topo, dist);
  }
  hwloc_topology_destroy(topo);
  return true;
}

}  // namespace cidmalloc::os
