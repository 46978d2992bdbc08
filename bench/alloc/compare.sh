#!/usr/bin/env bash
# bench/alloc/compare.sh: the malloc+free fast path of cidmalloc against
# glibc, jemalloc, mimalloc and tcmalloc, in one run.
#
#   bench/alloc/compare.sh                 # from the repository root
#   R=5 MIN_TIME=0.3 bench/alloc/compare.sh
#
# Builds //bench/alloc:malloc_bench (not linked with cidmalloc) and
# //:libcidmalloc.so with -c opt, then runs the same binary under each
# allocator (no preload = glibc; LD_PRELOAD for the others), interleaved:
# glibc jemalloc mimalloc tcmalloc cidmalloc, repeated R times, so slow
# drifts of a shared machine hit every allocator alike.  Each run writes
# Google Benchmark JSON to $OUT.  Prints a markdown table: the median (STAT)
# the R runs of ns per malloc+free pair (CPU time per iteration divided by
# the benchmark's pairs_per_iter counter), the ratio of cidmalloc to glibc
# and to the fastest of jemalloc / mimalloc / tcmalloc, and whether the
# project's goals hold (cidmalloc <= 0.5x glibc; cidmalloc no slower than the
# fastest other allocator); then the spread (lowest-highest run) of each.
#
# Environment:
#   R          runs per allocator (default 3)
#   MIN_TIME   --benchmark_min_time per benchmark, seconds (default 0.1)
#   FILTER     --benchmark_filter (default: all)
#   OUT        directory for the JSON files (default: a new /tmp directory)
#   BAZEL      the bazel command, with any startup options (default: bazel)
#   BAZEL_FLAGS  extra build flags (e.g. --symlink_prefix=/)
#   TCMALLOC   which gperftools library (default libtcmalloc_minimal.so.4)
#   ALLOCATORS subset / order, e.g. "glibc cidmalloc" (default: all five)
#   STAT       median (default) or min: which run of each row the tables
#              use.  min (the least disturbed run) with R=10 or more is the
#              steadier estimate on a shared machine; the spread table shows
#              both ends either way.
#   BASELINE   an older libcidmalloc.so: also run as allocator "baseline",
#              interleaved with the others, and report cidmalloc/baseline
#              (a change measured side by side in one run)
#   FLOOR      1 (default) or 0: also run //bench:rseq_bench's BM_Stack rows
#              (no preload) in every round, and report what a bare pop+push
#              costs without any allocator (the rseq section, a thread-local
#              array, a thread-local list) against glibc's fixed-size pair:
#              the floor under the fast-path goal
#   BASELINE_ENV  environment words for the baseline's runs only, e.g.
#              BASELINE=bazel-bin/libcidmalloc.so
#              BASELINE_ENV=CIDMALLOC_RSEQ_NODE_IDS=on: the same build with
#              the multi-node (node-qualified) paths, against its default
set -euo pipefail

cd "$(dirname "$0")/../.."

R="${R:-3}"
MIN_TIME="${MIN_TIME:-0.1}"
FILTER="${FILTER:-.}"
BAZEL="${BAZEL:-bazel}"
BAZEL_FLAGS="${BAZEL_FLAGS:-}"
TCMALLOC="${TCMALLOC:-libtcmalloc_minimal.so.4}"
ALLOCATORS="${ALLOCATORS:-glibc jemalloc mimalloc tcmalloc cidmalloc}"
FLOOR="${FLOOR:-1}"
OUT="${OUT:-$(mktemp -d /tmp/cidmalloc-compare.XXXXXX)}"
mkdir -p "$OUT"

# The installed file of a Debian package whose name ends with /$2.
deb_lib() {
  local path
  path="$(dpkg -L "$1" 2>/dev/null | grep -m1 "/$2\$" || true)"
  if [[ -z "$path" || ! -e "$path" ]]; then
    echo "compare.sh: $2 (Debian package $1) not installed" >&2
    exit 1
  fi
  echo "$path"
}

TARGETS="//bench/alloc:malloc_bench //:libcidmalloc.so"
[[ "$FLOOR" != 1 ]] || TARGETS="$TARGETS //bench:rseq_bench"
# shellcheck disable=SC2086
$BAZEL build -c opt $BAZEL_FLAGS $TARGETS
# shellcheck disable=SC2086
BIN="$($BAZEL info -c opt $BAZEL_FLAGS bazel-bin 2>/dev/null)"
BENCH="$BIN/bench/alloc/malloc_bench"

declare -A LIB
LIB[glibc]=""
LIB[jemalloc]="$(deb_lib libjemalloc2 libjemalloc.so.2)"
LIB[mimalloc]="$(deb_lib libmimalloc2.0 libmimalloc.so.2)"
LIB[tcmalloc]="$(deb_lib libtcmalloc-minimal4 "$TCMALLOC" 2>/dev/null ||
                 deb_lib libgoogle-perftools4 "$TCMALLOC")"
LIB[cidmalloc]="$BIN/libcidmalloc.so"
if [[ -n "${BASELINE:-}" ]]; then
  LIB[baseline]="$(readlink -f "$BASELINE")"
  ALLOCATORS="$ALLOCATORS baseline"
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cpus"
  echo "kernel: $(uname -r)"
  echo "glibc: $(ldd --version | head -1)"
  for a in $ALLOCATORS; do echo "lib $a: ${LIB[$a]:-(none: glibc malloc)}"; done
  [[ -z "${BASELINE_ENV:-}" ]] || echo "baseline environment: $BASELINE_ENV"
  echo "runs: R=$R MIN_TIME=$MIN_TIME FILTER=$FILTER"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt" >&2

for ((rep = 1; rep <= R; rep++)); do
  for a in $ALLOCATORS; do
    echo "run $rep/$R: $a" >&2
    run_env=()
    [[ "$a" != baseline ]] || read -r -a run_env <<<"${BASELINE_ENV:-}"
    env "${run_env[@]}" ${LIB[$a]:+LD_PRELOAD="${LIB[$a]}"} "$BENCH" \
      --benchmark_min_time="$MIN_TIME" \
      --benchmark_filter="$FILTER" \
      --benchmark_out="$OUT/$a.$rep.json" \
      --benchmark_out_format=json >/dev/null 2>"$OUT/$a.$rep.log"
  done
  if [[ "$FLOOR" == 1 ]]; then
    echo "run $rep/$R: floor (rseq_bench, no allocator)" >&2
    "$BIN/bench/rseq_bench" --benchmark_min_time="$MIN_TIME" \
      --benchmark_filter='^BM_Stack_' \
      --benchmark_out="$OUT/floor.$rep.json" \
      --benchmark_out_format=json >/dev/null 2>"$OUT/floor.$rep.log"
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt" >&2
echo "JSON in $OUT" >&2

# shellcheck disable=SC2086  # one argument per allocator
STAT="${STAT:-median}" python3 bench/alloc/compare_report.py "$OUT" "$R" $ALLOCATORS
