#!/usr/bin/env bash
# tests/vm/vm.sh: boots cidmalloc's test programs in qemu VMs with NUMA
# topologies, old kernels and many cpus that the host does not have.
# docs/testing.md describes it; tests/vm_test.sh runs the whole suite.
#
#   vm.sh prepare                install qemu and busybox, download the two
#                                kernels, build the programs, pack the
#                                initramfs (exit 77: qemu cannot run here)
#   vm.sh run SCENARIO [OPTS]    boot the topology of tests/vm/scenarios/
#                                SCENARIO.sh and run it there
#   vm.sh boot [OPTS] [-- CMD]   boot a topology given on the command line
#                                and run the shell command CMD (busybox sh,
#                                with /vmtest/lib.sh's helpers) in the VM
#   vm.sh suite [-j N] [SCENARIO...]
#                                prepare, then run the scenarios (all by
#                                default), N at a time (default 2), and print
#                                a summary; exit 77 if qemu cannot run
#   vm.sh list                   the scenarios and their topologies
#
# OPTS (override the scenario's "# vm-..." header lines):
#   --kernel 6.1|6.12   --cpus N   --nodes N   --mem-per-node MIB
#   --memoryless-nodes K the last K nodes have cpus and no memory
#   --append "WORDS"    extra kernel command-line words; KEY=VALUE words
#                       become environment variables of /init and of every
#                       program in the VM (e.g. GLIBC_TUNABLES=...)
#   --timeout SECONDS   whole VM, boot included
#   --log FILE          where the serial console goes (default: a file
#                       under the cache; printed)
#   --no-prepare        do not rebuild the initramfs first (run, boot)
#
# A scenario whose kernel never reached /init, or oopsed on an int3 (a TCG
# flake), boots again (CIDMALLOC_VM_BOOT_RETRIES, default 2; see
# emulator_failure).
#
# CIDMALLOC_VM_ARCH=aarch64: the same commands for the AArch64 VMs
# (qemu-system-aarch64, Debian's arm64 kernels, the scenarios of
# tests/vm/scenarios_aarch64/, programs cross-built by prepare_aarch64.sh);
# default x86_64.
#
# Cache: ${CIDMALLOC_VM_CACHE:-~/.cache/cidmalloc-vm} (kernels, initramfs,
# logs).  BAZEL overrides the bazel command (words split on spaces, e.g.
# BAZEL="bazel --output_base=/tmp/ob").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${CIDMALLOC_VM_CACHE:-$HOME/.cache/cidmalloc-vm}"
read -r -a BAZEL_CMD <<<"${BAZEL:-bazel}"
# Per checkout: two checkouts may share the kernel cache, not the payload.
WORK="$CACHE/work/$(printf '%s' "$ROOT" | md5sum | cut -c1-12)"
SCENARIOS="$HERE/scenarios"
VM_ARCH="${CIDMALLOC_VM_ARCH:-x86_64}"
case "$VM_ARCH" in
  x86_64) ;;
  aarch64)
    SCENARIOS="$HERE/scenarios_aarch64"
    WORK="$WORK-aarch64"
    ;;
  *) echo "vm.sh: CIDMALLOC_VM_ARCH=$VM_ARCH: x86_64 or aarch64" >&2; exit 2 ;;
esac
MULTIARCH=x86_64-linux-gnu
JEMALLOC_SO=/usr/lib/$MULTIARCH/libjemalloc.so.2

# Exit status for "qemu cannot run here at all" (the test hook's skip).
EXIT_SKIP=77

die() {
  echo "vm.sh: $*" >&2
  exit 1
}
skip() {
  echo "vm.sh: SKIP: $*" >&2
  exit "$EXIT_SKIP"
}
note() { echo "vm.sh: $*" >&2; }

# ---- preparing and booting -------------------------------------------------------

# Sourced from this script's directory (HERE): `vm.sh prepare` (packages,
# kernels, building and packing the initramfs: prepare.sh) and one VM's boot
# and verdict (qemu.sh).
# shellcheck source=tests/vm/prepare.sh
source "$HERE/prepare.sh"
# shellcheck source=tests/vm/qemu.sh
source "$HERE/qemu.sh"
if [[ "$VM_ARCH" == aarch64 ]]; then
  # shellcheck source=tests/vm/prepare_aarch64.sh
  source "$HERE/prepare_aarch64.sh"
fi

# ---- scenarios and subcommands ---------------------------------------------------

# header SCENARIO KEY: the value of a "# vm-KEY: value" line.
header() {
  sed -nE "s/^# vm-$2:[[:space:]]*//p" "$SCENARIOS/$1.sh" | head -n 1
}

parse_opts() {
  NO_PREPARE=0
  while (($# > 0)); do
    case "$1" in
      --kernel) KERNEL="$2"; shift ;;
      --cpus) CPUS="$2"; shift ;;
      --nodes) NODES="$2"; shift ;;
      --mem-per-node) MEM_PER_NODE="$2"; shift ;;
      --memoryless-nodes) MEMORYLESS="$2"; shift ;;
      --append) APPEND="$2"; shift ;;
      --timeout) TIMEOUT="$2"; shift ;;
      --log) LOG="$2"; shift ;;
      --no-prepare) NO_PREPARE=1 ;;
      --) shift; REST=("$@"); return 0 ;;
      *) die "unknown option '$1' (see the header of $0)" ;;
    esac
    shift
  done
  REST=()
}

default_log() {
  mkdir -p "$CACHE/logs"
  echo "$CACHE/logs/$1-$(date +%Y%m%d-%H%M%S)-$$.log"
}

run_scenario() {
  local name="$1"
  shift
  [[ -f "$SCENARIOS/$name.sh" ]] || die "no scenario $name (vm.sh list)"
  SCENARIO="$name"
  KERNEL="$(header "$name" kernel)"
  CPUS="$(header "$name" cpus)"
  NODES="$(header "$name" nodes)"
  MEM_PER_NODE="$(header "$name" mem-per-node)"
  MEMORYLESS="$(header "$name" memoryless-nodes)"
  APPEND="$(header "$name" append)"
  TIMEOUT="$(header "$name" timeout)"
  KERNEL="${KERNEL:-6.12}" CPUS="${CPUS:-4}" NODES="${NODES:-1}"
  MEM_PER_NODE="${MEM_PER_NODE:-768}" TIMEOUT="${TIMEOUT:-300}"
  MEMORYLESS="${MEMORYLESS:-0}"
  parse_opts "$@"
  ((${#REST[@]} == 0)) || die "run takes no command"
  RUN_SH="$SCENARIOS/$name.sh"
  LOG="${LOG:-$(default_log "$name")}"
  local t0=$SECONDS rc=0 attempt=1 why
  boot_vm || rc=$?
  while why="$(emulator_failure)" && ((attempt <= BOOT_RETRIES)); do
    # The failed console log is kept next to the new one.
    mv "$LOG" "${LOG%.log}.attempt$attempt.log"
    echo "VMTEST-RETRY $name attempt $attempt: $why (console: ${LOG%.log}.attempt$attempt.log)"
    attempt=$((attempt + 1))
    rc=0
    boot_vm || rc=$?
  done
  verdict "$rc" "$((SECONDS - t0))"
}

cmd_run() {
  (($# > 0)) || die "usage: vm.sh run SCENARIO [OPTS]"
  local name="$1"
  shift
  if [[ " $* " != *" --no-prepare "* ]]; then cmd_prepare; fi
  run_scenario "$name" "$@"
}

cmd_boot() {
  parse_opts "$@"
  ((NO_PREPARE)) || cmd_prepare
  local tmp
  tmp="$(mktemp "${TMPDIR:-/tmp}/cidmalloc-vm-cmd.XXXXXX")"
  if ((${#REST[@]} > 0)); then
    printf '%s\n' "${REST[*]}" >"$tmp"
  else
    # shellcheck disable=SC2016,SC2028 # runs in the VM
    echo 'info boot; result boot PASS "$(grep -E "^(mode|numa_nodes|node_source):" /tmp/boot.log | tr "\n" " ")"' >"$tmp"
  fi
  RUN_SH="$tmp"
  SCENARIO=boot
  LOG="${LOG:-$(default_log boot)}"
  local t0=$SECONDS rc=0
  boot_vm || rc=$?
  rm -f "$tmp"
  grep -vE '^VMTEST-' "$LOG" | grep -E '^[a-z_.]+\| ' || true
  verdict "$rc" "$((SECONDS - t0))"
}

cmd_list() {
  local f name
  for f in "$SCENARIOS"/*.sh; do
    name="$(basename "$f" .sh)"
    printf '%-16s kernel %-5s %3s vCPUs %s nodes x %s MiB  timeout %ss %s\n' \
      "$name" "$(header "$name" kernel)" "$(header "$name" cpus)" \
      "$(header "$name" nodes)" "$(header "$name" mem-per-node)" \
      "$(header "$name" timeout)" "$(header "$name" append)"
  done
}

# ---- the suite ----------------------------------------------------------------------

cmd_suite() {
  local jobs=2
  local -a names=()
  while (($# > 0)); do
    case "$1" in
      -j) jobs="$2"; shift ;;
      -j*) jobs="${1#-j}" ;;
      *) names+=("$1") ;;
    esac
    shift
  done
  local t_start=$SECONDS
  cmd_prepare
  local t_prepared=$SECONDS
  if ((${#names[@]} == 0)); then
    # Longest first (the "# vm-order:" header), so the parallel slots end
    # together.
    mapfile -t names < <(for f in "$SCENARIOS"/*.sh; do
      n="$(basename "$f" .sh)"
      echo "$(header "$n" order | sed 's/^$/50/') $n"
    done | sort -n | awk '{ print $2 }')
  fi
  local logdir
  logdir="$CACHE/logs/suite-$(date +%Y%m%d-%H%M%S)-$$"
  mkdir -p "$logdir"
  local -A pids=()
  local name running=0
  for name in "${names[@]}"; do
    while ((running >= jobs)); do
      wait -n || true
      running=$((running - 1))
    done
    (
      LOG="$logdir/$name.log"
      run_scenario "$name" >"$logdir/$name.out" 2>&1
    ) &
    pids[$name]=$!
    running=$((running + 1))
    echo "vm.sh: started $name ($(header "$name" cpus) vCPUs, kernel $(header "$name" kernel)) at +$((SECONDS - t_prepared))s" >&2
  done
  local failed=0 passed=0
  for name in "${names[@]}"; do
    wait "${pids[$name]}" || true
  done
  echo "==== results (console logs in $logdir)"
  for name in "${names[@]}"; do
    echo "---- $name"
    cat "$logdir/$name.out"
    if tail -n 1 "$logdir/$name.out" | grep -q "^VMTEST $name PASS"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  done
  echo "==== summary"
  grep -h '^VMTEST ' "$logdir"/*.out || true
  if grep -q '^VMTEST-RETRY ' "$logdir"/*.out 2>/dev/null; then
    echo "---- booted again after a failure of the emulated machine (not of a test)"
    grep -h '^VMTEST-RETRY ' "$logdir"/*.out | cut -c1-300
  fi
  echo "---- locality (share of the objects malloc returned that are on the caller's node)"
  grep -HE '^VMTEST-(RESULT|INFO) [^ ]*locality' "$logdir"/*.out |
    sed -nE 's#^.*/([^/]+)\.out:VMTEST-[A-Z]+ ([^ ]+) ([A-Z-]+ )?.*LOCALITY allocator=([^ ]+) .*local_pct=([0-9.]+) min_node_pct=([0-9.]+).*#\1 \2: \4 \5% local (worst node \6%)#p' || true
  echo "---- slabs"
  grep -HE '^VMTEST-(RESULT|INFO) [^ ]*slabs' "$logdir"/*.out |
    sed -nE 's#^.*/([^/]+)\.out:VMTEST-[A-Z]+ ([^ ]+) .*SLABS mode=([^ ]+) .*threads=([0-9]+) migrate_every=([0-9]+) .*cpus_visited=([0-9]+) .*slabs=([0-9]+) .*slab_bytes=([0-9]+) cached_bytes=([0-9]+).*#\1 \2: mode \3, \4 threads (migrate_every \5) on \6 cpus: \7 slabs, slab_bytes \8, cached_bytes \9#p' || true
  if grep -q '^VMTEST-RESULT [^ ]* KNOWN-BUG' "$logdir"/*.out 2>/dev/null; then
    echo "---- known bugs (not counted as failures)"
    grep -h '^VMTEST-RESULT [^ ]* KNOWN-BUG' "$logdir"/*.out | cut -d' ' -f2- | cut -c1-300
  fi
  echo "prepare $((t_prepared - t_start))s, scenarios $((SECONDS - t_prepared))s, total $((SECONDS - t_start))s"
  echo "$passed passed, $failed failed"
  ((failed == 0))
}

case "${1:-}" in
  prepare) shift; cmd_prepare "$@" ;;
  run) shift; cmd_run "$@" ;;
  boot) shift; cmd_boot "$@" ;;
  suite) shift; cmd_suite "$@" ;;
  list) shift; cmd_list ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
