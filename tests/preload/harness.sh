# tests/preload/harness.sh: how tests/preload_test.sh (which sources it)
# runs its checks: the variant's extra environment (VARIANT) and launcher
# (WRAP), a command with
# the library preloaded (pre) or on glibc's malloc (base) under the timeout,
# comparing outputs (same), one "ok" / "FAIL" / "skip" line per check
# (check), skipping when a program is missing (need) and explaining a
# failed command's exit status (status_of, run_to).
#
# Uses tests/preload_test.sh's globals: LIB, LIMIT, TMP, FILTER, VERBOSE,
# the PASSED / FAILED / SKIPPED counters and elapsed.
# shellcheck shell=bash

# --- helpers -----------------------------------------------------------------

# Extra environment for preloaded commands (set per variant), e.g.
# (CIDMALLOC_RSEQ_MODE=cpu).
VARIANT=()
# A launcher that runs the command (set per variant), e.g.
# ("$DENY_RSEQ_BIN" ENOSYS): rseq(2) denied by a seccomp filter.
WRAP=()

# pre CMD...: CMD with the library preloaded, under the timeout. timeout
# itself runs on glibc's malloc.  CMD may start with NAME=VALUE assignments,
# so a WRAP launcher runs env, which applies them and executes the rest.
pre() {
  timeout -k 5 "$LIMIT" env "${VARIANT[@]}" LD_PRELOAD="$LIB" \
    ${WRAP[@]+"${WRAP[@]}" env} "$@"
}

# base CMD...: CMD on glibc's malloc, same environment and launcher
# otherwise.
base() {
  timeout -k 5 "$LIMIT" env "${VARIANT[@]}" ${WRAP[@]+"${WRAP[@]}" env} "$@"
}

# say ...: a line for the check's log.
say() { echo "$*" >&2; }

# same FILE1 FILE2 WHAT: fails (with a diff) unless the files are equal.
same() {
  if cmp -s "$1" "$2"; then return 0; fi
  say "$3 differs (glibc vs cidmalloc):"
  diff "$1" "$2" | head -20 >&2
  return 1
}

# check NAME FUNCTION [ARGS...]: runs one check; its stderr is its log.
check() {
  local name="$1" t0="$EPOCHREALTIME" rc=0 log="$TMP/check.log"
  shift
  [[ -z "$FILTER" || "$name" =~ $FILTER ]] || return 0
  "$@" 2>"$log" || rc=$?
  local took
  took="$(elapsed "$t0")"
  if ((rc == 0)); then
    PASSED=$((PASSED + 1))
    echo "ok    $name (${took}s)"
    if ((VERBOSE)); then sed 's/^/      /' "$log"; fi
  elif ((rc == 77)); then
    SKIPPED=$((SKIPPED + 1))
    echo "skip  $name: $(tail -n 1 "$log")"
  else
    FAILED=$((FAILED + 1))
    echo "FAIL  $name (${took}s)"
    tail -n 25 "$log" | sed 's/^/      /'
  fi
}

# need PROGRAM...: skips the check (77) when a program is missing.
need() {
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null || { say "$p not installed"; return 77; }
  done
}

# status_of RC WHAT: explains a non-zero exit status (124: timeout, 137:
# timeout's SIGKILL).
status_of() {
  local rc="$1" what="$2"
  if ((rc == 124)); then
    say "$what: timed out after ${LIMIT}s (hang?)"
  elif ((rc == 137)); then
    say "$what: SIGKILL (ignored the timeout's SIGTERM after ${LIMIT}s, or OOM)"
  elif ((rc > 128)); then
    say "$what: killed by signal $((rc - 128))"
  else
    say "$what: exit status $rc"
  fi
}

# run_to OUT ERR WHO CMD...: runs CMD (with `pre` or `base` first), stdout to
# OUT, stderr to ERR; explains a failure and shows ERR's tail.
run_to() {
  local out="$1" err="$2" who="$3" rc=0
  shift 3
  "$@" >"$out" 2>"$err" || rc=$?
  if ((rc != 0)); then
    status_of "$rc" "$who"
    tail -n 5 "$err" >&2
    return 1
  fi
}
