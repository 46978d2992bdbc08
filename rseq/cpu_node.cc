// rseq/cpu_node.cc: the cpu -> NUMA node table used where the kernel does
// not fill node_id (before Linux 6.3).
//
// Built lazily from /sys/devices/system/node/node*/cpulist with raw reads
// (no allocation), or injected by the topology layer or a test.
#include "rseq/cpu_node.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "rseq/raw_io.h"

namespace cidmalloc::rseq {

namespace {

// g_node[cpu] is the node of `cpu`.  Written only while g_table_state is 1
// (by the one thread that moved it 0 -> 1); published by the release store
// of 2, which pairs with the acquire load in NodeOfCpu().
constinit uint16_t g_node[kMaxCpusInNodeTable];
constinit std::atomic<int> g_table_state{0};

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
  // table (Claim) runs this, and a thread's stack may be small.
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

// Acquire pairs with nothing: 0 is only the initial value, and the claim
// only needs the CAS to make this thread the one writer of g_node.
bool Claim() {
  int expected = 0;
  return g_table_state.compare_exchange_strong(expected, 1,
                                               std::memory_order_acquire);
}

// Release: the table is complete before the state says so; pairs with the
// acquire loads in NodeOfCpu.
void Publish() { g_table_state.store(2, std::memory_order_release); }

}  // namespace

int NodeOfCpu(int cpu) {
  // Acquire (both loads): pairs with Publish()'s release store.
  if (g_table_state.load(std::memory_order_acquire) != 2) {
    if (Claim()) {
      BuildFromSysfs();
      Publish();
    } else {
      while (g_table_state.load(std::memory_order_acquire) != 2) {
        syscall(SYS_sched_yield);
      }
    }
  }
  if (cpu < 0 || cpu >= static_cast<int>(kMaxCpusInNodeTable)) return 0;
  return g_node[cpu];
}

bool SetCpuNodeTable(const uint16_t* nodes, uint32_t count) {
  // Only before the table is built: readers never see it change.
  if (!Claim()) return false;
  for (uint32_t c = 0; c < count && c < kMaxCpusInNodeTable; ++c) {
    g_node[c] = nodes[c];
  }
  Publish();
  return true;
}

}  // namespace cidmalloc::rseq
