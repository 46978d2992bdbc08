# Scenario arm64_numa2: AArch64 (qemu's virt machine, -cpu max) with two
# NUMA nodes of 2 vCPUs each on Linux 6.12 (node_id and mm_cid in rseq):
# the AArch64 critical sections (rseq/cs_aarch64_asm.h) under preemption,
# migration and signals.  The descriptors are checked as linked; the rseq
# stress runs the sections with their delay loops and compare-twice check
# (the rseq_testing library) in cid mode and with node-qualified IDs; the
# allocator's per-ID stress and API tests run on them; cidmalloc must find
# both nodes and stay node-local.  Debian's own arm64 sort, perl and
# python3 (tests/preload's checks, smaller) run with cidmalloc preloaded.
# vm-kernel: 6.12
# vm-cpus: 4
# vm-nodes: 2
# vm-mem-per-node: 768
# vm-timeout: 600
# vm-order: 10

check locality.cidmalloc_static 240 \
  locality_cidmalloc --threads-per-node 2 --rounds 20 --expect-nodes 2 \
  --expect-mode cid --min-local 99
check slabs.qualified 120 \
  slabs --threads 4 --seconds 3 --max-slabs 8 --expect-mode cid

gtest rseq/detection_qualified_test 240
gtest rseq_cs/section_qualified_test 120
# The rseq stress binaries take 2-2.5 minutes each here; all their cases
# passed in this VM (docs/testing.md).  The suite runs the stress in cid
# mode without its six longest cases (about 100 s), and the cases that
# combine delays, signals, drains and capacity changes with node-qualified
# IDs.
gtest rseq/stress_glibc_test 300 \
  '*-*yield_pinned:*yield_inject1:*plain_pinned:*plain_unpinned:*Conserved/signals:*adjust_signals_drain'
gtest rseq/stress_qualified_test 300 \
  'StressSetup.*:*inject_all:*signals_inject_pinned:*drain_signals_yield:*adjust_signals_drain'
gtest allocator_stress/per_id_stress_cid_test 300 \
  'PerIdStress.ModeIsWhatTheTargetAskedFor:PerIdStress.PinnedRoundRobin'
gtest allocator/api_conformance_cid_test 240
# The AArch64 vfork (allocator/api/vfork.cc): children that allocate.
gtest allocator_stress/vfork_cid_test 180

# Real programs (preload_check: the same output as on glibc's malloc, and
# cidmalloc's summary in cid mode), smaller than on the host for CI's
# time: sort of 200,000 lines (6 MB), perl's hash of 30,000 strings,
# python3's four threads (3,000 entries each) with every object from malloc.
awk -v lines=200000 -f /vmtest/programs/sort_input.awk >/tmp/sort.in
preload_check preload.sort 120 cid env LC_ALL=C /usr/bin/sort /tmp/sort.in
preload_check preload.perl 120 cid \
  /usr/bin/perl -e "$(cat /vmtest/programs/big_hash.pl)" 30000
preload_check preload.python3 240 cid env PYTHONMALLOC=malloc \
  /usr/bin/python3.11 /vmtest/programs/alloc_threads.py 3000
