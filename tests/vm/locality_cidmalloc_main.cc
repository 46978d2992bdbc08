// //tests/vm:locality_cidmalloc: the locality workload (locality.h) with
// cidmalloc linked in (//:cidmalloc), followed by cidmalloc_get_stats():
// mode, registration, nodes, slabs, per-node memory, and the counters when
// CIDMALLOC_STATS=1.  --expect-nodes and --expect-mode are checked against
// the statistics.
#include <stdio.h>
#include <string.h>

#include "allocator/api/cidmalloc.h"
#include "tests/vm/locality.h"

namespace {

bool After(const cidmalloc_vm::LocalityOptions& o) {
  cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  printf("CIDMALLOC-STATS mode=%s registration=%s num_nodes=%u slabs=%u "
         "max_slab_id=%u slab_bytes=%llu",
         s.mode, s.registration, s.num_nodes, s.slabs, s.max_slab_id,
         s.slab_bytes);
  if (s.counting) {
    printf(" mallocs=%llu local_allocs=%llu frees=%llu remote_frees=%llu",
           s.mallocs, s.local_allocs, s.frees, s.remote_frees);
  }
  for (unsigned n = 0; n < s.num_nodes && n < CIDMALLOC_MAX_NODES; ++n) {
    printf(" node%u_mapped=%llu node%u_bind_failures=%llu", n,
           s.node_mapped[n], n, s.node_bind_failures[n]);
  }
  printf("\n");
  bool ok = true;
  if (o.expect_nodes > 0 && s.num_nodes != static_cast<unsigned>(o.expect_nodes)) {
    printf("CIDMALLOC-STATS error=num_nodes-%u-expected-%d\n", s.num_nodes,
           o.expect_nodes);
    ok = false;
  }
  if (o.expect_mode != nullptr && strcmp(s.mode, o.expect_mode) != 0) {
    printf("CIDMALLOC-STATS error=mode-%s-expected-%s\n", s.mode,
           o.expect_mode);
    ok = false;
  }
  for (unsigned n = 0; n < s.num_nodes && n < CIDMALLOC_MAX_NODES; ++n) {
    if (s.node_bind_failures[n] != 0) {
      printf("CIDMALLOC-STATS error=node%u-bind-failures-%llu\n", n,
             s.node_bind_failures[n]);
      ok = false;
    }
  }
  fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  return cidmalloc_vm::LocalityMain(argc, argv, "cidmalloc-static", After);
}
