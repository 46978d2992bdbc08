# Scenario old_kernel: Linux 6.1, which has rseq but neither node_id nor
# mm_cid (no AT_RSEQ_FEATURE_SIZE), on two NUMA nodes.  cidmalloc must fall
# back to cpu mode and take the node from its cpu->node table (sysfs); the
# stress and API tests pass and the locality check holds.
# vm-kernel: 6.1
# vm-cpus: 4
# vm-nodes: 2
# vm-mem-per-node: 768
# vm-timeout: 420
# vm-order: 30

info info
expect_key info.mode /tmp/info.log mode cpu
expect_key info.node_source /tmp/info.log node_source topology
expect_key info.feature_size /tmp/info.log rseq_feature_size 0
expect_key info.numa_nodes /tmp/info.log numa_nodes 2

check locality.cidmalloc_static 180 \
  locality_cidmalloc --threads-per-node 2 --rounds 30 --expect-nodes 2 \
  --expect-mode cpu --min-local 99
check locality.cidmalloc_preload 180 \
  env LD_PRELOAD=$VMTEST_CIDMALLOC_SO \
  locality --threads-per-node 2 --rounds 30 --min-local 99

# The _cid targets: they ask for the best mode, which is cpu here.
gtest allocator/api_conformance_cid_test 240
# vfork children that allocate: the child registers the area for itself on
# 6.1 too, and the parent again afterwards.
gtest allocator_stress/vfork_cid_test 120
gtest allocator_stress/per_id_stress_cid_test 300 \
  'PerIdStress.ModeIsWhatTheTargetAskedFor:PerIdStress.PinnedRoundRobin'
# Cross-node traffic with every object checked (tests/vm/numa_stress_main.cc)
# in cpu mode: nothing lost, duplicated or corrupted; a cpu's slab may hold
# a few objects of the node a migrating thread left (counted, not failed:
# docs/design.md, "A node-qualified ID's slab").
check numa_stress.cpu 180 \
  numa_stress --threads-per-node 2 --seconds 8 --large 3 \
  --migrate-every 300 --mover --far-objects count
