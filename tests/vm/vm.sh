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

# ---- packages -----------------------------------------------------------------

as_root() {
  if ((EUID == 0)); then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo "$@"
  else
    return 1
  fi
}

pkg_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

apt_updated=0
apt_update_once() {
  ((apt_updated)) && return 0
  apt_updated=1
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >&2
}

# Installs qemu-system-x86 and busybox-static (needed: else skip) and
# libjemalloc2 (the locality comparison; optional).
ensure_packages() {
  local -a missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  pkg_installed busybox-static || missing+=(busybox-static)
  if ((${#missing[@]} > 0)); then
    note "installing ${missing[*]}"
    command -v apt-get >/dev/null || skip "no apt-get to install ${missing[*]}"
    apt_update_once || skip "apt-get update failed (not root and no sudo?)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends "${missing[@]}" </dev/null >&2 ||
      skip "cannot install ${missing[*]}"
  fi
  command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
  [[ -x /bin/busybox ]] || skip "no /bin/busybox"
  if [[ ! -e "$JEMALLOC_SO" ]] && ! pkg_installed libjemalloc2; then
    note "installing libjemalloc2 (for the comparison)"
    { apt_update_once &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends libjemalloc2 </dev/null >&2; } ||
      note "no libjemalloc2: the jemalloc figures are left out"
  fi
}

# ---- kernels --------------------------------------------------------------------

# The newest Debian package of a kernel series.
kernel_package() {
  local re
  case "$1" in
    6.1) re='^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
    6.12) re='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' ;;
    *) die "unknown kernel '$1' (6.1 or 6.12)" ;;
  esac
  apt-cache search --names-only "$re" 2>/dev/null | awk '{ print $1 }' |
    sort -V | tail -n 1
}

# Downloads and unpacks a kernel into $CACHE/kernels/SERIES/ (vmlinuz,
# config, package) unless it is there.  Only ./boot of the package is
# extracted: everything the VM needs is built in (checked below).
fetch_kernel() {
  local series="$1" dir="$CACHE/kernels/$1"
  [[ -s "$dir/vmlinuz" && -s "$dir/config" ]] && return 0
  local pkg
  pkg="$(kernel_package "$series")"
  if [[ -z "$pkg" ]]; then
    apt_update_once || true
    pkg="$(kernel_package "$series")"
  fi
  [[ -n "$pkg" ]] || skip "apt knows no linux-image-$series...-amd64-unsigned"
  note "downloading $pkg"
  local tmp
  tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
  # apt-get download as root warns that the _apt user cannot write here.
  if ! (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>"$tmp/err"); then
    cat "$tmp/err" >&2
    rm -rf "$tmp"
    skip "cannot download $pkg"
  fi
  mkdir -p "$tmp/x"
  dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp/x" ./boot ||
    die "cannot unpack $pkg"
  mkdir -p "$dir"
  cp "$tmp"/x/boot/vmlinuz-* "$dir/vmlinuz.new"
  cp "$tmp"/x/boot/config-* "$dir/config"
  echo "$pkg" >"$dir/package"
  mv "$dir/vmlinuz.new" "$dir/vmlinuz"
  rm -rf "$tmp"
}

check_kernel_config() {
  local cfg="$CACHE/kernels/$1/config" opt
  for opt in SERIAL_8250_CONSOLE BLK_DEV_INITRD RD_GZIP NUMA ACPI_NUMA RSEQ \
    MEMBARRIER DEVTMPFS TMPFS MIGRATION; do
    grep -q "^CONFIG_$opt=y" "$cfg" ||
      die "kernel $1 ($(cat "$CACHE/kernels/$1/package")) lacks built-in CONFIG_$opt"
  done
}

# ---- building and packing -------------------------------------------------------

# The test binaries the scenarios use ("gtest PKG/NAME ..." lines).
scenario_tests() {
  sed -nE 's/^[[:space:]]*gtest[[:space:]]+([A-Za-z0-9_]+\/[A-Za-z0-9_]+).*/\1/p' \
    "$SCENARIOS"/*.sh | sort -u
}

# Writes NAME.env (the `env` of each test target, as KEY='VALUE' lines) for
# the labels given, into DIR/PKG/.
write_test_envs() {
  local dir="$1"
  shift
  local query
  query="set($*)"
  "${BAZEL_CMD[@]}" query --output=build "$query" 2>/dev/null </dev/null |
    awk -v dir="$dir" '
      /^#/ { pkg = $0; sub(/.*\/tests\//, "", pkg); sub(/\/BUILD(\.bazel)?:.*/, "", pkg) }
      /^  name = "/ { name = $0; sub(/^  name = "/, "", name); sub(/".*/, "", name)
                      file = dir "/" pkg "/" name ".env"; printf "" > file }
      /^  env = \{/ {
        s = $0; sub(/^  env = \{/, "", s); sub(/\},?$/, "", s)
        n = split(s, kv, /", "/)
        for (i = 1; i <= n; i++) {
          pair = kv[i]; gsub(/^"|"$/, "", pair)
          k = pair; sub(/": ".*/, "", k)
          v = pair; sub(/^[^"]*": "/, "", v)
          printf "%s=\047%s\047\n", k, v >> file
        }
      }'
}

# Copies a binary or library into the staging root at the same path as on
# the host, without debug info, plus (for dynamic ones) every library ldd
# finds and the loader.
stage_file() {
  local src="$1" dst="$2"
  mkdir -p "$(dirname "$dst")"
  strip --strip-debug -o "$dst" "$src" 2>/dev/null || cp -L "$src" "$dst"
  chmod u+w "$dst"
}

stage_libs() {
  local stage="$1" bin="$2" lib
  # "libx.so => /path (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)".
  while read -r lib; do
    [[ -n "$lib" && -e "$lib" ]] || continue
    [[ -e "$stage$lib" ]] || stage_file "$lib" "$stage$lib"
  done < <(ldd "$bin" 2>/dev/null | sed -nE 's#.*=> (/[^ ]+) .*#\1#p; s#^[[:space:]]*(/[^ ]+) \(0x.*#\1#p')
}

cmd_prepare() {
  ensure_packages
  mkdir -p "$CACHE/kernels" "$WORK"
  fetch_kernel 6.1
  fetch_kernel 6.12
  check_kernel_config 6.1
  check_kernel_config 6.12

  local -a tests=() labels=()
  mapfile -t tests < <(scenario_tests)
  local t f
  for t in "${tests[@]}"; do labels+=("//tests/${t%/*}:${t##*/}"); done
  note "building with ${BAZEL_CMD[*]}"
  local log="$WORK/build.log" rc=0
  # --symlink_prefix=/: leave the checkout's bazel-* symlinks alone.
  "${BAZEL_CMD[@]}" build --keep_going --symlink_prefix=/ \
    //rseq:info //:libcidmalloc.so //tests/vm:all "${labels[@]}" \
    </dev/null >"$log" 2>&1 || rc=$?
  local bin
  bin="$("${BAZEL_CMD[@]}" info bazel-bin </dev/null 2>/dev/null)" ||
    die "bazel info bazel-bin failed"
  # Every cc_binary of //tests/vm goes to /vmtest/bin.
  local -a vm_bins=()
  mapfile -t vm_bins < <("${BAZEL_CMD[@]}" query 'kind(cc_binary, //tests/vm:all)' \
    2>/dev/null </dev/null | sed 's/.*://')
  ((${#vm_bins[@]} > 0)) || die "bazel query found no cc_binary in //tests/vm"
  local need
  for need in rseq/info libcidmalloc.so "${vm_bins[@]/#/tests/vm/}"; do
    if ((rc != 0)) && [[ ! -x "$bin/$need" ]]; then
      cat "$log" >&2
      die "bazel build failed for $need (log above)"
    fi
  done
  if ((rc != 0)); then
    note "bazel build --keep_going exit $rc; the scenarios use what was built:"
    grep -E '^ERROR' "$log" | head -n 20 >&2 || true
  fi

  # Staging root: busybox, /init, the helpers, scenarios, programs, libs.
  local stage="$WORK/stage"
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,dev,proc,sys,tmp,vmtest/bin,vmtest/lib,vmtest/tests,vmtest/scenarios}
  cp /bin/busybox "$stage/bin/busybox"
  cp "$HERE/guest/init" "$stage/init"
  cp "$HERE/guest/lib.sh" "$stage/vmtest/lib.sh"
  cp "$SCENARIOS"/*.sh "$stage/vmtest/scenarios/"
  chmod 755 "$stage/init"
  stage_file "$bin/rseq/info" "$stage/vmtest/bin/info"
  for f in "${vm_bins[@]}"; do
    stage_file "$bin/tests/vm/$f" "$stage/vmtest/bin/$f"
  done
  stage_file "$bin/libcidmalloc.so" "$stage/vmtest/lib/libcidmalloc.so"
  for f in "$stage"/vmtest/bin/* "$stage/vmtest/lib/libcidmalloc.so"; do
    stage_libs "$stage" "$f"
  done
  if [[ -e "$JEMALLOC_SO" ]]; then
    stage_file "$JEMALLOC_SO" "$stage$JEMALLOC_SO"
    stage_libs "$stage" "$JEMALLOC_SO"
    echo "$JEMALLOC_SO" >"$stage/vmtest/jemalloc-path"
  fi
  for t in "${tests[@]}"; do
    if [[ -x "$bin/tests/$t" ]]; then
      stage_file "$bin/tests/$t" "$stage/vmtest/tests/$t"
      stage_libs "$stage" "$bin/tests/$t"
    else
      note "not built: //tests/${t%/*}:${t##*/} (its scenarios will fail)"
    fi
  done
  ((${#labels[@]} == 0)) || write_test_envs "$stage/vmtest/tests" "${labels[@]}"

  # cpio newc, gzip.  The kernel unpacks its built-in initramfs (which has
  # /dev/console) first, then this one over it.
  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
    busybox cpio -o -H newc -R 0:0 2>/dev/null | gzip -1) >"$WORK/base.cpio.gz.new"
  mv "$WORK/base.cpio.gz.new" "$WORK/base.cpio.gz"
  note "initramfs $(du -h "$WORK/base.cpio.gz" | cut -f1) ($(du -sh "$stage" | cut -f1) unpacked): $WORK/base.cpio.gz"
}

# ---- booting ----------------------------------------------------------------------

# header SCENARIO KEY: the value of a "# vm-KEY: value" line.
header() {
  sed -nE "s/^# vm-$2:[[:space:]]*//p" "$SCENARIOS/$1.sh" | head -n 1
}

# boot_vm: boots with the settings in the globals below and writes the
# console to $LOG; the VM runs $RUN_SH (a file).  Prints nothing.  Returns
# qemu's status (124: timed out).
KERNEL=6.12 CPUS=4 NODES=1 MEM_PER_NODE=768 APPEND="" TIMEOUT=300 LOG=""
RUN_SH="" SCENARIO=""
boot_vm() {
  local vmlinuz="$CACHE/kernels/$KERNEL/vmlinuz"
  [[ -s "$vmlinuz" ]] || die "no kernel $KERNEL: run vm.sh prepare"
  [[ -s "$WORK/base.cpio.gz" ]] || die "no initramfs: run vm.sh prepare"
  ((CPUS >= NODES && CPUS % NODES == 0)) ||
    die "--cpus $CPUS must be a multiple of --nodes $NODES"

  # The scenario goes into a second cpio appended to the base one.
  local tmp
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/cidmalloc-vm.XXXXXX")"
  mkdir -p "$tmp/root/vmtest"
  cp "$RUN_SH" "$tmp/root/vmtest/run.sh"
  (cd "$tmp/root" && find . -mindepth 1 | busybox cpio -o -H newc -R 0:0 2>/dev/null |
    gzip -1) >"$tmp/overlay.cpio.gz"
  cat "$WORK/base.cpio.gz" "$tmp/overlay.cpio.gz" >"$tmp/initrd"

  local -a numa=()
  local n
  if ((NODES > 1)); then
    for ((n = 0; n < NODES; n++)); do
      numa+=(-object "memory-backend-ram,id=mem$n,size=${MEM_PER_NODE}M"
        -numa "node,nodeid=$n,memdev=mem$n"
        -numa "cpu,node-id=$n,socket-id=$n")
    done
  fi
  # tsc=unstable: TCG's TSC is not synchronised across vCPUs.  lpj=: skip
  # the per-cpu delay-loop calibration (minutes with 64 vCPUs).  panic=-1
  # and oops=panic: reboot at once, which -no-reboot turns into an exit.
  local cmdline="console=ttyS0 panic=-1 oops=panic tsc=unstable lpj=5000000 quiet"
  cmdline+=" rcupdate.rcu_cpu_stall_suppress=1 VMTEST_SCENARIO=${SCENARIO:-adhoc}"
  [[ -z "$APPEND" ]] || cmdline+=" $APPEND"

  # The host cpu time qemu used (user + system) goes to $QEMU_CPU: with
  # other load on the host it tells more than the wall time.
  local rc=0 TIMEFORMAT='%U %S'
  { time {
    timeout -k 10 "$TIMEOUT" qemu-system-x86_64 \
      -machine q35 -accel tcg -cpu qemu64 \
      -smp "$CPUS,sockets=$NODES,cores=$((CPUS / NODES)),threads=1" \
      -m "$((MEM_PER_NODE * NODES))M" "${numa[@]}" \
      -kernel "$vmlinuz" -initrd "$tmp/initrd" -append "$cmdline" \
      -nographic -no-reboot -net none \
      </dev/null >"$LOG" 2>&1 || rc=$?
  }; } 2>"$tmp/cpu"
  # Carriage returns and the firmware's terminal escapes out.
  sed -i 's/\r$//; s/\x1b\[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' "$LOG"
  QEMU_CPU="$(awk '{ printf "%.0f", $1 + $2 }' "$tmp/cpu" 2>/dev/null || echo '?')"
  rm -rf "$tmp"
  return "$rc"
}

# emulator_failure: succeeds, printing why, iff $LOG shows a failure of the
# emulated machine rather than of a test, which run_scenario boots again (at
# most CIDMALLOC_VM_BOOT_RETRIES times, default 2):
#  - the kernel never reached /init (no VMTEST-BOOTED line): a panic during
#    boot, or no console output at all;
#  - an "Oops: int3" in the kernel.  Under TCG with many vCPUs a vCPU now and
#    then executes the int3 that text_poke_bp() puts over an instruction while
#    a static key flips, after the patch is complete, and the kernel cannot
#    tell it from a stray breakpoint (cpus64 at ea0ebe4: in hrtimer code from
#    the idle task, 8 s into boot, before /init).  No user program can cause
#    one.
# Any other panic or oops after /init started is a failure, not retried.
BOOT_RETRIES="${CIDMALLOC_VM_BOOT_RETRIES:-2}"
# A kernel failure on the console (verdict fails a scenario on any of them).
KERNEL_FAILURE_RE='Kernel panic|BUG: |Oops: |general protection fault'
emulator_failure() {
  local oops
  oops="$(grep -m1 -E 'Oops: int3' "$LOG" || true)"
  if [[ -n "$oops" ]]; then
    echo "kernel oops under emulation: $oops"
  elif ! grep -q '^VMTEST-BOOTED' "$LOG"; then
    echo "the kernel did not reach /init: $(grep -m1 -E "$KERNEL_FAILURE_RE" "$LOG" || tail -n 1 "$LOG")"
  else
    return 1
  fi
}

# verdict: reads $LOG after boot_vm returned $1; prints the results and one
# last line "VMTEST <scenario> PASS|FAIL <seconds>s ... <why>"; returns 0
# iff the scenario passed.
verdict() {
  local qrc="$1" secs="$2" name="${SCENARIO:-adhoc}" why="" ok=1
  grep -E '^VMTEST-(RESULT|INFO|TIME|BOOTED|ENV)' "$LOG" || true
  local done_line pass fail known panic
  done_line="$(grep -E '^VMTEST-DONE ' "$LOG" | tail -n 1 || true)"
  panic="$(grep -m1 -E "$KERNEL_FAILURE_RE" "$LOG" || true)"
  if [[ -n "$panic" ]]; then
    ok=0
    why="kernel panic or oops: $panic"
  elif ((qrc == 124 || qrc == 137)); then
    ok=0
    why="timed out after ${TIMEOUT}s ($(grep -c '^VMTEST-BOOTED' "$LOG" || true) boot, results so far above)"
  elif [[ -z "$done_line" ]]; then
    ok=0
    why="no VMTEST-DONE line (qemu exit $qrc); console tail:"$'\n'"$(tail -n 15 "$LOG")"
  else
    pass="$(sed -nE 's/.* pass=([0-9]+).*/\1/p' <<<"$done_line")"
    fail="$(sed -nE 's/.* fail=([0-9]+).*/\1/p' <<<"$done_line")"
    known="$(sed -nE 's/.* known_bugs=([0-9]+).*/\1/p' <<<"$done_line")"
    if ((${fail:-1} > 0)); then
      ok=0
      why="${fail:-?} check(s) failed: $(grep -E '^VMTEST-RESULT [^ ]+ FAIL' "$LOG" | awk '{ print $2 }' | tr '\n' ' ' || true)"
    elif ((${pass:-0} == 0)); then
      ok=0
      why="no check ran"
    else
      why="$pass check(s) passed"
    fi
    if ((${known:-0} > 0)); then
      why+=", ${known} known bug(s): $(grep -E '^VMTEST-RESULT [^ ]+ KNOWN-BUG' "$LOG" | awk '{ print $2 "(" $4 ")" }' | tr '\n' ' ' || true)"
    fi
  fi
  if ((ok)); then
    echo "VMTEST $name PASS ${secs}s (host cpu ${QEMU_CPU:-?}s) $why"
  else
    echo "VMTEST $name FAIL ${secs}s (host cpu ${QEMU_CPU:-?}s) $why (console: $LOG)"
  fi
  ((ok))
}

parse_opts() {
  NO_PREPARE=0
  while (($# > 0)); do
    case "$1" in
      --kernel) KERNEL="$2"; shift ;;
      --cpus) CPUS="$2"; shift ;;
      --nodes) NODES="$2"; shift ;;
      --mem-per-node) MEM_PER_NODE="$2"; shift ;;
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
  APPEND="$(header "$name" append)"
  TIMEOUT="$(header "$name" timeout)"
  KERNEL="${KERNEL:-6.12}" CPUS="${CPUS:-4}" NODES="${NODES:-1}"
  MEM_PER_NODE="${MEM_PER_NODE:-768}" TIMEOUT="${TIMEOUT:-300}"
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
  grep -E '^VMTEST-(RESULT|INFO) [^ ]*locality' "$logdir"/*.out |
    sed -nE 's#^.*/([^/]+)\.out:VMTEST-[A-Z]+ ([^ ]+) ([A-Z-]+ )?.*LOCALITY allocator=([^ ]+) .*local_pct=([0-9.]+) min_node_pct=([0-9.]+).*#\1 \2: \4 \5% local (worst node \6%)#p' || true
  echo "---- slabs"
  grep -E '^VMTEST-(RESULT|INFO) [^ ]*slabs' "$logdir"/*.out |
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
