# tests/preload/modes.sh: the mode cidmalloc runs in, for
# tests/preload_test.sh (which sources it): the library is in use (the
# "cidmalloc: mode" line of CIDMALLOC_STATS=1; CIDMALLOC_STATS=2's class
# table), each variant gets the mode
# and rseq registration it asks for, the background thread runs, and
# //tests/preload:static_link (cc_binary malloc = "//:cidmalloc") reports
# the right mode in every mode.  The helpers (pre, base, say, ...) are
# tests/preload/harness.sh's; PY is tests/preload/programs.sh's.
# shellcheck shell=bash

# --- the library is in use ---------------------------------------------------

# The mode and registration a program reports under CIDMALLOC_STATS=1, as
# "MODE REGISTRATION" (from "cidmalloc: mode cid (rseq registration glibc),
# ..."); empty when there is no such line.
DEFAULT_MODE=""
DEFAULT_REG=""

stats_mode() {
  local err="$TMP/mode.err" rc=0
  pre CIDMALLOC_STATS=1 "$PY" -c 'import json; print(len(json.dumps(list(range(10000)))))' \
    >"$TMP/mode.out" 2>"$err" || rc=$?
  if ((rc != 0)); then
    status_of "$rc" "python3 with CIDMALLOC_STATS=1"
    tail -n 5 "$err" >&2
    return 1
  fi
  sed -nE 's/^cidmalloc: mode ([a-z]+) \(rseq registration ([a-z]+)\).*/\1 \2/p' "$err" |
    tail -n 1
}

check_in_use() {
  need "$PY" || return
  local got
  got="$(stats_mode)" || return 1
  read -r DEFAULT_MODE DEFAULT_REG <<<"$got"
  say "$(grep '^cidmalloc: ' "$TMP/mode.err")"
  case "$DEFAULT_MODE" in
    cid | cpu | none) ;;
    *) say "no 'cidmalloc: mode' line in the summary"; return 1 ;;
  esac
  grep -qE '^cidmalloc: mallocs [1-9][0-9]*, ' "$TMP/mode.err" ||
    { say "no allocations counted"; return 1; }
}

# check_class_table: CIDMALLOC_STATS=2 adds the size-class table after the
# summary: its header, a row per class with spans (python3 uses dozens),
# and the totals line.
check_class_table() {
  need "$PY" || return
  local err="$TMP/classes.err" rc=0
  pre CIDMALLOC_STATS=2 "$PY" \
    -c 'print(len({str(i): [i] * (i % 50) for i in range(20000)}))' \
    >"$TMP/classes.out" 2>"$err" || rc=$?
  if ((rc != 0)); then
    status_of "$rc" "python3 with CIDMALLOC_STATS=2"
    tail -n 5 "$err" >&2
    return 1
  fi
  grep -q '^cidmalloc: mode ' "$err" || { say "no summary"; return 1; }
  grep -q '^cidmalloc: class   size  spans  span KiB   objects    in use' "$err" ||
    { say "no class table header"; return 1; }
  local rows
  rows="$(grep -cE '^cidmalloc: +[0-9]+ +[0-9]+ +[1-9][0-9]* ' "$err")"
  ((rows >= 10)) || { say "only $rows class rows"; return 1; }
  grep -qE '^cidmalloc: classes: [1-9][0-9]* spans of ' "$err" ||
    { say "no totals line"; return 1; }
  say "$rows class rows; $(grep '^cidmalloc: classes: ' "$err")"
}

# check_background_running: under the current VARIANT (the background
# thread on, with periods of a few ms), a python3 that allocates across a
# few ticks reports the thread running in its summary.
check_background_running() {
  need "$PY" || return
  local err="$TMP/bg.err" rc=0
  pre CIDMALLOC_STATS=1 "$PY" -c '
import time
for i in range(20):
    x = [bytes(j % 300) for j in range(20000)]
    time.sleep(0.005)
print(len(x))' >"$TMP/bg.out" 2>"$err" || rc=$?
  if ((rc != 0)); then
    status_of "$rc" "python3 with the background thread"
    tail -n 5 "$err" >&2
    return 1
  fi
  say "$(grep 'background thread' "$err")"
  grep -qE 'background thread running \([1-9][0-9]* ticks\)' "$err" ||
    { say "the summary does not show the thread running"; return 1; }
}

# rank MODE: cid > cpu > none.
rank() { case "$1" in cid) echo 2 ;; cpu) echo 1 ;; *) echo 0 ;; esac; }

# check_forced_mode: the summary under the current VARIANT shows the mode
# the variant asks for (a forced mode caps the default; glibc.pthread.rseq=0
# keeps the default mode, with cidmalloc registering rseq itself).
check_forced_mode() {
  if [[ -z "$DEFAULT_MODE" ]]; then
    local keep=("${VARIANT[@]}") got
    VARIANT=()
    got="$(stats_mode)" || { VARIANT=("${keep[@]}"); return 1; }
    VARIANT=("${keep[@]}")
    read -r DEFAULT_MODE DEFAULT_REG <<<"$got"
    [[ -n "$DEFAULT_MODE" ]] || { say "no 'cidmalloc: mode' line by default"; return 1; }
  fi
  local got mode reg want_mode="$DEFAULT_MODE" want_reg="$DEFAULT_REG" v
  got="$(stats_mode)" || return 1
  read -r mode reg <<<"$got"
  for v in "${VARIANT[@]}"; do
    case "$v" in
      CIDMALLOC_RSEQ_MODE=*)
        want_mode="${v#*=}"
        (($(rank "$want_mode") <= $(rank "$DEFAULT_MODE"))) || want_mode="$DEFAULT_MODE"
        ;;
      GLIBC_TUNABLES=glibc.pthread.rseq=0)
        [[ "$DEFAULT_REG" == glibc ]] && want_reg=own
        ;;
    esac
  done
  say "$(grep '^cidmalloc: mode' "$TMP/mode.err" | tail -n 1)"
  if [[ "$mode" != "$want_mode" || "$reg" != "$want_reg" ]]; then
    say "got mode '$mode' registration '$reg'; want mode $want_mode registration $want_reg"
    return 1
  fi
}

# check_denied_mode: under WRAP=(deny_rseq_exec ERRNO), where rseq(2)
# fails for glibc and for cidmalloc alike, the summary says mode none and
# registration none: the library found out by itself.
check_denied_mode() {
  ((${#WRAP[@]} > 0)) && [[ -x "${WRAP[0]}" ]] || {
    cat "$TMP/build3.log" >&2
    say "//tests/common:deny_rseq_exec does not build"
    return 1
  }
  local got mode reg
  got="$(stats_mode)" || return 1
  read -r mode reg <<<"$got"
  say "$(grep '^cidmalloc: mode' "$TMP/mode.err" | tail -n 1)"
  if [[ "$mode" != none || "$reg" != none ]]; then
    say "got mode '$mode' registration '$reg'; want mode none registration none"
    return 1
  fi
}

# --- static linking ----------------------------------------------------------

check_static() {
  [[ -n "$STATIC_BIN" ]] || {
    cat "$TMP/build2.log" >&2
    say "//tests/preload:static_link does not build"
    return 1
  }
  local v want mode reg rc default_mode="" default_reg=""
  for v in "" CIDMALLOC_RSEQ_MODE=cid CIDMALLOC_RSEQ_MODE=cpu \
    CIDMALLOC_RSEQ_MODE=none GLIBC_TUNABLES=glibc.pthread.rseq=0; do
    rc=0
    base ${v:+"$v"} "$STATIC_BIN" >"$TMP/static.out" 2>"$TMP/static.err" || rc=$?
    if ((rc != 0)); then
      status_of "$rc" "static_link ${v:-(default)}"
      cat "$TMP/static.out" "$TMP/static.err" >&2
      return 1
    fi
    read -r mode reg < <(sed -nE 's/^mode ([a-z]+) registration ([a-z]+) .*/\1 \2/p' \
      "$TMP/static.out")
    say "static_link${v:+ $v}: $(cat "$TMP/static.out")"
    case "$v" in
      "")
        [[ "$mode" =~ ^(cid|cpu|none)$ ]] || { say "no mode reported"; return 1; }
        default_mode="$mode" default_reg="$reg"
        continue
        ;;
      CIDMALLOC_RSEQ_MODE=*)
        want="${v#*=}"
        (($(rank "$want") <= $(rank "$default_mode"))) || want="$default_mode"
        [[ "$mode" == "$want" ]] || { say "mode '$mode', want $want"; return 1; }
        ;;
      GLIBC_TUNABLES=*)
        want="$default_reg"
        [[ "$default_reg" != glibc ]] || want=own
        if [[ "$mode" != "$default_mode" || "$reg" != "$want" ]]; then
          say "mode '$mode' registration '$reg', want $default_mode / $want"
          return 1
        fi
        ;;
    esac
  done
}
