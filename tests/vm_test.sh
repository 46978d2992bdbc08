#!/usr/bin/env bash
# tests/vm_test.sh: the qemu VM tests as one test of `./cidmalloc test`
# (docs/testing.md).  Boots every scenario of tests/vm/scenarios/ (real
# multi-node NUMA, Linux 6.1 without node_id / mm_cid, 64 vCPUs, glibc's
# rseq turned off), two VMs at a time, and prints a summary with the
# locality and slab figures.
#
# Exit 0: every scenario passed; 77: skipped, because qemu cannot run here
# (qemu-system-x86 / busybox-static cannot be installed or the kernels
# cannot be downloaded), or CIDMALLOC_SKIP_VM=1; anything else: failed.
# Console logs: ~/.cache/cidmalloc-vm/logs/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

if [[ "${CIDMALLOC_SKIP_VM:-0}" == 1 ]]; then
  echo "SKIP: tests/vm_test.sh: CIDMALLOC_SKIP_VM=1"
  exit 77
fi

rc=0
tests/vm/vm.sh suite -j "${CIDMALLOC_VM_JOBS:-2}" "$@" || rc=$?
if ((rc == 77)); then
  echo "SKIP: tests/vm_test.sh: qemu cannot run on this machine (see the vm.sh: SKIP line above)"
fi
exit "$rc"
