#!/usr/bin/env bash
# tests/allocator_budget/fast_path_budget_test.sh: the instruction budget of
# the fast paths of malloc, free, C++'s operator new(size_t) and its nothrow
# form, operator delete(void*) and sized operator delete(void*, size_t) in
# libcidmalloc.so (allocator/api/alloc.h).
#
#   fast_path_budget_test.sh LIBCIDMALLOC_SO [FUNC=BUDGET ...]
#
# The fast path of each function is laid out first: the compiler puts the
# unlikely branches (slow paths, error reports) after it.  So the count is
# the run of instructions from the function's entry to its first `ret`.
# For malloc and operator new that run is the path of sizes up to 1 KiB
# (sizes above take a lookup placed after the ret).  The test fails if a
# count exceeds its budget, or if the path holds a lock prefix, an xchg/
# cmpxchg/xadd, a system call, a call, or a stack frame (push, or an
# adjustment of %rsp: operator delete had one while the slow paths it
# tail-calls were not noexcept, operator new while it called the slow path
# and kept the size for the new-handler's retry).  FUNC=BUDGET arguments
# override a budget (to see the test fail).
set -euo pipefail

# Measured with GCC 12.2 -O2 (binutils 2.40): malloc 32 (33 before the
# size -> stack-offset table), free 66 (56 since the span map); at 10ed190
# malloc 33, free 56, operator delete 56 (58 with the frame it had before
# the slow paths were noexcept); since the small sizes' lookup is inline
# (LIKELY in the size -> offset lookup), malloc 33 and operator new 30 (36, with a push
# and a pop, while it called Alloc); since the wide sections (the ID's low
# 16 bits, no bound check) malloc 31, free 54, operator new 28; free 55
# since the flags and the cookie's secret share a word (one load fewer, one
# register copy more); malloc 27 and operator new 26 since sizes up to 1 KiB
# are tested first (one compare-and-branch, and the flag test folded into
# one `testb`); sized operator delete 61 since it pushes at the stack of
# the size it is given (the size's offset, and its comparison with the
# tag's); malloc 28, free 57, operator new 27, sized operator delete 63
# since the stacks are linked through their objects (the pop masks the
# item out of the top word, the push builds the new top word); free 52 and
# sized operator delete 58 since the object-start test is one
# multiplication and one comparison against a 16-byte entry per class;
# malloc 25, free 41, operator delete 41, sized operator delete 49,
# operator new 25 (both forms) since the inline sections read mm_cid at its
# place in the area with no restart loop (no ID-field offset, no `lea` of
# g_process), the size table holds 64-bit offsets, the object-start table
# is indexed with the class scaled by 8, class 0 fails the object-start
# test (no tag test of its own), the flag is tested before the mark is
# computed in its register, free's slow paths take only the pointer, and
# the span map adds 0 - base (no copy of the pointer to subtract from);
# free 40, sized operator delete 48 since the object-start bound is a
# 64-bit entry compared as a memory operand; malloc and operator new 24,
# sized operator delete 46 since sizes up to 1 KiB index the size table
# directly (no add and shift) and malloc's slow path takes only the stack
# offset (the size need not stay live); sized operator delete 40, free()'s
# path, since it ignores the size.  (Cpu mode's sections and, since
# 777ce5d, the node-qualified ones are placed after the ret: not counted.)
# Each budget allows a few more.
declare -A BUDGET=([malloc]=26 [free]=43 [_ZdlPv]=43 [_ZdlPvm]=43
  [_Znwm]=26 [_ZnwmRKSt9nothrow_t]=26)

die() {
  echo "fast_path_budget_test: $*" >&2
  exit 1
}

(($# >= 1)) || die "usage: $0 LIBCIDMALLOC_SO [FUNC=BUDGET ...]"
lib="$1"
shift
for kv in "$@"; do
  [[ "$kv" =~ ^([A-Za-z0-9_]+)=([0-9]+)$ ]] || die "bad override: $kv"
  BUDGET[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done
command -v objdump >/dev/null || die "objdump not found (install binutils)"

failed=0
for func in malloc free _Znwm _ZnwmRKSt9nothrow_t _ZdlPv _ZdlPvm; do
  # By address: objdump names an aliased function (malloc, __libc_malloc)
  # by whichever alias it likes.
  addr="$(nm -D --defined-only "$lib" | awk -v f="$func" '$3 == f {print $1}')"
  [[ -n "$addr" ]] || die "no function $func in $lib"
  body="$(objdump -d --no-show-raw-insn --start-address="0x$addr" \
    --stop-address="$(printf '0x%x' $((0x$addr + 4096)))" "$lib" |
    grep -E '^ +[0-9a-f]+:')" || die "objdump failed"
  # Instructions from entry through the first ret.
  path="$(awk '{print} /\tret/ {exit}' <<<"$body")"
  n=$(grep -c . <<<"$path")
  if grep -qE '\<(lock|xchg|cmpxchg|xadd|syscall|sysenter|int|call)\>' \
      <<<"$path"; then
    echo "FAIL $func: forbidden instruction on the fast path:"
    grep -E '\<(lock|xchg|cmpxchg|xadd|syscall|sysenter|int|call)\>' <<<"$path"
    failed=1
  fi
  if grep -qE '\<push|(sub|add)q? +\$0x[0-9a-f]+,%rsp' <<<"$path"; then
    echo "FAIL $func: a stack frame on the fast path:"
    grep -E '\<push|(sub|add)q? +\$0x[0-9a-f]+,%rsp' <<<"$path"
    failed=1
  fi
  if ((n > BUDGET[$func])); then
    echo "FAIL $func: $n instructions on the fast path, budget ${BUDGET[$func]}"
    echo "$path"
    failed=1
  else
    echo "ok   $func: $n instructions (budget ${BUDGET[$func]})"
  fi
done
exit "$failed"
