#!/usr/bin/env bash
# Runs the statically linked //tests/preload:static_link (argument 1) in
# every rseq mode and checks what it reports: the default mode is whatever
# the machine offers; CIDMALLOC_RSEQ_MODE caps it (cid > cpu > none); with
# glibc's registration off (glibc.pthread.rseq=0) cidmalloc registers rseq
# itself and keeps the default mode.
set -euo pipefail

bin="$1"
fail=0

# report ENV...: runs the binary with ENV; prints "MODE REGISTRATION".
report() {
  local out rc=0
  out="$(env "$@" "$bin")" || rc=$?
  if ((rc != 0)); then
    echo "FAIL: $* $bin: exit status $rc" >&2
    echo "$out" >&2
    return 1
  fi
  echo "$out" | sed -nE 's/^mode ([a-z]+) registration ([a-z]+) .*/\1 \2/p'
}

rank() { case "$1" in cid) echo 2 ;; cpu) echo 1 ;; *) echo 0 ;; esac; }

read -r mode reg <<<"$(report CIDMALLOC_STATS=1)" || fail=1
case "${mode:-}" in
  cid | cpu | none) echo "ok: default: mode $mode, registration $reg" ;;
  *) echo "FAIL: default: no mode reported"; exit 1 ;;
esac
default_mode="$mode"
default_reg="$reg"

for forced in cid cpu none; do
  want="$forced"
  (($(rank "$forced") <= $(rank "$default_mode"))) || want="$default_mode"
  read -r mode reg <<<"$(report CIDMALLOC_RSEQ_MODE="$forced")" || { fail=1; continue; }
  if [[ "$mode" == "$want" ]]; then
    echo "ok: CIDMALLOC_RSEQ_MODE=$forced: mode $mode"
  else
    echo "FAIL: CIDMALLOC_RSEQ_MODE=$forced: mode '$mode', want $want"
    fail=1
  fi
done

want_reg="$default_reg"
[[ "$default_reg" != glibc ]] || want_reg=own
read -r mode reg <<<"$(report GLIBC_TUNABLES=glibc.pthread.rseq=0)" || fail=1
if [[ "$mode" == "$default_mode" && "$reg" == "$want_reg" ]]; then
  echo "ok: glibc.pthread.rseq=0: mode $mode, registration $reg"
else
  echo "FAIL: glibc.pthread.rseq=0: mode '$mode' registration '$reg'," \
    "want mode $default_mode registration $want_reg"
  fail=1
fi
exit "$fail"
