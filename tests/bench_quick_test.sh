#!/usr/bin/env bash
# tests/bench_quick_test.sh: `./cidmalloc bench --quick` as one test of
# `./cidmalloc test` (the tests/*.sh hook; also runs on its own).
#
# Runs every workload of the bench (bench/workloads, python3, gcc, sqlite3)
# once at --quick sizes under glibc, jemalloc, mimalloc, tcmalloc and
# cidmalloc, plus the CIDMALLOC_STATS=1 run, and passes when each one
# completed (exit 0 and its "ok" line; a workload may skip itself with exit
# 77, e.g. when the kernel refuses seccomp).  No speed is asserted.  The
# report goes to a temporary directory, removed at exit; docs/benchmarks/ is
# not touched.
#
# Exit 0: everything completed; 77: skipped (CIDMALLOC_SKIP_BENCH=1, or no
# bench/workloads package in this checkout); anything else: failed, with
# the runner's failure lines printed.  Each run is killed after
# BENCH_QUICK_RUN_TIMEOUT seconds (default 60) and the whole test after
# BENCH_QUICK_TIMEOUT (default 600), so a hang fails instead of blocking CI.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

if [[ "${CIDMALLOC_SKIP_BENCH:-0}" == 1 ]]; then
  echo "SKIP: tests/bench_quick_test.sh: CIDMALLOC_SKIP_BENCH=1"
  exit 77
fi
if [[ ! -f bench/workloads/BUILD ]]; then
  echo "SKIP: tests/bench_quick_test.sh: no bench/workloads package here"
  exit 77
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/bench_quick_test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
START="$EPOCHREALTIME"

rc=0
timeout --kill-after=10 "${BENCH_QUICK_TIMEOUT:-600}" \
  ./cidmalloc bench --quick --out "$TMP/out" \
  --timeout "${BENCH_QUICK_RUN_TIMEOUT:-60}" \
  </dev/null >"$TMP/stdout" 2>"$TMP/stderr" || rc=$?
SECS="$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')"

# The runner's last line: "bench quick: 16 workloads x 5 allocators x 1
# run(s): 81 ok, 0 skipped, 0 failed in 11 s; report: ..." (80 runs and
# cidmalloc's stats run).
summary="$(grep '^bench quick:' "$TMP/stderr" | tail -1)"
summary="${summary%%; report:*}"

if ((rc == 0)) && [[ -n "$summary" ]]; then
  cat "$TMP/stdout"
  echo
  if ((SECS > 120)); then
    echo "WARNING: took ${SECS} s, more than the 2 minutes --quick is meant to take"
  fi
  echo "PASS: tests/bench_quick_test.sh: ${summary#bench quick: } (${SECS} s with the build)"
  exit 0
fi

# Failed: the build's or the runner's complaint, the failed runs (with their
# stderr tails) and the notes of the report.
if ((rc == 124 || rc == 137)); then
  echo "tests/bench_quick_test.sh: timed out after ${BENCH_QUICK_TIMEOUT:-600} s"
fi
grep -v -E '^\[ *[0-9]+/[0-9]+\] .* (ok|[0-9.]+ s +[0-9.]+ MiB.*)$' "$TMP/stderr" | tail -60
if [[ -s "$TMP/stdout" ]]; then
  sed -n '/^Failed:/,$p' "$TMP/stdout"
fi
echo "FAIL: tests/bench_quick_test.sh: ${summary:-the runner did not finish} (exit $rc, ${SECS} s)"
exit 1
