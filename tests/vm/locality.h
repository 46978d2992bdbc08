// tests/vm/locality.h: the cross-node producer/consumer locality workload
// (docs/testing.md, scenarios numa2, numa4 and old_kernel).
//
// Threads are pinned on every node's cpus.  Each thread allocates a batch
// of objects of mixed sizes, touches them, asks the kernel on which node
// each object's page lives (move_pages), frees a quarter of them itself and
// hands the rest to its peer on the next node, which frees them there.  So
// every allocator in the test sees objects come back from another node, and
// a front-end cache that hands such objects out again to its own thread
// shows up as remote objects.
//
// The same code runs under any malloc: the plain binary (//tests/vm:locality)
// under glibc, LD_PRELOAD=libjemalloc.so.2 or LD_PRELOAD=libcidmalloc.so, and
// //tests/vm:locality_cidmalloc with cidmalloc linked in, which also checks
// cidmalloc_get_stats().
#ifndef CIDMALLOC_TESTS_VM_LOCALITY_H_
#define CIDMALLOC_TESTS_VM_LOCALITY_H_

namespace cidmalloc_vm {

struct LocalityOptions {
  int threads_per_node = 2;
  int rounds = 40;
  int batch = 256;
  double min_local_pct = -1;  // < 0: report only
  // A known bug may cost some locality: a worst node at or above this (but
  // below min_local_pct) exits 3 instead of 1.  < 0: no such band.
  double known_bug_floor_pct = -1;
  int expect_nodes = -1;      // < 0: not checked
  const char* expect_mode = nullptr;
  const char* label = nullptr;  // default: detected allocator
};

// Called after the workload (all threads joined) with the options; prints
// what it knows and returns false on a failed expectation.
using AfterHook = bool (*)(const LocalityOptions& options);

// Parses argv (see Usage in locality.cc), runs the workload, prints
// LOCALITY lines and returns the process exit status: 0, 1 (an expectation
// failed), 2 (usage) or 3 (only the locality check failed, and only down to
// --known-bug-floor).
int LocalityMain(int argc, char** argv, const char* default_label,
                 AfterHook after);

}  // namespace cidmalloc_vm

#endif  // CIDMALLOC_TESTS_VM_LOCALITY_H_
