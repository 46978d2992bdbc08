// tests/vm/numa_util.h: the NUMA topology as sysfs shows it, cpu pinning and
// the node a page lives on, for the programs that run inside the test VMs
// (docs/testing.md).
//
// No libnuma: the VM's initramfs carries only what the programs link, so
// the two system calls needed (move_pages, sched_setaffinity) are made
// directly.
#ifndef CIDMALLOC_TESTS_VM_NUMA_UTIL_H_
#define CIDMALLOC_TESTS_VM_NUMA_UTIL_H_

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/common/cpus.h"

namespace cidmalloc_vm {

// Reads a whole small sysfs file; "" if it cannot be read.
inline std::string ReadFile(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == nullptr) return "";
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  fclose(f);
  return s;
}

// Parses a kernel cpu/node list ("0-3,8,10-11").
inline std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  const char* p = s.c_str();
  while (*p != '\0') {
    while (*p == ',' || *p == ' ' || *p == '\n') ++p;
    if (*p < '0' || *p > '9') break;
    char* end;
    const long lo = strtol(p, &end, 10);
    long hi = lo;
    p = end;
    if (*p == '-') {
      hi = strtol(p + 1, &end, 10);
      p = end;
    }
    for (long i = lo; i <= hi; ++i) out.push_back(static_cast<int>(i));
  }
  return out;
}

struct Node {
  int id;
  std::vector<int> cpus;
};

// The online nodes that have cpus, in id order.
inline std::vector<Node> NodesWithCpus() {
  std::vector<Node> nodes;
  const std::string online = ReadFile("/sys/devices/system/node/online");
  const bool no_numa = online.empty();
  const std::vector<int> ids = no_numa ? std::vector<int>{0} : ParseList(online);
  for (int id : ids) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", id);
    Node n{id, ParseList(ReadFile(path))};
    if (no_numa) {
      // No NUMA in sysfs at all: every cpu is on node 0.
      n.cpus.clear();
      const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
      for (long c = 0; c < ncpu; ++c) n.cpus.push_back(static_cast<int>(c));
    }
    if (!n.cpus.empty()) nodes.push_back(n);
  }
  return nodes;
}

using cidmalloc_testing::PinToCpu;

// The current cpu and node, from getcpu(2) (the kernel's own view, not the
// allocator's).
inline void GetCpuNode(unsigned* cpu, unsigned* node) {
  *cpu = 0;
  *node = 0;
  syscall(SYS_getcpu, cpu, node, nullptr);
}

// status[i] = node of the page holding pages[i], or a negative errno
// (-ENOENT: not present, -EFAULT: not mapped).  Returns false if the call
// itself failed.  move_pages(2) with nodes == NULL moves nothing.
inline bool PageNodes(unsigned long count, void** pages, int* status) {
  return syscall(SYS_move_pages, 0, count, pages, nullptr, status, 0) == 0;
}

}  // namespace cidmalloc_vm

#endif  // CIDMALLOC_TESTS_VM_NUMA_UTIL_H_
