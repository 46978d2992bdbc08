#!/usr/bin/env bash
# tests/aarch64_test.sh: cidmalloc built for 64-bit Arm and run there, under
# qemu's user-mode emulation.  Run by `./cidmalloc test` (the tests/*.sh
# hook) from the repository root; also on its own.
#
# qemu-aarch64 does not implement rseq(2), so the library runs in none mode
# here, with soft IDs instead of its AArch64 critical sections (those run
# in tests/aarch64_vm_test.sh's VMs).  This checks that the library builds
# for AArch64 and that its none mode works there: every source file of
# //:libcidmalloc.so (Bazel's list) compiles
# for aarch64 with the repository's warnings as errors (-Wall -Wextra
# -Werror), the library links, tests/preload/valgrind_workload.c
# (threads, frees across threads, fork, malloc_trim, every byte checked)
# passes with it preloaded, reporting none mode, and so does
# tests/preload/bad_alloc.cc (operator new, its new-handler and
# std::bad_alloc through the library's weak references to libstdc++).
# Not Bazel: Debian's Bazel has no aarch64 toolchain here, so the compiler
# is called directly with the copts of the library's targets.
#
# Needs g++-aarch64-linux-gnu and qemu-user (./cidmalloc setup installs
# them); exits 77 (skipped) without them, 0 when every check passed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
BAZEL="${BAZEL:-bazel}"
CXX=aarch64-linux-gnu-g++
CC=aarch64-linux-gnu-gcc
QEMU=qemu-aarch64
SYSROOT=/usr/aarch64-linux-gnu

for tool in "$CXX" "$CC" "$QEMU"; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool not installed (g++-aarch64-linux-gnu, qemu-user)"
    exit 77
  fi
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/aarch64_test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() {
  echo "FAIL: $*"
  FAILED=1
}

# The library's sources, as Bazel builds them into //:libcidmalloc.so.
mapfile -t SOURCES < <("$BAZEL" query 'deps(//:libcidmalloc.so)' \
  --output=label 2>"$TMP/query.err" </dev/null |
  sed -nE 's#^//((allocator|rseq)[^:]*):(.*\.cc)$#\1/\3#p' | sort)
if ((${#SOURCES[@]} < 10)); then
  cat "$TMP/query.err"
  echo "FAIL: bazel query found ${#SOURCES[@]} source files"
  exit 1
fi

# The copts of their targets: -fvisibility=hidden everywhere, no
# exceptions but in operator new / delete, which the shared library builds
# with weak references to libstdc++ (allocator/api/BUILD).
COMMON=(-std=c++20 -O2 -g0 -fPIC -I. -Wall -Wextra -Werror
  -fvisibility=hidden)
OBJECTS=()
for src in "${SOURCES[@]}"; do
  obj="$TMP/$(tr / _ <<<"$src").o"
  extra=(-fno-exceptions)
  [[ "$src" == allocator/api/new_delete.cc ]] &&
    extra=(-DCIDMALLOC_WEAK_LIBSTDCXX -fomit-frame-pointer)
  if ! "$CXX" "${COMMON[@]}" "${extra[@]}" -c "$src" -o "$obj" \
    2>"$TMP/cc.err"; then
    fail "$src does not compile for aarch64:"
    head -n 20 "$TMP/cc.err"
  fi
  OBJECTS+=("$obj")
done
((FAILED == 0)) || exit 1
echo "ok    ${#SOURCES[@]} source files compile for aarch64"

LIB="$TMP/libcidmalloc.so"
if ! "$CXX" -shared -o "$LIB" "${OBJECTS[@]}" -Wl,-Bsymbolic-functions \
  -Wl,-z,now -Wl,--as-needed 2>"$TMP/ld.err"; then
  cat "$TMP/ld.err"
  echo "FAIL: libcidmalloc.so does not link for aarch64"
  exit 1
fi
file "$LIB" | grep -q 'ARM aarch64' || fail "$LIB is not an aarch64 library"
echo "ok    libcidmalloc.so links for aarch64"

WORKLOAD="$TMP/workload"
if ! "$CC" -O2 -pthread -o "$WORKLOAD" tests/preload/valgrind_workload.c \
  2>"$TMP/wl.err"; then
  cat "$TMP/wl.err"
  echo "FAIL: the workload does not compile for aarch64"
  exit 1
fi

# run_preloaded NAME PROGRAM [VAR=VALUE...]: PROGRAM under qemu with
# cidmalloc preloaded and its summary on (stdout and stderr in
# $TMP/NAME.out and .err), killed after RUN_LIMIT seconds (300).  Fails
# the test, returning 1, unless it exits 0 and the summary says none mode
# (the library was in use).
run_preloaded() {
  local name="$1" program="$2" rc=0 var
  local -a env=(-E LD_PRELOAD="$LIB" -E CIDMALLOC_STATS=1)
  shift 2
  for var in "$@"; do env+=(-E "$var"); done
  timeout -k 5 "${RUN_LIMIT:-300}" "$QEMU" -L "$SYSROOT" "${env[@]}" \
    "$program" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  if ((rc != 0)); then
    fail "$name: exited with status $rc:"
    tail -n 10 "$TMP/$name.err"
    return 1
  fi
  if ! grep -q '^cidmalloc: mode none (rseq registration none)' \
    "$TMP/$name.err"; then
    fail "$name: cidmalloc's summary is missing or not none mode:"
    grep '^cidmalloc:' "$TMP/$name.err" | head -n 3
    return 1
  fi
}

# run_workload NAME [VAR=VALUE...]: the workload, which must print its "ok"
# line.
run_workload() {
  local name="$1"
  shift
  run_preloaded "$name" "$WORKLOAD" "$@" || return
  if ! grep -q '^ok ' "$TMP/$name.out"; then
    fail "$name: no 'ok' line"
    return
  fi
  echo "ok    $name: $(head -n 1 "$TMP/$name.out"); $(grep -m1 \
    '^cidmalloc: mallocs' "$TMP/$name.err")"
}

run_workload "workload"
run_workload "workload, soft IDs under locks only" CIDMALLOC_RSEQ_SOFT=lock
# Not with CIDMALLOC_BACKGROUND_THREAD=on: qemu-aarch64 7.2 itself aborts
# (an assertion in its TCG code, qemu_plugin_vcpu_init_hook) in the child
# of a fork while another thread of the process is running, which the
# workload's fork then is.

# operator new's failure paths in a C++ program (the weak references to
# libstdc++ that new_delete.cc makes in the shared library): the lines
# tests/preload/preload_deps_test.sh expects on x86-64.
BAD_ALLOC="$TMP/bad_alloc"
if ! "$CXX" -O2 -o "$BAD_ALLOC" tests/preload/bad_alloc.cc 2>"$TMP/ba.err"; then
  cat "$TMP/ba.err"
  fail "bad_alloc.cc does not compile for aarch64"
elif RUN_LIMIT=60 run_preloaded bad_alloc "$BAD_ALLOC"; then
  expected="new[]: caught std::bad_alloc
operator new: caught bad_alloc after 3 handler calls
nothrow: null after 3 handler calls
new int: 42"
  if [[ "$(cat "$TMP/bad_alloc.out")" != "$expected" ]]; then
    fail "C++ program printed:"
    cat "$TMP/bad_alloc.out"
  else
    echo "ok    C++ program: bad_alloc, new-handler and nothrow as required"
  fi
fi

((FAILED == 0))
