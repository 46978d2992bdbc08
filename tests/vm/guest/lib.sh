# shellcheck shell=sh disable=SC2034,SC1090
# /vmtest/lib.sh: helpers for the scenario scripts that run inside the test
# VMs (busybox sh).  Every check ends in one line
#
#   VMTEST-RESULT <name> PASS|FAIL|KNOWN-BUG <detail>
#
# KNOWN-BUG: the check failed in the way a `known_bug` line of the scenario
# describes (not counted as a failure; the summary lists it).
# which tests/vm/vm.sh reads from the serial console.  Results are also
# appended to /tmp/vmtest-results, so counting works from subshells.
#
# Programs: /vmtest/bin (on PATH), test binaries under /vmtest/tests/<pkg>/
# with their Bazel `env` in <name>.env, /vmtest/lib/libcidmalloc.so, and
# jemalloc at $VMTEST_JEMALLOC (empty if the host had none).  The AArch64
# VMs also carry Debian's arm64 sort, perl and python3.11 in /usr/bin and
# tests/preload's inputs for them in /vmtest/programs (preload_check).

VMTEST_RESULTS=/tmp/vmtest-results
VMTEST_KNOWN=/tmp/vmtest-known-bugs
VMTEST_CIDMALLOC_SO=/vmtest/lib/libcidmalloc.so
VMTEST_JEMALLOC=$(cat /vmtest/jemalloc-path 2>/dev/null)

vmtest_now() { cut -d' ' -f1 /proc/uptime; }

vmtest_count() {
  _n=$(grep -c " $1\$" "$VMTEST_RESULTS" 2>/dev/null)
  echo "${_n:-0}"
}

# result NAME PASS|FAIL DETAIL...
result() {
  _name=$1
  _status=$2
  shift 2
  echo "VMTEST-RESULT $_name $_status $*"
  echo "$_name $_status" >>"$VMTEST_RESULTS"
}

# known_bug NAME ID TEXT: check NAME may fail with exit status 3 (its
# program's "failed only within the known bug's band", e.g. locality's
# --known-bug-floor) because of the bug ID; such a failure is reported as
# KNOWN-BUG with ID and TEXT.  Any other failure of NAME is a FAIL.
known_bug() {
  echo "$1 $2 $3" >>"$VMTEST_KNOWN"
}

known_bug_of() {
  grep "^$1 " "$VMTEST_KNOWN" 2>/dev/null | head -n 1 | cut -d' ' -f2-
}

# show NAME FILE: prints FILE to the console, each line prefixed "NAME| ".
show() {
  sed "s/^/$1| /" "$2"
}

# run NAME SECONDS CMD...: runs CMD under a timeout with its output in
# /tmp/NAME.log.  Sets RC (124 or 143: timed out) and ELAPSED (seconds), and
# prints VMTEST-TIME.
run() {
  _name=$1
  _limit=$2
  shift 2
  _t0=$(vmtest_now)
  timeout "$_limit" "$@" >"/tmp/$_name.log" 2>&1
  RC=$?
  ELAPSED=$(awk -v a="$_t0" -v b="$(vmtest_now)" 'BEGIN { printf "%.1f", b - a }')
  echo "VMTEST-TIME $_name $ELAPSED"
  return 0
}

# rc_detail: "exit N" or "timed out after Ns" for the last run.
rc_detail() {
  case $RC in
    124 | 143) echo "timed out after ${_limit}s" ;;
    *) echo "exit $RC" ;;
  esac
}

# summary_of FILE: the program's summary line (the last "LOCALITY ... " or
# "SLABS ... " line with figures) followed by its error= words, if any.
summary_of() {
  _sum=$(grep -E '^(LOCALITY|SLABS) .*(local_pct|slabs)=' "$1" | tail -1)
  _err=$(grep -oE 'error=[^ ]+' "$1" | tr '\n' ' ')
  echo "$_sum${_err:+ $_err}"
}

# check NAME SECONDS CMD...: runs CMD, shows its output, PASS iff it exits 0
# (KNOWN-BUG if it exits 3 and a known_bug line names the check).
# The detail is summary_of its output.
check() {
  _cname=$1
  run "$@"
  show "$_cname" "/tmp/$_cname.log"
  _detail=$(summary_of "/tmp/$_cname.log")
  _known=$(known_bug_of "$_cname")
  if [ "$RC" = 0 ]; then
    result "$_cname" PASS "${ELAPSED}s $_detail"
  elif [ "$RC" = 3 ] && [ -n "$_known" ]; then
    result "$_cname" KNOWN-BUG "$_known; ${ELAPSED}s $_detail"
  else
    result "$_cname" FAIL "$(rc_detail) ${ELAPSED}s $_detail"
  fi
}

# report NAME SECONDS CMD...: like check, but never fails: the figures are
# shown for comparison only (result INFO).
report() {
  _cname=$1
  run "$@"
  show "$_cname" "/tmp/$_cname.log"
  _detail=$(summary_of "/tmp/$_cname.log")
  echo "VMTEST-INFO $_cname $(rc_detail) ${ELAPSED}s $_detail"
}

# expect_key NAME FILE KEY VALUE: FILE has a line "KEY: VALUE".
expect_key() {
  _v=$(sed -n "s/^$3: //p" "$2" | head -1)
  if [ "$_v" = "$4" ]; then
    result "$1" PASS "$3: $_v"
  else
    result "$1" FAIL "$3: '$_v', expected '$4'"
  fi
}

# info NAME: runs //rseq:info into /tmp/NAME.log and shows it.
info() {
  run "$1" 60 /vmtest/bin/info
  show "$1" "/tmp/$1.log"
  [ "$RC" = 0 ] || result "$1" FAIL "info: $(rc_detail)"
}

# gtest PKG/NAME SECONDS [FILTER]: runs a GoogleTest binary built by Bazel,
# with the environment its BUILD target sets (`env`), in a scratch
# directory.  PASS iff it exits 0; the detail counts passed, skipped and
# failed tests and names the skipped ones.  The whole output is shown only
# on failure.
gtest() {
  _test=$1
  _limit=$2
  _filter=${3:-*}
  _gname=gtest.$(echo "$_test" | tr / .)
  _bin=/vmtest/tests/$_test
  if [ ! -x "$_bin" ]; then
    result "$_gname" FAIL "$_test is not in the initramfs (not built?)"
    return 0
  fi
  _dir=/tmp/$_gname.d
  mkdir -p "$_dir"
  _t0=$(vmtest_now)
  (
    cd "$_dir" || exit 1
    set -a
    . "$_bin.env"
    set +a
    export TEST_TMPDIR="$_dir"
    exec timeout "$_limit" "$_bin" "--gtest_filter=$_filter"
  ) >"/tmp/$_gname.log" 2>&1
  RC=$?
  ELAPSED=$(awk -v a="$_t0" -v b="$(vmtest_now)" 'BEGIN { printf "%.1f", b - a }')
  echo "VMTEST-TIME $_gname $ELAPSED"
  _log=/tmp/$_gname.log
  _passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$_log" | tail -1)
  _skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$_log" | tail -1)
  _failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$_log" | tail -1)
  _skipnames=$(sed -n 's/^\[  SKIPPED \] \([A-Za-z_][A-Za-z0-9_/]*\.[A-Za-z0-9_/.]*\)$/\1/p' "$_log" | sort -u | tr '\n' ' ')
  _detail="passed=${_passed:-0} skipped=${_skipped:-0} failed=${_failed:-0} ${ELAPSED}s"
  [ -n "$_skipnames" ] && _detail="$_detail skipped:[ $_skipnames]"
  if [ "$RC" = 0 ]; then
    grep -E '^\[ +(OK|SKIPPED|PASSED) ' "$_log" | sed "s/^/$_gname| /"
    result "$_gname" PASS "$_detail"
  else
    show "$_gname" "$_log"
    result "$_gname" FAIL "$(rc_detail) $_detail"
  fi
}

# preload_check NAME SECONDS MODE CMD...: runs CMD on glibc's malloc, then
# with libcidmalloc.so preloaded (CIDMALLOC_STATS=1), each under the
# timeout.  PASS iff both exit 0 with the same output, not empty, and the
# preloaded run's summary on stderr starts "cidmalloc: mode MODE " (the
# library was in use, in the mode the kernel allows).  The detail gives
# the output's size and both times, which compare nothing: the first run
# warms what the second finds, and the other scenario's VM shares the
# host's cores.
preload_check() {
  _pname=$1
  _limit=$2
  _pmode=$3
  shift 3
  _t0=$(vmtest_now)
  timeout "$_limit" "$@" >"/tmp/$_pname.base" 2>"/tmp/$_pname.base.err"
  _rc_base=$?
  _t1=$(vmtest_now)
  timeout "$_limit" env "LD_PRELOAD=$VMTEST_CIDMALLOC_SO" CIDMALLOC_STATS=1 \
    "$@" >"/tmp/$_pname.pre" 2>"/tmp/$_pname.pre.err"
  _rc_pre=$?
  _t2=$(vmtest_now)
  _times=$(awk -v a="$_t0" -v b="$_t1" -v c="$_t2" \
    'BEGIN { printf "glibc %.1fs, cidmalloc %.1fs", b - a, c - b }')
  ELAPSED=$(awk -v a="$_t0" -v c="$_t2" 'BEGIN { printf "%.1f", c - a }')
  echo "VMTEST-TIME $_pname $ELAPSED"
  _bytes=$(wc -c <"/tmp/$_pname.pre")
  show "$_pname" "/tmp/$_pname.pre.err"
  if [ "$_rc_base" != 0 ]; then
    show "$_pname.glibc" "/tmp/$_pname.base.err"
    result "$_pname" FAIL "on glibc's malloc: exit $_rc_base; $_times"
  elif [ "$_rc_pre" != 0 ]; then
    result "$_pname" FAIL "preloaded: exit $_rc_pre; $_times"
  elif [ ! -s "/tmp/$_pname.base" ]; then
    result "$_pname" FAIL "no output; $_times"
  elif ! cmp -s "/tmp/$_pname.base" "/tmp/$_pname.pre"; then
    result "$_pname" FAIL "outputs differ ($_bytes bytes preloaded); $_times"
  elif ! grep -q "^cidmalloc: mode $_pmode " "/tmp/$_pname.pre.err"; then
    result "$_pname" FAIL "no 'cidmalloc: mode $_pmode' summary; $_times"
  else
    result "$_pname" PASS "$_bytes bytes alike; $_times"
  fi
}
