// tests/common/cpus.h: the cpus a test may use, and pinning to one of them.
#ifndef CIDMALLOC_TESTS_COMMON_CPUS_H_
#define CIDMALLOC_TESTS_COMMON_CPUS_H_

#include <sched.h>

#include <vector>

namespace cidmalloc_testing {

// The cpus in the calling thread's affinity mask, ascending (empty if the
// mask cannot be read).
inline std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Pins the calling thread to `cpu`.  When this returns true the thread runs
// on `cpu` (the kernel migrates a running task before returning).
inline bool PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace cidmalloc_testing

#endif  // CIDMALLOC_TESTS_COMMON_CPUS_H_
