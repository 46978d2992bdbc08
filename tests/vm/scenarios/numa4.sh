# Scenario numa4: four NUMA nodes of 4 vCPUs each on Linux 6.12.  The
# allocator's multi-threaded stress tests and its API conformance test pass
# on a real multi-node machine, and the locality check holds on every node.
# vm-kernel: 6.12
# vm-cpus: 16
# vm-nodes: 4
# vm-mem-per-node: 512
# vm-timeout: 600
# vm-order: 10

# Known bug (reported): in cid mode a cid is not tied to a node.  When the
# kernel hands a thread a cid that last ran on another node, the fast paths
# pop that node's objects cached in the cid's slab, and push local objects
# into a slab labelled with the other node; only AllocSlow
# (allocator/front_end/front_end.cc) compares the slab's node with the
# current one and flushes.  Threads that block and wake often (like these)
# change cids often: about 0.1% remote objects on 2 nodes, 1-1.5% on 4.
# Within [95%, 99%) this is KNOWN-BUG; below 95% it fails.
known_bug locality.cidmalloc_static KNOWN_BUG_CID_NODE_MIX "cid slabs carry objects across nodes"
known_bug locality.cidmalloc_preload KNOWN_BUG_CID_NODE_MIX "cid slabs carry objects across nodes"

info info
expect_key info.numa_nodes /tmp/info.log numa_nodes 4
expect_key info.mode /tmp/info.log mode cid

check locality.cidmalloc_static 180 \
  locality_cidmalloc --threads-per-node 2 --rounds 30 --expect-nodes 4 \
  --expect-mode cid --min-local 99 \
  --known-bug-floor 95
check locality.cidmalloc_preload 180 \
  env LD_PRELOAD=$VMTEST_CIDMALLOC_SO \
  locality --threads-per-node 2 --rounds 30 --min-local 99 \
  --known-bug-floor 95
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
