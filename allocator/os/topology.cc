#include "allocator/os/topology.h"

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
  // Too late once rseq (and so the allocator) initialised: the fast paths
  // were chosen for the real topology.  Acquire: pairs with rseq's release
  // store of 2 in InitSlow(); only the value matters to this test hook,
  // which must run before the first allocation (topology.h).
  if (rseq::g_process.init_state.load(std::memory_order_acquire) != 0) {
    return false;
  }
  if (!rseq::SetCpuNodeTable(nodes, ncpus)) return false;
  g_topology.num_nodes = num_nodes;
  g_topology.injected = true;
  return true;
}

}  // namespace cidmalloc::os
