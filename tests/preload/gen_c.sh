#!/usr/bin/env bash
# Prints a deterministic C program for the gcc check of tests/preload_test.sh:
# N (default 300) functions with loops, switches and string tables, and a
# main that prints a checksum of all of them. Big enough that cc1 allocates
# a lot (trees, RTL, hash tables), small enough to compile in about a second.
set -euo pipefail
n="${1:-300}"
cat <<'HEAD'
#include <stdio.h>
#include <string.h>
typedef unsigned long long u64;
HEAD
for ((i = 0; i < n; ++i)); do
  cat <<FN
static const char *names_${i}[] = {"alpha$i", "beta$((i * 7))", "gamma$((i * 13 % 101))", "delta"};
static u64 table_${i}[$((8 + i % 17))] = {$i, $((i * 3)), $((i * 5 + 1)), $((i ^ 0x5a))};
static u64 f_$i(u64 x) {
  u64 acc = ${i}ULL;
  for (int k = 0; k < $((3 + i % 5)); ++k) {
    switch ((x + k) % 4) {
      case 0: acc = acc * 31 + strlen(names_${i}[k % 4]); break;
      case 1: acc ^= table_${i}[k % (sizeof table_${i} / sizeof table_${i}[0])] << (k % 7); break;
      case 2: acc += (x >> (k % 11)) * $((i % 89 + 2)); break;
      default: acc = (acc << 5) | (acc >> 59); break;
    }
    table_${i}[(acc + k) % (sizeof table_${i} / sizeof table_${i}[0])] += acc & 0xff;
  }
  return acc ^ x;
}
FN
done
echo 'int main(void) {'
echo '  u64 h = 1469598103934665603ULL;'
for ((i = 0; i < n; ++i)); do
  echo "  h = (h ^ f_$i(h + $i)) * 1099511628211ULL;"
done
printf '%s\n' '  printf("checksum %016llx\n", h);'
echo '  return 0;'
echo '}'
