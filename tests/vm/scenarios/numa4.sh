# Scenario numa4: four NUMA nodes of 4 vCPUs each on Linux 6.12.  The
# allocator's multi-threaded stress tests and its API conformance test pass
# on a real multi-node machine, and the locality check holds on every node.
# vm-kernel: 6.12
# vm-cpus: 16
# vm-nodes: 4
# vm-mem-per-node: 512
# vm-timeout: 600
# vm-order: 10

info info
expect_key info.numa_nodes /tmp/info.log numa_nodes 4
expect_key info.mode /tmp/info.log mode cid
# Slabs per (node, cid): each slab holds objects of one node only.
expect_key info.id_kind /tmp/info.log id_kind node-qualified

check locality.cidmalloc_static 180 \
  locality_cidmalloc --threads-per-node 2 --rounds 30 --expect-nodes 4 \
  --expect-mode cid --min-local 99
check locality.cidmalloc_preload 180 \
  env LD_PRELOAD=$VMTEST_CIDMALLOC_SO \
  locality --threads-per-node 2 --rounds 30 --min-local 99
# For comparison only.
report locality.glibc 120 locality --threads-per-node 2 --rounds 30
if [ -n "$VMTEST_JEMALLOC" ]; then
  report locality.jemalloc 120 \
    env LD_PRELOAD=$VMTEST_JEMALLOC locality --threads-per-node 2 --rounds 30
fi

# Software emulation runs these 10-40 times slower than the host, so the
# VM runs the cases that depend on the topology (docs/testing.md, "Time"):
# threads pinned round-robin over all 16 cpus (so over the 4 nodes), thread
# birth and death (cpu mode on two nodes is in old_kernel).
# Lifecycle.ForkWhileOtherThreadsAllocate is left out: its 25 s watchdog
# fires under emulation without any deadlock.
gtest allocator/api_conformance_cid_test 240
gtest allocator_stress/per_id_stress_cid_test 300 \
  'PerIdStress.ModeIsWhatTheTargetAskedFor:PerIdStress.PinnedRoundRobin'
gtest allocator_stress/lifecycle_cid_test 300 \
  '-Lifecycle.ForkWhileOtherThreadsAllocate'
# Cross-node traffic with every object checked (tests/vm/numa_stress_main.cc):
# no object lost, duplicated or corrupted, each of its caller's node
# (node-qualified IDs promise it), the invariants at the end; with
# migrations and a thread that re-pins the others, then with fork children.
check numa_stress 240 \
  numa_stress --threads-per-node 2 --seconds 10 --large 3 --huge 2 \
  --migrate-every 300 --mover
check numa_stress.fork 120 \
  numa_stress --threads-per-node 1 --seconds 4 --large 3 --fork
