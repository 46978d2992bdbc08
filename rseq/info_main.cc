// `cidmalloc info`: what this machine offers, one `key: value` per line.
//
// A diagnostic in the spirit of `numactl --hardware`, for rseq.  It is a
// tool, not part of the allocator, so it may use stdio and hwloc freely.
#include <hwloc.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>

#include "rseq/rseq.h"

extern "C" {
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

namespace {

using cidmalloc::rseq::CurrentCid;
using cidmalloc::rseq::CurrentId;
using cidmalloc::rseq::GetCpu;
using cidmalloc::rseq::ModeName;
using cidmalloc::rseq::Process;
using cidmalloc::rseq::ProcessState;
using cidmalloc::rseq::RegistrationName;

void PrintTopology() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    printf("numa_nodes: unknown\ncpus: unknown\n");
    return;
  }
  printf("numa_nodes: %d\n",
         hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  printf("cpus: %d\n", hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
  hwloc_topology_destroy(topo);
}

}  // namespace

int main() {
  struct utsname u;
  uname(&u);
  const ProcessState& p = Process();
  unsigned cpu = 0, node = 0;
  GetCpu(&cpu, &node);
  printf("kernel: %s\n", u.release);
  printf("rseq_registration: %s\n", RegistrationName(p.registration));
  printf("rseq_feature_size: %u\n", p.feature_size);
  printf("rseq_align: %u\n", p.rseq_align);
  if (&__rseq_size != nullptr) {
    printf("glibc_rseq_size: %u\n", __rseq_size);
    printf("glibc_rseq_offset: %td\n", __rseq_offset);
  }
  if (p.registration_errno != 0) {
    printf("own_registration_error: %s\n", strerror(p.registration_errno));
  }
  printf("mode: %s\n", ModeName(p.mode));
  printf("best_mode: %s\n", ModeName(p.best_mode));
  printf("id_kind: %s\n", p.id_kind == cidmalloc::rseq::IdKind::kNodeQualified ? "node-qualified"
                          : p.id_kind == cidmalloc::rseq::IdKind::kRaw        ? "raw"
                                                             : "none");
  if (p.id_kind == cidmalloc::rseq::IdKind::kNodeQualified) {
    printf("id_nodes: %u\ncid_stride: %u\n", p.num_nodes, p.cid_stride);
  }
  printf("node_source: %s\n", p.has_node_id ? "node_id" : "topology");
  printf("fence: %s\n", p.fence_available ? "membarrier-rseq" : "none");
  printf("cpu: %u\n", cpu);
  printf("node: %u\n", node);
  printf("cid: %d\n", CurrentCid());
  printf("id: %u\n", CurrentId());
  printf("possible_cpus: %u\n", p.possible_cpus);
  printf("rseq_ids: %u\n", p.num_rseq_ids);
  printf("id_table_entries: %u\n", p.num_ids);
  PrintTopology();
  return 0;
}
