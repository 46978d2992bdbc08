#!/usr/bin/env bash
# tests/preload/preload_deps_test.sh LIB BAD_ALLOC NO_LIBSTDCXX
#
# libcidmalloc.so needs nothing but libc (its references to libstdc++ are
# weak: allocator/api/new_delete.cc), so a preloaded C program does not
# load libstdc++, while a preloaded C++ program still gets std::bad_alloc
# and the new-handler from its own libstdc++.
set -uo pipefail

lib="$1" bad_alloc="$2" no_libstdcxx="$3"
fail=0

# Only libc.so.6 in DT_NEEDED.
needed="$(readelf -d "$lib" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | tr '\n' ' ')"
if [[ "$needed" == "libc.so.6 " ]]; then
  echo "ok: NEEDED: $needed"
else
  echo "FAIL: NEEDED should be libc.so.6 alone, is: $needed"
  fail=1
fi

# No strong undefined reference to libstdc++ or libgcc_s.
strong="$(nm -D --undefined-only "$lib" | awk '$1 == "U" && $2 !~ /@GLIBC_/ {print $2}')"
if [[ -z "$strong" ]]; then
  echo "ok: no strong reference outside glibc"
else
  echo "FAIL: strong references outside glibc: $strong"
  fail=1
fi

# Not a pipe into grep -q (under pipefail, readelf could die of SIGPIPE).
if grep -q 'NEEDED.*libstdc++' <<<"$(readelf -d "$no_libstdcxx")"; then
  echo "FAIL: the C test program itself needs libstdc++"
  fail=1
fi
out="$(LD_PRELOAD="$lib" "$no_libstdcxx")" || { echo "FAIL: C program exit $?"; fail=1; }
if [[ "$out" == "malloc works; libstdc++ mapped: no" ]]; then
  echo "ok: C program: $out"
else
  echo "FAIL: C program: $out"
  fail=1
fi

# The throwing operator new, called from that C program: no libstdc++ to
# throw with, so a message and abort().
rc=0
err="$(LD_PRELOAD="$lib" "$no_libstdcxx" new 2>&1 >/dev/null)" || rc=$?
if ((rc == 134)) && [[ "$err" == *"operator new: out of memory, and no libstdc++ loaded"* ]]; then
  echo "ok: operator new without libstdc++: message and abort"
else
  echo "FAIL: operator new without libstdc++: exit $rc, stderr: $err"
  fail=1
fi

expected="new[]: caught std::bad_alloc
operator new: caught bad_alloc after 3 handler calls
nothrow: null after 3 handler calls
new int: 42"
out="$(LD_PRELOAD="$lib" "$bad_alloc" 2>&1)" || { echo "FAIL: C++ program exit $?"; fail=1; }
if [[ "$out" == "$expected" ]]; then
  echo "ok: C++ program: bad_alloc, new-handler and nothrow as required"
else
  echo "FAIL: C++ program printed:"
  echo "$out"
  echo "expected:"
  echo "$expected"
  fail=1
fi
exit "$fail"
