#!/usr/bin/env bash
# tests/preload/preinit_knobs_test.sh LIB PROGRAM
#
# PROGRAM (preinit_knobs.c) makes its first allocation from .preinit_array,
# where `environ` is still NULL.  With LIB preloaded, the CIDMALLOC_* knobs
# must still take effect, read from the initial environment: the stats
# summary at exit, the mode, the warning for an invalid value; also behind
# an environment far larger than the 1 KiB the reader streams through, and
# after a knob entry too long to keep.
set -uo pipefail

lib="$1" prog="$2"
fail=0
# 20,000 bytes, so that the entries after it start past many 1 KiB reads.
pad="$(printf 'x%.0s' {1..20000})"
# A CIDMALLOC_ entry longer than the 4 KiB kept of them: left out.
long="$(printf '7%.0s' {1..5000})"

# check NAME EXPECTED-STDERR-LINE-PREFIX ENV...
check() {
  local name="$1" want="$2"
  shift 2
  local out rc
  # LD_PRELOAD for PROGRAM alone: a preloaded timeout would print a
  # summary of its own.
  out="$(timeout 30 env -i "$@" LD_PRELOAD="$lib" "$prog" 2>&1)"
  rc=$?
  if ((rc != 0)); then
    echo "FAIL: $name: exit $rc: $out"
    fail=1
  elif [[ "$out" != *"environ at the first malloc: NULL"* ]]; then
    echo "FAIL: $name: the first malloc did not find environ NULL: $out"
    fail=1
  elif ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: $name: no line '$want' on stderr: $out"
    fail=1
  else
    echo "ok: $name"
  fi
}

check "stats" "cidmalloc: mode " CIDMALLOC_STATS=1
check "mode none" "cidmalloc: mode none " \
  CIDMALLOC_RSEQ_MODE=none CIDMALLOC_STATS=1
check "mode cpu" "cidmalloc: mode cpu " \
  CIDMALLOC_RSEQ_MODE=cpu CIDMALLOC_STATS=1
check "invalid value" \
  "cidmalloc: warning: CIDMALLOC_CACHE_BYTES=bogus is invalid" \
  CIDMALLOC_CACHE_BYTES=bogus
check "after 20 KB of environment" "cidmalloc: mode none " \
  PAD="$pad" A=1 CIDMALLOC_RSEQ_MODE=none B="$pad" CIDMALLOC_STATS=1
check "after a knob entry too long to keep" "cidmalloc: mode none " \
  CIDMALLOC_CACHE_IDLE_MS="$long" CIDMALLOC_RSEQ_MODE=none \
  CIDMALLOC_STATS=1

# Without knobs: no summary (the knobs above did it, not a default).
out="$(timeout 30 env -i LD_PRELOAD="$lib" "$prog" 2>&1)"
if [[ "$out" == *"cidmalloc:"* ]]; then
  echo "FAIL: no knobs: cidmalloc printed: $out"
  fail=1
else
  echo "ok: no knobs, no summary"
fi
exit "$fail"
