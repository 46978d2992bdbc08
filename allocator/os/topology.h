// allocator/os/topology.h: NUMA nodes and the current node.
//
// The allocator needs only the node count and the current node: those come
// from sysfs and rseq (node_id, or the cpu->node table) without allocating.
// hwloc, which allocates and costs milliseconds to load, lives in its own
// target (hwloc_topology.h) that the library does not link: tools and tests
// use it for memory per node and distances.
#ifndef CIDMALLOC_ALLOCATOR_OS_TOPOLOGY_H_
#define CIDMALLOC_ALLOCATOR_OS_TOPOLOGY_H_

#include <stdint.h>

#include "rseq/rseq.h"

namespace cidmalloc::os {

inline constexpr int kMaxNodes = 64;

// Written during the allocator's initialisation (InitTopology, before the
// release store of api's g_init_state) or before it (InjectTopology);
// read-only afterwards.
struct TopologyState {
  int num_nodes;        // Node indices are in [0, num_nodes).
  bool injected;        // A test injected a cpu->node table.
  // Bit n: node n has no memory of its own (not in
  // /sys/devices/system/node/has_memory): a node of cpus only.
  uint64_t memoryless;
};
extern TopologyState g_topology CIDMALLOC_HIDDEN;

// Reads the node count, and which nodes have memory, from sysfs.
// Idempotent; no allocation.
void InitTopology();

// The nodes below num_nodes that are missing from `has_memory` (a node list
// as in /sys/devices/system/node/has_memory, "0-1,3"), as a bitmask; 0 when
// the list is null, malformed or empty (then every node counts as having
// memory).
uint64_t MemorylessNodes(int num_nodes, const char* has_memory);

inline int NumNodes() { return g_topology.num_nodes; }

// Whether node `node` (in [0, NumNodes())) has memory of its own.  A
// memoryless node's heap binds nothing (BindToNode): the kernel places its
// pages on the nearest node that has memory, as it places those of any
// task on that node's cpus.
inline bool NodeHasMemory(int node) {
  return ((g_topology.memoryless >> node) & 1) == 0;
}

// The node of the cpu the calling thread runs on, in [0, NumNodes()).
inline int CurrentNode() {
  int node;
  if (CIDMALLOC_UNLIKELY(g_topology.injected)) {
    node = rseq::NodeOfCpu(rseq::CurrentCpu());
  } else {
    node = rseq::CurrentNode();
  }
  return static_cast<unsigned>(node) < static_cast<unsigned>(NumNodes())
             ? node
             : 0;
}

// Test hook: pretend the machine has `num_nodes` nodes with cpu c on node
// nodes[c].  Must run before the first allocation, which in a C++ program
// happens before main (static constructors): call it from .preinit_array.
// Returns false if it is too late.  Memory binding to a node that does not
// exist fails and is skipped (and counted).
bool InjectTopology(int num_nodes, const uint16_t* nodes, uint32_t ncpus);

}  // namespace cidmalloc::os

#endif  // CIDMALLOC_ALLOCATOR_OS_TOPOLOGY_H_
