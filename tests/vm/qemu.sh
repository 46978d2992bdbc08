# tests/vm/qemu.sh: one VM, for tests/vm/vm.sh (which sources it): boots
# qemu with the kernel and topology set in the globals below, the initramfs
# of `vm.sh prepare` and the command to run (boot_vm); tells a failure of
# the emulated machine, to boot again, from a failed test
# (emulator_failure); reads the console for the results and the last line
# "VMTEST <scenario> PASS|FAIL ..." (verdict).  Uses vm.sh's settings
# (CACHE, WORK) and die.
# shellcheck shell=bash

# ---- booting ----------------------------------------------------------------------

# boot_vm: boots with the settings in the globals below and writes the
# console to $LOG; the VM runs $RUN_SH (a file).  Prints nothing.  Returns
# qemu's status (124: timed out).
KERNEL=6.12 CPUS=4 NODES=1 MEM_PER_NODE=768 MEMORYLESS=0 APPEND="" TIMEOUT=300
LOG=""
RUN_SH="" SCENARIO=""
boot_vm() {
  # The emulated machine of each architecture (VM_ARCH, vm.sh).
  local -a machine=(qemu-system-x86_64 -machine q35 -accel tcg -cpu qemu64)
  local console=ttyS0 kdir="$KERNEL"
  if [[ "${VM_ARCH:-x86_64}" == aarch64 ]]; then
    machine=(qemu-system-aarch64 -machine virt -accel tcg -cpu max)
    console=ttyAMA0 kdir="aarch64-$KERNEL"
  fi
  local vmlinuz="$CACHE/kernels/$kdir/vmlinuz"
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

  ((MEMORYLESS < NODES)) ||
    die "--memoryless-nodes $MEMORYLESS leaves no node with memory"
  # The last MEMORYLESS nodes have cpus and no memory.
  local -a numa=()
  local n
  if ((NODES > 1)); then
    for ((n = 0; n < NODES; n++)); do
      if ((n >= NODES - MEMORYLESS)); then
        numa+=(-numa "node,nodeid=$n")
      else
        numa+=(-object "memory-backend-ram,id=mem$n,size=${MEM_PER_NODE}M"
          -numa "node,nodeid=$n,memdev=mem$n")
      fi
      numa+=(-numa "cpu,node-id=$n,socket-id=$n")
    done
  fi
  # tsc=unstable: TCG's TSC is not synchronised across vCPUs.  lpj=: skip
  # the per-cpu delay-loop calibration (minutes with 64 vCPUs).  panic=-1
  # and oops=panic: reboot at once, which -no-reboot turns into an exit.
  # The RCU stall and lockup detectors off: with 64 vCPUs on two host cores
  # a vCPU can go unscheduled for half a minute (a CI run at a090e5a: "BUG:
  # soft lockup - CPU#41 stuck for 26s! [swapper/0:1]", during boot, with
  # numa4 booting beside it), which says nothing of the programs tested.
  local cmdline="console=$console panic=-1 oops=panic tsc=unstable"
  cmdline+=" lpj=5000000 quiet nowatchdog"
  cmdline+=" rcupdate.rcu_cpu_stall_suppress=1 VMTEST_SCENARIO=${SCENARIO:-adhoc}"
  [[ -z "$APPEND" ]] || cmdline+=" $APPEND"

  # The host cpu time qemu used (user + system) goes to $QEMU_CPU: with
  # other load on the host it tells more than the wall time.
  local rc=0 TIMEFORMAT='%U %S'
  { time {
    timeout -k 10 "$TIMEOUT" "${machine[@]}" \
      -smp "$CPUS,sockets=$NODES,cores=$((CPUS / NODES)),threads=1" \
      -m "$((MEM_PER_NODE * (NODES - MEMORYLESS)))M" "${numa[@]}" \
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
# shellcheck disable=SC2034 # read by run_scenario (vm.sh)
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
