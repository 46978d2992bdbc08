#!/usr/bin/env bash
# bench/alloc/startup.sh: what preloading an allocator costs a short-lived
# process: hyperfine on `env LD_PRELOAD=<lib> /bin/true`.
#
#   bench/alloc/startup.sh                 # from the repository root
#   ROUNDS=10 RUNS=20 bench/alloc/startup.sh
#
# Variants: no preload ("none"); three libraries with no code of their own
# (//bench/alloc:libempty.so needs nothing, as libcidmalloc.so since its
# references to libstdc++ became weak; :libempty_stdcxx.so needs
# libstdc++/libm like Bazel's default shared library, and like
# libcidmalloc.so before; :libempty_hwloc.so adds libhwloc, which
# libcidmalloc.so loaded before commit cfcc174); jemalloc, mimalloc,
# tcmalloc (gperftools, libtcmalloc_minimal) and cidmalloc.  /bin/true calls
# malloc once (cidmalloc initialises), so each allocator's initialisation is
# included.
#
# hyperfine runs each command's runs back to back; to interleave the
# variants on a shared machine this script runs hyperfine ROUNDS times with
# every variant and RUNS runs each (--warmup WARMUP every time), and pools
# the ROUNDS*RUNS wall times of each variant (default 10 x 20 = 200).
# -N (no intermediate shell) is used: the commands are exec'd directly.
# Prints (bench/alloc/startup_report.py) per variant the wall time mean ±
# sd, median and minimum and the user+system CPU time per run (ms); the
# differences that split cidmalloc's cost (loading a library, libstdc++,
# cidmalloc itself; and what libhwloc would add); and cidmalloc against
# jemalloc, saying when
# the difference is within 2 standard errors (not resolved).
#
# Environment: ROUNDS (10), RUNS (20), WARMUP (5), OUT (JSON directory,
# default a new /tmp directory), BAZEL (bazel command with startup options),
# BAZEL_FLAGS (extra build flags), TCMALLOC (libtcmalloc_minimal.so.4).
set -euo pipefail

cd "$(dirname "$0")/../.."

ROUNDS="${ROUNDS:-10}"
RUNS="${RUNS:-20}"
WARMUP="${WARMUP:-5}"
BAZEL="${BAZEL:-bazel}"
BAZEL_FLAGS="${BAZEL_FLAGS:-}"
TCMALLOC="${TCMALLOC:-libtcmalloc_minimal.so.4}"
OUT="${OUT:-$(mktemp -d /tmp/cidmalloc-startup.XXXXXX)}"
mkdir -p "$OUT"

deb_lib() {
  local path
  path="$(dpkg -L "$1" 2>/dev/null | grep -m1 "/$2\$" || true)"
  if [[ -z "$path" || ! -e "$path" ]]; then
    echo "startup.sh: $2 (Debian package $1) not installed" >&2
    exit 1
  fi
  echo "$path"
}

# shellcheck disable=SC2086
$BAZEL build -c opt $BAZEL_FLAGS //:libcidmalloc.so //bench/alloc:libempty.so \
  //bench/alloc:libempty_stdcxx.so //bench/alloc:libempty_hwloc.so
# shellcheck disable=SC2086
BIN="$($BAZEL info -c opt $BAZEL_FLAGS bazel-bin 2>/dev/null)"

NAMES=(none empty empty_stdcxx empty_hwloc jemalloc mimalloc tcmalloc cidmalloc)
declare -A LIB
LIB[none]=""
LIB[empty]="$BIN/bench/alloc/libempty.so"
LIB[empty_stdcxx]="$BIN/bench/alloc/libempty_stdcxx.so"
LIB[empty_hwloc]="$BIN/bench/alloc/libempty_hwloc.so"
LIB[jemalloc]="$(deb_lib libjemalloc2 libjemalloc.so.2)"
LIB[mimalloc]="$(deb_lib libmimalloc2.0 libmimalloc.so.2)"
LIB[tcmalloc]="$(deb_lib libtcmalloc-minimal4 "$TCMALLOC" 2>/dev/null ||
                 deb_lib libgoogle-perftools4 "$TCMALLOC")"
LIB[cidmalloc]="$BIN/libcidmalloc.so"

{
  echo "date: $(date -u +%FT%TZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cpus"
  echo "kernel: $(uname -r)"
  hyperfine --version
  for n in "${NAMES[@]}"; do echo "lib $n: ${LIB[$n]:-(no preload)}"; done
  echo "libcidmalloc.so needs: $(readelf -d "${LIB[cidmalloc]}" 2>/dev/null |
    sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  echo "ROUNDS=$ROUNDS RUNS=$RUNS WARMUP=$WARMUP"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt" >&2

CMDS=()
for n in "${NAMES[@]}"; do
  if [[ -z "${LIB[$n]}" ]]; then
    CMDS+=(-n "$n" "env /bin/true")
  else
    CMDS+=(-n "$n" "env LD_PRELOAD=${LIB[$n]} /bin/true")
  fi
done

for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r/$ROUNDS" >&2
  hyperfine -N --style none --warmup "$WARMUP" --runs "$RUNS" \
    --export-json "$OUT/round.$r.json" "${CMDS[@]}" >/dev/null
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt" >&2
echo "JSON in $OUT" >&2

python3 bench/alloc/startup_report.py "$OUT" "$ROUNDS" "${NAMES[@]}"
