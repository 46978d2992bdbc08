#!/usr/bin/env bash
# tests/aarch64_vm_test.sh: the AArch64 critical sections (rseq/
# cs_aarch64_asm.h) tested where they run: qemu-system-aarch64 VMs booting
# Debian's arm64 kernels, one of `./cidmalloc test`'s tests
# (docs/testing.md).  Boots every scenario of tests/vm/scenarios_aarch64/
# (Linux 6.12 on two NUMA nodes in cid mode, Linux 6.1 in cpu mode) with
# the rseq stress, the allocator's per-ID stress and API tests and the
# locality and slab checks, cross-built by tests/vm/cross_build.py.
# (tests/aarch64_test.sh covers the portable path under qemu-user, which
# has no rseq.)
#
# Exit 0: every scenario passed; 77: skipped, because the VMs cannot run
# here (qemu-system-arm, the cross compiler or the arm64 packages cannot be
# installed or downloaded), or CIDMALLOC_SKIP_VM=1; anything else: failed.
# Console logs: ~/.cache/cidmalloc-vm/logs/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

if [[ "${CIDMALLOC_SKIP_VM:-0}" == 1 ]]; then
  echo "SKIP: tests/aarch64_vm_test.sh: CIDMALLOC_SKIP_VM=1"
  exit 77
fi

rc=0
CIDMALLOC_VM_ARCH=aarch64 tests/vm/vm.sh suite -j "${CIDMALLOC_VM_JOBS:-2}" \
  "$@" || rc=$?
if ((rc == 77)); then
  echo "SKIP: tests/aarch64_vm_test.sh: the AArch64 VMs cannot run on" \
    "this machine (see the vm.sh: SKIP line above)"
fi
exit "$rc"
