# Scenario arm64_old_kernel: AArch64 on Linux 6.1, whose rseq has neither
# node_id nor mm_cid (no AT_RSEQ_FEATURE_SIZE): cidmalloc must fall back to
# cpu mode and run the AArch64 sections on cpu_id.  The descriptors as
# linked, part of the rseq stress (delays at every point, signals, drains,
# capacity changes; the _glibc target asks for the best mode, which is cpu
# here) and the thread lifecycle tests: fork while four
# threads allocate (a grandchild; threads in the child), first operations
# on new threads, thread-exit destructors.  The fork test's watchdogs are
# scaled for TCG: the whole test took 153 s here (its six forks 88 s on
# arm64_numa2's machine), where the x86-64 budget is 25 s; 20x leaves room
# for a host three times as busy (docs/testing.md).  Two of the six forks
# (CIDMALLOC_TEST_FORKS=2: a child with a grandchild, and one without):
# all six took 395 s of a CI run whose AArch64 suite took 705, with both
# VMs sharing the host's two cores.  The API tests run in
# cpu mode in the x86-64 old_kernel scenario and on AArch64 in arm64_numa2
# (cid mode); here they took 62 s of a CI run whose AArch64 suite took 713.
# vm-kernel: 6.1
# vm-cpus: 2
# vm-nodes: 1
# vm-mem-per-node: 1024
# vm-timeout: 1200
# vm-order: 20
# vm-append: CIDMALLOC_TEST_TIMEOUT_SCALE=20 CIDMALLOC_TEST_FORKS=2

check slabs.cpu 120 \
  slabs --threads 4 --seconds 3 --max-slabs 2 --expect-mode cpu

gtest rseq_cs/section_test 120
gtest rseq/stress_glibc_test 300 \
  'StressSetup.*:*inject_all:*signals_inject_pinned:*drain_signals_yield:*adjust_signals_drain'
gtest allocator_stress/lifecycle_cid_test 600
