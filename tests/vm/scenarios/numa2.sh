# Scenario numa2: two NUMA nodes of 4 vCPUs each on Linux 6.12 (node_id and
# mm_cid in rseq).  cidmalloc must see both nodes, run in cid mode, and hand
# each thread objects on its own node although a producer/consumer ring
# frees them on the other node.  glibc and jemalloc run the same workload
# for comparison (reported, not asserted).
# vm-kernel: 6.12
# vm-cpus: 8
# vm-nodes: 2
# vm-mem-per-node: 768
# vm-timeout: 300
# vm-order: 20

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
expect_key info.numa_nodes /tmp/info.log numa_nodes 2
expect_key info.mode /tmp/info.log mode cid
expect_key info.node_source /tmp/info.log node_source node_id

# cidmalloc linked in: checks cidmalloc_get_stats() (2 nodes, cid mode, no
# failed mbind) and >= 99% local objects on every node.
check locality.cidmalloc_static 120 \
  locality_cidmalloc --threads-per-node 2 --rounds 40 --expect-nodes 2 \
  --expect-mode cid --min-local 99 \
  --known-bug-floor 95
# The product as it is preloaded.
check locality.cidmalloc_preload 120 \
  env LD_PRELOAD=$VMTEST_CIDMALLOC_SO \
  locality --threads-per-node 2 --rounds 40 --min-local 99 \
  --known-bug-floor 95
# For comparison only.
report locality.glibc 120 locality --threads-per-node 2 --rounds 40
if [ -n "$VMTEST_JEMALLOC" ]; then
  report locality.jemalloc 120 \
    env LD_PRELOAD=$VMTEST_JEMALLOC locality --threads-per-node 2 --rounds 40
fi
