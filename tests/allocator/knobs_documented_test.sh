#!/usr/bin/env bash
# tests/allocator/knobs_documented_test.sh: every knob in the knob table
# (os::Knobs(), printed by :print_knobs) must have a row in README.md's
# knob table (a line that starts "| `NAME` |"), whose third cell is its
# default value.  Other lines may mention a knob freely.
#
# Usage: knobs_documented_test.sh PRINT_KNOBS README
# Run by //tests/allocator:knobs_documented_test; outside Bazel:
#   tests/allocator/knobs_documented_test.sh bazel-bin/tests/allocator/print_knobs README.md
set -euo pipefail

print_knobs="$1"
readme="$2"
[[ -x "$print_knobs" ]] || { echo "not executable: $print_knobs" >&2; exit 2; }
[[ -r "$readme" ]] || { echo "not readable: $readme" >&2; exit 2; }

table="$("$print_knobs")"
[[ -n "$table" ]] || { echo "empty knob table" >&2; exit 1; }

failed=0
while IFS=$'\t' read -r name values default help; do
  # The knob's row in the README's table: the line that starts with it.
  line="$(grep -F -- "| \`$name\` |" "$readme" | head -n1 || true)"
  if [[ -z "$line" ]]; then
    echo "FAIL: $name has no row in README.md's knob table"
    failed=1
    continue
  fi
  # The third cell, without backquotes, is the default.
  cell="$(awk -F' [|] ' '{ print $3 }' <<<"$line" | tr -d '`')"
  if [[ "$cell" != "$default" ]]; then
    echo "FAIL: README.md's row for $name gives the default '$cell', not '$default':"
    echo "  $line"
    failed=1
  fi
done <<<"$table"

if ((failed)); then
  exit 1
fi
echo "all $(wc -l <<<"$table") knobs are documented in README.md"
