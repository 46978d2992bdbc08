# Scenario numa_memoryless: three NUMA nodes of 2 vCPUs each on Linux
# 6.12, the third with cpus and no memory (as some servers' nodes are).
# The kernel refuses to bind memory to such a node; cidmalloc's heap for it
# binds nothing (its pages come from the nearest node with memory), so no
# mbind fails, the allocations of its threads succeed, and the summary
# says so.  Before, every chunk of that heap counted a refused mbind.
# vm-kernel: 6.12
# vm-cpus: 6
# vm-nodes: 3
# vm-memoryless-nodes: 1
# vm-mem-per-node: 512
# vm-timeout: 300
# vm-order: 40

info info
expect_key info.numa_nodes /tmp/info.log numa_nodes 3
expect_key info.mode /tmp/info.log mode cid

# Linked in: 3 nodes, cid mode, no failed mbind (locality reported only:
# node 2's pages are on another node by construction).
check locality.cidmalloc_static 120 \
  locality_cidmalloc --threads-per-node 2 --rounds 20 --expect-nodes 3 \
  --expect-mode cid
# The summary names the node that has no memory of its own.
# (lib.sh's variables are not exported: the outer shell expands it.)
check stats.memoryless_node 60 sh -c \
  "CIDMALLOC_STATS=1 LD_PRELOAD=$VMTEST_CIDMALLOC_SO locality \
     --threads-per-node 1 --rounds 5 2>&1 |
   grep 'node 2: .*no memory of its own'"
