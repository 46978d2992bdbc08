// rseq/cpu_node.h: the cpu -> NUMA node table (see cpu_node.cc).
#ifndef CIDMALLOC_RSEQ_CPU_NODE_H_
#define CIDMALLOC_RSEQ_CPU_NODE_H_

#include <stdint.h>

namespace cidmalloc::rseq {

inline constexpr uint32_t kMaxCpusInNodeTable = 8192;

// The node of `cpu` (0 for an unknown cpu).  Builds the table from sysfs on
// first use unless one was injected.
int NodeOfCpu(int cpu);

// Injects the table (nodes[cpu] for cpu < count; the others get node 0).
// Only possible before the table was first used; returns false afterwards.
// For the topology layer (hwloc) and for tests of NUMA logic.
bool SetCpuNodeTable(const uint16_t* nodes, uint32_t count);

}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_CPU_NODE_H_
