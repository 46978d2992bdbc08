# Scenario glibc_rseq_off: glibc's rseq registration turned off on the
# kernel command line (GLIBC_TUNABLES reaches /init's environment and every
# program below it).  cidmalloc must register its own rseq area and still
# run in cid mode; the stress tests pass.
# vm-kernel: 6.12
# vm-cpus: 4
# vm-nodes: 2
# vm-mem-per-node: 768
# vm-timeout: 360
# vm-append: GLIBC_TUNABLES=glibc.pthread.rseq=0
# vm-order: 40

info info
expect_key info.registration /tmp/info.log rseq_registration own
expect_key info.glibc_rseq_size /tmp/info.log glibc_rseq_size 0
expect_key info.mode /tmp/info.log mode cid
# Slabs per (node, cid): each slab holds objects of one node only.
expect_key info.id_kind /tmp/info.log id_kind node-qualified

# The allocator's own view (static binary): own registration, cid mode.
check slabs.own 60 \
  slabs --threads 4 --seconds 3 --expect-mode cid --expect-registration own
check locality.cidmalloc_static 180 \
  locality_cidmalloc --threads-per-node 2 --rounds 30 --expect-nodes 2 \
  --expect-mode cid --min-local 99
# libcidmalloc.so preloaded registers its own area too.
check locality.cidmalloc_preload 180 \
  env LD_PRELOAD=$VMTEST_CIDMALLOC_SO \
  locality --threads-per-node 2 --rounds 30 --min-local 99

# The _own targets set GLIBC_TUNABLES=glibc.pthread.rseq=0 themselves too.
gtest allocator_stress/per_id_stress_own_test 300 \
  'PerIdStress.ModeIsWhatTheTargetAskedFor:PerIdStress.PinnedRoundRobin'
