#!/usr/bin/python3
"""Side-by-side A/B of malloc_bench under several allocator libraries.

  bench/alloc/ab_libs.py [--per-row] N FILTER name=/abs/lib.so[,VAR=VALUE...]
      [...]

Runs bazel-bin/bench/alloc/malloc_bench (build it with -c opt first) under
each library in turn (LD_PRELOAD; the name glibc=glibc means no preload), N
rounds, interleaved so that a shared machine's drift hits every library
alike, with --benchmark_filter=FILTER and --benchmark_min_time=0.05.
Prints a markdown table of each row's minimum ns per malloc+free pair
(CPU time / pairs_per_iter) and its ratio to the first library's, and the
geometric mean of those ratios.  Lighter than compare.sh (which also runs
the four other allocators and the rseq floor) when only two builds of
cidmalloc are compared.  Library paths must be absolute.  VAR=VALUE
pairs after a library set environment variables for its runs only, e.g.
q=/tmp/a.so,CIDMALLOC_RSEQ_NODE_IDS=on beside a=/tmp/a.so compares one
build with and without a knob.  A library given as bin:/abs/binary runs
that binary (a build of malloc_bench with an allocator linked in, e.g.
bazel-bin/bench/alloc/malloc_bench_cidmalloc) with no preload instead.

Each round runs the libraries in a rotated order (the first library is not
always the one after the last).  --per-row runs every row in a process of
its own, all libraries one after the other for that row before the next
row: on a host whose speed changes for seconds at a time (this one: pairs
of every allocator at about 6.7 ns or about 10 ns, taking turns), the
libraries of a row then meet the same speed within about a second, where
a whole pass of the filter takes several; and no row runs after another
row's threads.  Slower (a process start per row and library).
"""
import collections
import json
import math
import os
import re
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                     'bazel-bin', 'bench', 'alloc', 'malloc_bench')


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    args = sys.argv[1:]
    per_row = args[0] == '--per-row'
    if per_row:
        args = args[1:]
    rounds, flt = int(args[0]), args[1]
    libs = []
    for arg in args[2:]:
        name, spec = arg.split('=', 1)
        lib, *assignments = spec.split(',')
        libs.append((name, lib, dict(a.split('=', 1) for a in assignments)))
    best = collections.defaultdict(dict)
    rows = []
    def run(lib_spec, row_filter):
        name, lib, extra_env = lib_spec
        env = dict(os.environ)
        env.update(extra_env)
        binary = BENCH
        if lib.startswith('bin:'):
            binary = lib[len('bin:'):]
        elif lib != 'glibc':
            env['LD_PRELOAD'] = lib
        out = subprocess.run(
            [binary, '--benchmark_filter=' + row_filter,
             '--benchmark_min_time=0.05', '--benchmark_format=json'],
            env=env, capture_output=True, text=True, check=True).stdout
        for b in json.loads(out)['benchmarks']:
            ns = b['cpu_time'] / b.get('pairs_per_iter', 1)
            if b['name'] not in rows:
                rows.append(b['name'])
            old = best[b['name']].get(name, float('inf'))
            best[b['name']][name] = min(old, ns)

    # The rows, in the benchmark's order, for --per-row.
    listed = subprocess.run(
        [BENCH, '--benchmark_filter=' + flt, '--benchmark_list_tests'],
        capture_output=True, text=True, check=True).stdout.split()
    for i in range(rounds):
        order = libs[i % len(libs):] + libs[:i % len(libs)]
        if not per_row:
            for spec in order:
                run(spec, flt)
            continue
        for row in listed:
            for spec in order:
                run(spec, '^' + re.escape(row) + '$')
    names = [n for n, _, _ in libs]
    first = names[0]
    print('| row | ' + ' | '.join(names) + ' | ' +
          ' | '.join(n + '/' + first for n in names[1:]) + ' |')
    print('|---' * (2 * len(names)) + '|')
    logs = collections.defaultdict(list)
    for r in rows:
        ratios = []
        for n in names[1:]:
            ratio = best[r][n] / best[r][first]
            logs[n].append(math.log(ratio))
            ratios.append('%.3f' % ratio)
        print('| %s | %s | %s |' % (
            r, ' | '.join('%.2f' % best[r][n] for n in names),
            ' | '.join(ratios)))
    print('geometric mean of the ratios: ' + ', '.join(
        '%s %.3f' % (n, math.exp(sum(logs[n]) / len(logs[n])))
        for n in names[1:]))


if __name__ == '__main__':
    main()
