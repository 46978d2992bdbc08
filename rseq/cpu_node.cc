// rseq/cpu_node.cc: the cpu -> NUMA node table used where the kernel does
// not fill node_id (before Linux 6.3).
//
// Built lazily from /sys/devices/system/node/node*/cpulist with raw reads
// (no allocation), or injected by the topology layer or a test.
#include "rseq/cpu_node.h"

#include "rseq/once.h"
#include "rseq/raw_io.h"

namespace cidmalloc::rseq {

namespace {

// g_node[cpu] is the node of `cpu`.  Written only by the one thread that
// claimed g_table (NodeOfCpu's build, or SetCpuNodeTable), before it
// publishes it; read only once g_table is done (rseq/once.h).
constinit uint16_t g_node[kMaxCpusInNodeTable];
constinit OnceGate g_table;

void SetNode(int cpu, void* arg) {
  if (cpu >= 0 && cpu < static_cast<int>(kMaxCpusInNodeTable)) {
    g_node[cpu] = static_cast<uint16_t>(reinterpret_cast<uintptr_t>(arg));
  }
}

void MarkNode(int node, void* arg) {
  char path[64];
  RawBuffer b;
  b.Str("/sys/devices/system/node/node").Dec(node).Str("/cpulist");
  size_t n = b.size() < sizeof path - 1 ? b.size() : sizeof path - 1;
  for (size_t i = 0; i < n; ++i) path[i] = b.data()[i];
  path[n] = '\0';
  // Room for the longest list of cpus below kMaxCpusInNodeTable, every
  // other one ("0,2,4,...": 1024 bytes held only the first 250 or so, and
  // the rest stayed on node 0).  Static: only the thread that claimed the
  // table (g_table) runs this, and a thread's stack may be small.
  static char list[kMaxCpusInNodeTable / 2 * 5 + 64];
  if (ReadSmallFile(path, list, sizeof list) > 0) {
    ForEachInCpuList(list, SetNode,
                     reinterpret_cast<void*>(static_cast<uintptr_t>(node)));
  }
  (void)arg;
}

void BuildFromSysfs() {
  char nodes[256];
  // Absent on kernels without NUMA: every cpu stays on node 0.
  if (ReadSmallFile("/sys/devices/system/node/possible", nodes,
                    sizeof nodes) > 0) {
    ForEachInCpuList(nodes, MarkNode, nullptr);
  }
}

}  // namespace

int NodeOfCpu(int cpu) {
  g_table.Run(BuildFromSysfs);
  if (cpu < 0 || cpu >= static_cast<int>(kMaxCpusInNodeTable)) return 0;
  return g_node[cpu];
}

bool SetCpuNodeTable(const uint16_t* nodes, uint32_t count) {
  // Only before the table is built: readers never see it change.
  if (!g_table.TryClaim()) return false;
  for (uint32_t c = 0; c < count && c < kMaxCpusInNodeTable; ++c) {
    g_node[c] = nodes[c];
  }
  g_table.Publish();
  return true;
}

}  // namespace cidmalloc::rseq
