#!/usr/bin/python3
"""Side-by-side A/B of malloc_bench under several allocator libraries.

  bench/alloc/ab_libs.py N FILTER name=/abs/lib.so[,VAR=VALUE...] [...]

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
build with and without a knob.
"""
import collections
import json
import math
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..',
                     'bazel-bin', 'bench', 'alloc', 'malloc_bench')


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, flt = int(sys.argv[1]), sys.argv[2]
    libs = []
    for arg in sys.argv[3:]:
        name, spec = arg.split('=', 1)
        lib, *assignments = spec.split(',')
        libs.append((name, lib, dict(a.split('=', 1) for a in assignments)))
    best = collections.defaultdict(dict)
    rows = []
    for _ in range(rounds):
        for name, lib, extra_env in libs:
            env = dict(os.environ)
            env.update(extra_env)
            if lib != 'glibc':
                env['LD_PRELOAD'] = lib
            out = subprocess.run(
                [BENCH, '--benchmark_filter=' + flt,
                 '--benchmark_min_time=0.05', '--benchmark_format=json'],
                env=env, capture_output=True, text=True, check=True).stdout
            for b in json.loads(out)['benchmarks']:
                ns = b['cpu_time'] / b.get('pairs_per_iter', 1)
                if b['name'] not in rows:
                    rows.append(b['name'])
                old = best[b['name']].get(name, float('inf'))
                best[b['name']][name] = min(old, ns)
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
