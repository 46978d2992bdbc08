#include "allocator/os/topology.h"

#include <hwloc.h>

#include "rseq/cpu_node.h"
#include "rseq/raw_io.h"

namespace cidmalloc::os {

constinit TopologyState g_topology = {1, false};

namespace {
void CountNode(int node, void* arg) {
  int* max = static_cast<int*>(arg);
  if (node + 1 > *max) *max = node + 1;
}
}  // namespace

void InitTopology() {
  if (g_topology.injected) return;
  char buf[256];
  int n = 0;
  if (ReadSmallFile("/sys/devices/system/node/possible", buf, sizeof buf) >
          0 &&
      ForEachInCpuList(buf, CountNode, &n) && n > 0) {
    g_topology.num_nodes = n < kMaxNodes ? n : kMaxNodes;
  } else {
    g_topology.num_nodes = 1;
  }
}

bool InjectTopology(int num_nodes, const uint16_t* nodes, uint32_t ncpus) {
  if (num_nodes < 1 || num_nodes > kMaxNodes) return false;
  if (!rseq::SetCpuNodeTable(nodes, ncpus)) return false;
  g_topology.num_nodes = num_nodes;
  g_topology.injected = true;
  return true;
}

int HwlocNodes(HwlocNodeInfo* out, int max) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return -1;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return -1;
  }
  const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n && i < max; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    out[i].os_index = static_cast<int>(obj->os_index);
    out[i].local_memory = obj->attr != nullptr
                              ? obj->attr->numanode.local_memory
                              : 0;
  }
  hwloc_topology_destroy(topo);
  return n;
}

}  // namespace cidmalloc::os
