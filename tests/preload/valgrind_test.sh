#!/usr/bin/env bash
# tests/preload/valgrind_test.sh LIB WORKLOAD PY_SCRIPT: cidmalloc under
# valgrind, an environment without rseq (valgrind does not implement the
# system call), with LIB preloaded into the client:
#   1. valgrind --tool=none runs WORKLOAD (threads, cross-thread frees,
#      realloc, calloc, posix_memalign, fork with a thread in the child,
#      malloc_trim; it checks every byte it wrote): it passes, and
#      CIDMALLOC_STATS=1 reports mode none (so cidmalloc served it).
#   2. memcheck runs WORKLOAD with cidmalloc serving its allocations
#      (--soname-synonyms=somalloc=nouserintercepts: memcheck keeps its
#      hands off the preloaded malloc) and finds no error in any access,
#      cidmalloc's own included (--error-exitcode).  A control run (the
#      workload's "control" mode, one bad write(2) buffer) must fail.
#   3. python3 runs PY_SCRIPT under valgrind --tool=none and prints what it
#      prints on glibc's malloc without valgrind.
# Prints one line per check; exits 0 when all passed.
set -uo pipefail

LIB="$(realpath "$1")"
WORKLOAD="$(realpath "$2")"
PY_SCRIPT="$(realpath "$3")"
PY=/usr/bin/python3
LIMIT=240  # Seconds for one valgrind run (memcheck is ~20x slower).

if ! command -v valgrind >/dev/null; then
  echo "FAIL: valgrind is not installed (./cidmalloc setup installs it)"
  exit 1
fi

TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/valgrind_test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
FAILED=0

fail() {
  echo "FAIL  $1"
  shift
  for f in "$@"; do tail -n 20 "$f" | sed 's/^/      /'; done
  FAILED=$((FAILED + 1))
}

# vg OUT ERR VALGRIND_ARGS... -- CMD...: CMD under valgrind with LIB
# preloaded into the client; returns the exit status.
vg() {
  local out="$1" err="$2"
  shift 2
  timeout -k 5 "$LIMIT" env LD_PRELOAD="$LIB" CIDMALLOC_STATS=1 \
    valgrind -q "$@" >"$out" 2>"$err"
}

# The stats summary's mode line must say none.
mode_none() {
  grep -q '^cidmalloc: mode none ' "$1"
}

# 1. No instrumentation: none mode must serve the workload.
rc=0
vg "$TMP/none.out" "$TMP/none.err" --tool=none "$WORKLOAD" || rc=$?
if ((rc != 0)) || ! grep -q '^ok ' "$TMP/none.out"; then
  fail "valgrind --tool=none: workload (exit $rc)" "$TMP/none.out" "$TMP/none.err"
elif ! mode_none "$TMP/none.err"; then
  fail "valgrind --tool=none: no 'cidmalloc: mode none' line" "$TMP/none.err"
else
  echo "ok    valgrind --tool=none: workload, $(grep '^cidmalloc: mode' "$TMP/none.err")"
fi

# 2. memcheck: an error in any access makes valgrind exit 99.
rc=0
vg "$TMP/mc.out" "$TMP/mc.err" --error-exitcode=99 \
  --soname-synonyms=somalloc=nouserintercepts "$WORKLOAD" || rc=$?
if ((rc != 0)) || ! grep -q '^ok ' "$TMP/mc.out"; then
  fail "memcheck: workload (exit $rc; 99 = memcheck found errors)" \
    "$TMP/mc.out" "$TMP/mc.err"
elif ! mode_none "$TMP/mc.err"; then
  fail "memcheck: cidmalloc did not serve the workload (no mode none line)" \
    "$TMP/mc.err"
else
  echo "ok    memcheck: workload on cidmalloc, no errors"
fi
# Control: the same options fail the workload's "control" mode, which
# passes write(2) an unmapped buffer.
rc=0
vg "$TMP/ctl.out" "$TMP/ctl.err" --error-exitcode=99 \
  --soname-synonyms=somalloc=nouserintercepts "$WORKLOAD" control || rc=$?
if ((rc == 99)); then
  echo "ok    memcheck control: an error in the client fails the run"
else
  fail "memcheck control: exit $rc, want 99" "$TMP/ctl.out" "$TMP/ctl.err"
fi

# 3. python3 under valgrind prints what it prints without it.
rc=0
PYTHONHASHSEED=0 "$PY" "$PY_SCRIPT" >"$TMP/py.base" 2>"$TMP/py.base.err" || rc=$?
if ((rc != 0)); then
  fail "python3 on glibc (exit $rc)" "$TMP/py.base.err"
else
  rc=0
  PYTHONHASHSEED=0 vg "$TMP/py.out" "$TMP/py.err" --tool=none "$PY" "$PY_SCRIPT" ||
    rc=$?
  if ((rc != 0)); then
    fail "valgrind --tool=none: python3 (exit $rc)" "$TMP/py.err"
  elif ! cmp -s "$TMP/py.base" "$TMP/py.out"; then
    fail "valgrind --tool=none: python3 output differs" "$TMP/py.out"
  elif ! mode_none "$TMP/py.err"; then
    fail "valgrind --tool=none: python3 without 'cidmalloc: mode none'" "$TMP/py.err"
  else
    echo "ok    valgrind --tool=none: python3 $(basename "$PY_SCRIPT"), same output"
  fi
fi

((FAILED == 0))
