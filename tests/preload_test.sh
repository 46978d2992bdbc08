#!/usr/bin/env bash
# tests/preload_test.sh: cidmalloc under real programs. Run by `./cidmalloc
# test` (the tests/*.sh hook) from the repository root; also on its own:
#   tests/preload_test.sh              all checks
#   tests/preload_test.sh -v           also print each check's log
#   tests/preload_test.sh [-v] REGEX   only the checks whose names match
#
# Every check runs a program with bazel-bin's libcidmalloc.so preloaded and
# compares what it produced with the same program on glibc's malloc:
# python3 (dicts, sorting, joins, hashing; also PYTHONMALLOC=malloc), gcc
# (compile a generated C file; binary and its output), git (a 200-file
# repository: commit, log, gc, fsck), sort (~50 MB), perl (a big hash),
# the JVM (javac, then a thread pool with zlib and direct buffers) and a
# Redis server (pipelined fill and churn, a BGSAVE fork; its data set; and
# with two I/O threads under redis-benchmark).
# python3, sort and java run again under glibc.pthread.rseq=0 (cidmalloc
# registers rseq itself) and CIDMALLOC_RSEQ_MODE=cpu / none, python3 and
# sort with rseq(2) denied by a seccomp filter (ENOSYS and EPERM; also gcc
# and java with ENOSYS), and every program again with the background thread
# on and ticking every millisecond. Further checks: the
# "cidmalloc: mode" line proves the library is in use and honours the
# forced modes; //tests/preload:static_link (cc_binary malloc =
# "//:cidmalloc") in every mode; `./cidmalloc run` (a command and the demo);
# `./cidmalloc install` into a temporary prefix, then a plain g++ link of the
# installed archive, a -static one and one against the shared library
# (the latter two with the installed pkg-config files' flags).
#
# One line per check ("ok ..." or "FAIL ..." with the log's tail); exit 0
# when all passed, 1 if any failed, 77 (skipped) only when
# libcidmalloc.so cannot be built at all. Every preloaded command runs
# under a timeout, so a hang is a failure, not a stuck CI job.
set -uo pipefail

# HERE: this script's directory, tests/ (the checks' code is sourced from
# tests/preload/, below).
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" || exit 1
cd "$HERE/.." || exit 1
BAZEL="${BAZEL:-bazel}"
VERBOSE=0
if [[ "${1:-}" == "-v" ]]; then
  VERBOSE=1
  shift
fi
FILTER="${1:-}"

# Seconds one preloaded command may take before it counts as hung.
LIMIT="${PRELOAD_TEST_TIMEOUT:-60}"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/preload_test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

PASSED=0
FAILED=0
SKIPPED=0
START="$EPOCHREALTIME"

# Seconds since START or since $1, one decimal.
elapsed() {
  local from="${1:-$START}"
  awk -v a="$from" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

# --- build -------------------------------------------------------------------

# Bazel's chatter goes to a log, shown only on failure.
if ! "$BAZEL" build //:libcidmalloc.so </dev/null >"$TMP/build.log" 2>&1; then
  cat "$TMP/build.log"
  echo "SKIP: //:libcidmalloc.so does not build"
  exit 77
fi
# Not the bazel-bin symlink: it follows the last build's configuration
# (--config=debug, --config=asan), which may not hold our targets.
BIN="$("$BAZEL" info bazel-bin </dev/null 2>>"$TMP/build.log")" || {
  cat "$TMP/build.log"
  echo "FAIL: bazel info bazel-bin"
  exit 1
}
# A private copy: a concurrent rebuild must not swap it during the checks.
LIB="$TMP/libcidmalloc.so"
cp "$BIN/libcidmalloc.so" "$LIB"

STATIC_BIN=""
if "$BAZEL" build //tests/preload:static_link </dev/null >"$TMP/build2.log" 2>&1; then
  STATIC_BIN="$TMP/static_link"
  cp "$BIN/tests/preload/static_link" "$STATIC_BIN"
fi
DENY_RSEQ_BIN=""
if "$BAZEL" build //tests/common:deny_rseq_exec </dev/null >"$TMP/build3.log" 2>&1; then
  DENY_RSEQ_BIN="$TMP/deny_rseq_exec"
  cp "$BIN/tests/common/deny_rseq_exec" "$DENY_RSEQ_BIN"
fi

# --- the checks' code --------------------------------------------------------

# Sourced from tests/preload/, next to this script: how a check runs, then
# the checks by subject.
# shellcheck source=tests/preload/harness.sh
source "$HERE/preload/harness.sh" || exit 1
# shellcheck source=tests/preload/programs.sh
source "$HERE/preload/programs.sh" || exit 1
# shellcheck source=tests/preload/modes.sh
source "$HERE/preload/modes.sh" || exit 1
# shellcheck source=tests/preload/run_install.sh
source "$HERE/preload/run_install.sh" || exit 1

# --- the checks --------------------------------------------------------------

echo "library: $BIN/libcidmalloc.so"

check "library in use (python3, CIDMALLOC_STATS=1)" check_in_use
check "size-class table (python3, CIDMALLOC_STATS=2)" check_class_table
check "python3 dict/sort/join/hash" check_python
check "python3 PYTHONMALLOC=malloc" check_python malloc
check "python3 four threads, PYTHONMALLOC=malloc" \
  check_python malloc tests/preload/alloc_threads.py
check "gcc compiles and runs a generated C file" check_gcc
check "git init/add/commit/log/gc/fsck, 200 files" check_git
check "sort 50 MB" check_sort
check "perl big hash" check_perl
check "javac, then java: a thread pool, zlib, direct buffers" check_java
check "redis server: fill, churn, BGSAVE fork, digest" check_redis
check "redis server with I/O threads, redis-benchmark" check_redis_io_threads

for variant in GLIBC_TUNABLES=glibc.pthread.rseq=0 CIDMALLOC_RSEQ_MODE=cpu \
  CIDMALLOC_RSEQ_MODE=none; do
  VARIANT=("$variant")
  check "[$variant] mode line" check_forced_mode
  check "[$variant] python3 dict/sort/join/hash" check_python
  check "[$variant] python3 PYTHONMALLOC=malloc" check_python malloc
  check "[$variant] python3 four threads, PYTHONMALLOC=malloc" \
    check_python malloc tests/preload/alloc_threads.py
  check "[$variant] sort 50 MB" check_sort
  check "[$variant] javac, then java: a thread pool, zlib, direct buffers" \
    check_java
  check "[$variant] redis server: fill, churn, BGSAVE fork, digest" check_redis
done
VARIANT=()

# rseq(2) denied by a seccomp filter (//tests/common:deny_rseq_exec), for
# glibc's registration and cidmalloc's own: none mode, found natively, in
# real programs (valgrind_test runs without rseq too, one thread at a time).
for errno_name in ENOSYS EPERM; do
  WRAP=("${DENY_RSEQ_BIN:-/nonexistent/deny_rseq_exec}" "$errno_name")
  check "[rseq denied, $errno_name] mode line" check_denied_mode
  check "[rseq denied, $errno_name] python3 dict/sort/join/hash" check_python
  check "[rseq denied, $errno_name] sort 50 MB" check_sort
  if [[ "$errno_name" == ENOSYS ]]; then
    check "[rseq denied, $errno_name] gcc compiles and runs a generated C file" \
      check_gcc
    check "[rseq denied, $errno_name] javac, then java: a thread pool, zlib, direct buffers" \
      check_java
  fi
done
WRAP=()

# The background thread, ticking every millisecond (periods of 2 ms): it
# starts in each of these programs (and in the children gcc and git fork)
# and drains and releases among their allocations.
VARIANT=(CIDMALLOC_BACKGROUND_THREAD=on CIDMALLOC_CACHE_IDLE_MS=2
  CIDMALLOC_RELEASE_DELAY_MS=2)
check "[background thread] running" check_background_running
check "[background thread] python3 dict/sort/join/hash" check_python
check "[background thread] python3 PYTHONMALLOC=malloc" check_python malloc
check "[background thread] gcc compiles and runs a generated C file" check_gcc
check "[background thread] git init/add/commit/log/gc/fsck, 200 files" check_git
check "[background thread] sort 50 MB" check_sort
check "[background thread] perl big hash" check_perl
check "[background thread] javac, then java: a thread pool, zlib, direct buffers" \
  check_java
check "[background thread] redis server: fill, churn, BGSAVE fork, digest" \
  check_redis
VARIANT=()

check "static link (malloc = \"//:cidmalloc\"), every mode" check_static
check "./cidmalloc run -- python3 -c ..." check_run_command
check "./cidmalloc run (demo)" check_run_demo
check "./cidmalloc install PREFIX + g++ link" check_install

echo "preload: $PASSED passed, $FAILED failed, $SKIPPED skipped in $(elapsed)s"
((FAILED == 0))
