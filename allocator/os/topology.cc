#include "allocator/os/topology.h"

#include "rseq/cpu_node.h"
#include "rseq/raw_io.h"

namespace cidmalloc::os {

constinit TopologyState g_topology = {1, false, 0};

namespace {
void CountNode(int node, void* arg) {
  int* max = static_cast<int*>(arg);
  if (node + 1 > *max) *max = node + 1;
}
void MarkNode(int node, void* arg) {
  if (node >= 0 && node < kMaxNodes) {
    *static_cast<uint64_t*>(arg) |= uint64_t{1} << node;
  }
}
}  // namespace

uint64_t MemorylessNodes(int num_nodes, const char* has_memory) {
  uint64_t with_memory = 0;
  if (has_memory == nullptr || !ForEachInCpuList(has_memory, MarkNode,
                                                 &with_memory) ||
      with_memory == 0) {
    return 0;  // Unknown: every node has memory.
  }
  const uint64_t all =
      num_nodes >= 64 ? ~uint64_t{0} : (uint64_t{1} << num_nodes) - 1;
  return all & ~with_memory;
}

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
  g_topology.memoryless = 0;
  if (g_topology.num_nodes > 1 &&
      ReadSmallFile("/sys/devices/system/node/has_memory", buf, sizeof buf) >
          0) {
    g_topology.memoryless = MemorylessNodes(g_topology.num_nodes, buf);
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
  g_topology.memoryless = 0;  // Its nodes are pretend: binding is tested.
  return true;
}

}  // namespace cidmalloc::os
