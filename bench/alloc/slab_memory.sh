#!/usr/bin/env bash
# bench/alloc/slab_memory.sh: front-end slabs touched by T busy threads, in
# cid mode and in cpu mode (//bench/alloc:slab_memory).
#
#   bench/alloc/slab_memory.sh             # from the repository root
#   THREADS="2 4 8 16 64" MODES="cid cpu none" SECONDS_EACH=1 bench/alloc/slab_memory.sh
#
# Environment: THREADS ("2 4 8 16"), MODES ("cid cpu"; CIDMALLOC_RSEQ_MODE
# caps the mode), SECONDS_EACH (0.5), BAZEL, BAZEL_FLAGS as in compare.sh.
set -euo pipefail

cd "$(dirname "$0")/../.."

THREADS="${THREADS:-2 4 8 16}"
MODES="${MODES:-cid cpu}"
SECONDS_EACH="${SECONDS_EACH:-0.5}"
BAZEL="${BAZEL:-bazel}"
BAZEL_FLAGS="${BAZEL_FLAGS:-}"

# shellcheck disable=SC2086
$BAZEL build -c opt $BAZEL_FLAGS //bench/alloc:slab_memory
# shellcheck disable=SC2086
BIN="$($BAZEL info -c opt $BAZEL_FLAGS bazel-bin 2>/dev/null)"

echo "cpus: $(nproc), kernel $(uname -r)" >&2
echo
echo "| Mode asked | Mode | Threads | IDs seen | cpus seen | slabs | slab_bytes | bytes/slab | cached_bytes |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in $THREADS; do
  for m in $MODES; do
    line="$(CIDMALLOC_RSEQ_MODE=$m "$BIN/bench/alloc/slab_memory" "$t" "$SECONDS_EACH")"
    echo "$line" >&2
    # key=value pairs -> shell variables with a prefix.
    declare -A kv=()
    for pair in $line; do kv[${pair%%=*}]="${pair#*=}"; done
    echo "| $m | ${kv[mode]} | $t | ${kv[ids_seen]} | ${kv[cpus_seen]} | ${kv[slabs]} |" \
         "${kv[slab_bytes]} | ${kv[bytes_per_slab]} | ${kv[cached_bytes]} |"
    unset kv
  done
done
