#!/usr/bin/env bash
# tests/allocator/knobs_documented_test.sh: every knob in the knob table
# (os::Knobs(), printed by :print_knobs) must appear in README.md, with its
# default value on the same line.
#
# Usage: knobs_documented_test.sh PRINT_KNOBS README
# Not wired into BUILD yet: Bazel can only hand README.md to a test once the
# root BUILD exports it (exports_files(["WORKSPACE", "README.md"])); then:
#   sh_test(
#       name = "knobs_documented_test",
#       srcs = ["knobs_documented_test.sh"],
#       args = ["$(location :print_knobs)", "$(location //:README.md)"],
#       data = [":print_knobs", "//:README.md"],
#   )
# Outside Bazel:
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
  line="$(grep -F -- "\`$name\`" "$readme" | head -n1 || true)"
  if [[ -z "$line" ]]; then
    echo "FAIL: $name is not documented in README.md"
    failed=1
    continue
  fi
  if [[ "$line" != *"$default"* ]]; then
    echo "FAIL: README.md's line for $name does not give its default ($default):"
    echo "  $line"
    failed=1
  fi
done <<<"$table"

if ((failed)); then
  exit 1
fi
echo "all $(wc -l <<<"$table") knobs are documented in README.md"
