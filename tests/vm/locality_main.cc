// //tests/vm:locality: the locality workload (locality.h) under whatever
// malloc the process has: glibc's, or one given with LD_PRELOAD (cidmalloc,
// jemalloc).  The allocator's name is detected from its symbols.
#include "tests/vm/locality.h"

int main(int argc, char** argv) {
  return cidmalloc_vm::LocalityMain(argc, argv, nullptr, nullptr);
}
