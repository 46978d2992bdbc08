#!/usr/bin/env bash
# tests/preload/fork_handlers_test.sh LIB PROGRAM
#
# A C program whose fork handlers allocate, registered before its first
# allocation (fork_handlers.c), forks with LIB preloaded, in every rseq
# mode, with 1 and with 60 handlers: fork must return (a deadlock is a
# timeout) and every handler must have allocated.
set -uo pipefail

lib="$1" prog="$2"
fail=0
# Not a pipe into grep -q (under pipefail, readelf could die of SIGPIPE).
if grep -q 'NEEDED.*libstdc++' <<<"$(readelf -d "$prog")"; then
  echo "FAIL: the program needs libstdc++, whose start-up allocates"
  fail=1
fi
for mode in cid cpu none; do
  for n in 1 60; do
    out="$(CIDMALLOC_RSEQ_MODE="$mode" LD_PRELOAD="$lib" \
      timeout 30 "$prog" "$n" 2>&1)"
    rc=$?
    if ((rc == 0)) &&
      [[ "$out" == "ok $n handlers, $((2 * n)) allocations in handlers" ]]; then
      echo "ok: mode $mode, $n handler(s): $out"
    else
      echo "FAIL: mode $mode, $n handler(s): exit $rc${out:+: $out}" \
        "(124: fork deadlocked)"
      fail=1
    fi
  done
done
exit "$fail"
