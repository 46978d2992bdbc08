#!/usr/bin/env bash
# tests/rseq_cs/fast_path_budget_test.sh: instruction budget of the per-ID
# fast paths (rseq/rseq.h, "Fast path budget").
#
#   fast_path_budget_test.sh PROBE [NAME=BUDGET ...]
#
# PROBE is //tests/rseq_cs:fast_path_probe.  Run, it prints each probe's
# critical section (start_ip, post-commit IP, abort IP; load-relative, so
# they match `objdump -d`).  For each probe this script disassembles the
# function and finds the fast path: the shortest control-flow path from the
# function's entry to the commit (the instruction that ends at the
# post-commit IP), then on from the post-commit IP to the first `ret`.  The
# slow-path tail calls (`jmp <...Slow...>`) and the abort path are not on it.
#
# It fails if
#   - entry..commit (inclusive) has more instructions than the budget;
#   - the path from entry to `ret` holds a lock prefix, xchg/cmpxchg/xadd,
#     syscall/sysenter/int, or a call;
#   - the critical section holds another number of stores than expected;
#   - the path cannot be traced, does not run through start_ip, the commit
#     is not a store to memory, or the instruction before start_ip is not
#     the store that arms rseq_cs (%fs:0x8(...)).
#
# NAME=BUDGET arguments override a budget (to see the test fail).
set -euo pipefail

# ---- Budgets: instructions from function entry through the commit --------
# Measured with GCC 12.2 -O2, Bazel's default flags (-fno-omit-frame-pointer
# -fstack-protector; the same counts without them), binutils 2.40:
#   probe_pop 20, probe_push 22, probe_counter_add 12
# (of which start_ip..commit: 14, 16, 6); the allocator's wide sections
# (PopUnchecked / PushUnchecked: the ID's low 16 bits, no bound check)
# probe_pop_wide 16, probe_push_wide 18 (12, 14).  Each budget allows two
# more.  (The stacks linked through their items, 1642954, added one to
# each pop, for the item mask, and two to each push, for the new top word.)
# The cid-mode inline sections (IdBound::kWideMmCid: mm_cid read through
# the area offset, no ID-field offset load, no restart loop)
# probe_pop_mm_cid 14, probe_push_mm_cid 16 (11, 13).  The node-qualified
# inline sections (rseq.h, PopQualifiedOnce: node_id and mm_cid, both
# bounds checked, node_id * cid_stride + mm_cid; the push compares node_id
# with its node) probe_pop_qualified 21, probe_push_qualified 25 (18, 22).
declare -A BUDGET=(
  [probe_pop]=22
  [probe_push]=24
  [probe_counter_add]=14
  [probe_pop_wide]=18
  [probe_push_wide]=20
  [probe_pop_mm_cid]=16
  [probe_push_mm_cid]=18
  [probe_pop_qualified]=23
  [probe_push_qualified]=27
)

# Stores to memory inside the critical section (start_ip..commit): the
# commit, plus for push the link written into the item (the caller's)
# (rseq/cs_x86_64_asm.h: "The only store to shared data in [4, 5) is the last
# instruction").
declare -A STORES=(
  [probe_pop]=1
  [probe_push]=2
  [probe_counter_add]=1
  [probe_pop_wide]=1
  [probe_push_wide]=2
  [probe_pop_mm_cid]=1
  [probe_push_mm_cid]=2
  [probe_pop_qualified]=1
  [probe_push_qualified]=2
)

die() {
  echo "fast_path_budget_test: $*" >&2
  exit 1
}

(($# >= 1)) || die "usage: $0 PROBE [NAME=BUDGET ...]"
probe="$1"
shift
for kv in "$@"; do
  [[ "$kv" =~ ^([A-Za-z_0-9]+)=([0-9]+)$ ]] || die "bad override: $kv"
  BUDGET[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done

[[ -x "$probe" ]] || die "not an executable: $probe"
command -v objdump >/dev/null || die "objdump not found (install binutils)"

tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/fast_path.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

"$probe" >"$tmp/sections" || die "$probe failed"
objdump -d --no-show-raw-insn "$probe" >"$tmp/disasm" ||
  die "objdump -d failed"

# trace_path FUNC START POST: reads the disassembly of FUNC on stdin and
# prints its fast path, one line per instruction:
#   ADDR <TAB> PART <TAB> FLAGS <TAB> INSTRUCTION
# PART is "pre" before start_ip, "cs" from start_ip through the commit and
# "post" after it, up to and including the ret.  FLAGS holds "S" for a store
# to memory, "F" for a forbidden instruction, "-" for neither.  Errors go to
# stderr; the exit status is then 1.
trace_path() {
  awk -v func_name="$1" -v start="$2" -v post="$3" '
    function err(msg) {
      print "ERROR: " func_name ": " msg >"/dev/stderr"
      bad = 1
    }
    function is_prefix(w) {
      return w ~ /^(lock|rep|repz|repe|repnz|repne|notrack|bnd|data16)$/ ||
             w ~ /^(addr32|cs|ds|es|ss|fs|gs|xacquire|xrelease|rex.*)$/
    }
    # The instruction text without the trailing "# ..." annotation.
    function bare(text) {
      sub(/[ \t]*#.*$/, "", text)
      return text
    }
    # The mnemonic, after any prefixes.
    function mnemonic(text,   w, n, i) {
      n = split(bare(text), w, /[ \t]+/)
      for (i = 1; i <= n; i++) if (w[i] != "" && !is_prefix(w[i])) return w[i]
      return ""
    }
    # The operands (everything after the mnemonic).
    function operands(text,   m) {
      text = bare(text)
      m = mnemonic(text)
      text = substr(text, index(text, m) + length(m))
      sub(/^[ \t]+/, "", text)
      return text
    }
    # The last top-level operand: the destination in AT&T syntax.
    function destination(ops,   i, c, depth, last) {
      depth = 0
      last = 0
      for (i = 1; i <= length(ops); i++) {
        c = substr(ops, i, 1)
        if (c == "(") depth++
        else if (c == ")") depth--
        else if (c == "," && depth == 0) last = i
      }
      return substr(ops, last + 1)
    }
    function is_store(text,   m) {
      m = mnemonic(text)
      if (m ~ /^(cmp|test|bt|j|call|push|nop)/) return 0
      return destination(operands(text)) ~ /\(/
    }
    function is_forbidden(text,   m) {
      m = mnemonic(text)
      return bare(text) ~ /(^|[ \t])lock[ \t]/ || m ~ /(xchg|xadd)/ ||
             m ~ /^(syscall|sysenter|int|int1|int3|into|call)/
    }
    # Breadth-first search from `from` to the first node that ends at the
    # post-commit IP (kind "commit") or is a ret (kind "ret"); fills
    # parent[] and returns the node, or "" if there is none.
    function bfs(from, kind,   head, tail, q, node, i, s) {
      split("", parent)
      split("", seen)
      head = tail = 1
      q[tail++] = from
      seen[from] = 1
      while (head < tail) {
        node = q[head++]
        if (kind == "commit" && next_addr[node] == post) return node
        if (kind == "ret" && is_ret[node]) return node
        for (i = 1; i <= nsucc[node]; i++) {
          s = succ[node, i]
          if (!(s in seen)) {
            seen[s] = 1
            parent[s] = node
            q[tail++] = s
          }
        }
      }
      return ""
    }
    # Appends the path from `from` to `to` (found by bfs) to path[].
    function collect(from, to,   n, node, rev, i) {
      n = 0
      for (node = to; ; node = parent[node]) {
        rev[++n] = node
        if (node == from) break
      }
      for (i = n; i >= 1; i--) path[++plen] = rev[i]
    }

    # "    29b0:<TAB>cmpb   $0x0,0x27e1(%rip)        # 5198 <...>"
    /^[ \t]+[0-9a-f]+:\t/ {
      split($0, f, "\t")
      addr = f[1]
      gsub(/[ :]/, "", addr)
      text = f[2]
      for (i = 3; i in f; i++) text = text "\t" f[i]
      if (text == "" || text ~ /^\(bad\)/) next
      order[++n] = addr
      insn[addr] = text
    }

    END {
      if (n == 0) {
        err("function not found in the disassembly")
        exit 1
      }
      for (i = 1; i <= n; i++) {
        next_addr[order[i]] = i < n ? order[i + 1] : ""
        infunc[order[i]] = 1
      }
      # Control flow inside the function.  A jmp out of it is a tail call.
      for (i = 1; i <= n; i++) {
        a = order[i]
        m = mnemonic(insn[a])
        split(operands(insn[a]), t, /[ \t]+/)
        target = t[1]
        nsucc[a] = 0
        if (m ~ /^ret/) {
          is_ret[a] = 1
        } else if (m ~ /^(jmp|ud2|hlt)/) {
          if (m ~ /^jmp/ && target in infunc) succ[a, ++nsucc[a]] = target
        } else {
          if (next_addr[a] != "") succ[a, ++nsucc[a]] = next_addr[a]
          if (m ~ /^(j|loop)/ && target in infunc)
            succ[a, ++nsucc[a]] = target
        }
      }

      entry = order[1]
      commit = bfs(entry, "commit")
      if (commit == "") {
        err("no path from the entry to the commit (post-commit IP " post ")")
        exit 1
      }
      plen = 0
      collect(entry, commit)
      ncommit = plen
      ret = bfs(post, "ret")
      if (ret == "") {
        err("no ret after the commit")
        exit 1
      }
      collect(post, ret)

      part = "pre"
      at_start = 0
      for (i = 1; i <= plen; i++) {
        a = path[i]
        if (a == start) {
          part = "cs"
          at_start = i
        }
        if (i == ncommit + 1) part = "post"
        flags = is_store(insn[a]) ? "S" : ""
        if (is_forbidden(insn[a])) flags = flags "F"
        print a "\t" part "\t" (flags == "" ? "-" : flags) "\t" insn[a]
      }
      if (!at_start) {
        err("the fast path does not run through start_ip " start)
      } else {
        arm = at_start > 1 ? insn[path[at_start - 1]] : "(none)"
        if (destination(operands(arm)) !~ /^%fs:0x8\(/)
          err("the instruction before start_ip does not arm rseq_cs: " arm)
      }
      if (!is_store(insn[commit]))
        err("the commit is not a store to memory: " insn[commit])
      exit bad
    }
  '
}

# lines PART FLAG FILE: the path lines of FILE in PART ("" for any) whose
# flags contain FLAG ("" for any).
lines() {
  awk -F'\t' -v part="$1" -v flag="$2" '
    (part == "" || $2 == part) && (flag == "" || index($3, flag)) { print }
  ' "$3"
}

failures=0
checked=0
while read -r name start post abort; do
  if [[ -z "${BUDGET[$name]:-}" ]]; then
    echo "FAIL: no budget for $name" >&2
    failures=$((failures + 1))
    continue
  fi
  checked=$((checked + 1))
  start="${start#0x}"
  post="${post#0x}"
  awk -v f="$name" \
    '$0 ~ "^[0-9a-f]+ <" f ">:$" { on = 1; next } on && /^$/ { exit } on' \
    "$tmp/disasm" >"$tmp/$name.s"
  if ! trace_path "$name" "$start" "$post" <"$tmp/$name.s" \
    >"$tmp/$name.path"; then
    echo "--- disassembly of $name ---" >&2
    cat "$tmp/$name.s" >&2
    failures=$((failures + 1))
    continue
  fi

  path="$tmp/$name.path"
  in_cs=$(lines cs "" "$path" | wc -l)
  to_commit=$(($(lines pre "" "$path" | wc -l) + in_cs))
  after=$(lines post "" "$path" | wc -l)
  stores=$(lines cs S "$path" | wc -l)
  budget=${BUDGET[$name]}

  echo "=== $name: critical section [0x$start, 0x$post), abort 0x${abort#0x}"
  awk -F'\t' '{ printf "  %-4s %-2s %8s  %s\n", $2, $3, $1, $4 }' "$path"
  echo "  entry..commit: $to_commit instructions (budget $budget);" \
    "start_ip..commit: $in_cs; after the commit up to ret: $after"

  if ((to_commit > budget)); then
    echo "FAIL: $name: $to_commit instructions from entry to the commit," \
      "budget $budget" >&2
    failures=$((failures + 1))
  fi
  if [[ -n "$(lines "" F "$path")" ]]; then
    echo "FAIL: $name: forbidden instructions on the fast path:" >&2
    lines "" F "$path" >&2
    failures=$((failures + 1))
  fi
  if ((stores != STORES[$name])); then
    echo "FAIL: $name: $stores stores in the critical section," \
      "expected ${STORES[$name]}:" >&2
    lines cs S "$path" >&2
    failures=$((failures + 1))
  fi
done <"$tmp/sections"

((checked == ${#BUDGET[@]})) ||
  die "expected ${#BUDGET[@]} probes, the probe binary reported $checked"
if ((failures != 0)); then
  echo "fast_path_budget_test: $failures failure(s)" >&2
  exit 1
fi
echo "fast_path_budget_test: all $checked probes within budget"
