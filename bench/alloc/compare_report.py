"""bench/alloc/compare_report.py: the tables of bench/alloc/compare.sh.

    python3 bench/alloc/compare_report.py OUT R ALLOCATOR...

Reads OUT/<allocator>.<run>.json (Google Benchmark JSON of
//bench/alloc:malloc_bench) and prints markdown: the median (or, with
STAT=min in the environment, the minimum) over the runs of
ns per malloc+free pair (cpu_time / pairs_per_iter) per allocator, the ratios
of cidmalloc to glibc and to the fastest of jemalloc / mimalloc / tcmalloc,
whether the goals hold, cidmalloc against "baseline" (an older build, see
compare.sh's BASELINE) when it was run, the spread of the runs, and geometric means over the
groups of rows (fixed-size pairs, random-size pairs, new+delete pairs of
fixed and of random sizes, batches).  When OUT/floor.<run>.json exist
(compare.sh's FLOOR=1: //bench:rseq_bench's BM_Stack rows, no allocator),
also the floor: what a bare pop+push costs, against glibc's fixed-size pair
and cidmalloc's.
"""
import json, math, statistics, sys, os

out, reps, allocs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# median: the typical run; min: the least disturbed one, which on a shared,
# noisy machine is the closer estimate of what the code costs.
STAT = os.environ.get("STAT", "median")
if STAT not in ("median", "min"):
    sys.exit(f"compare_report.py: STAT must be median or min, not {STAT!r}")
STATS = "medians" if STAT == "median" else "minima"
others = [a for a in ("jemalloc", "mimalloc", "tcmalloc") if a in allocs]
expect_from = {"glibc": "libc.so", "jemalloc": "jemalloc",
               "mimalloc": "mimalloc", "tcmalloc": "tcmalloc",
               "cidmalloc": "cidmalloc", "baseline": "cidmalloc"}

def iterations(d):
    """The benchmarks of a Google Benchmark JSON that ran: no aggregates, no
    errors."""
    for b in d["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b:
            continue
        yield b


def stat(v):
    return statistics.median(v) if STAT == "median" else min(v)


ns = {}      # (alloc, name) -> [ns per pair, one per run]
order = []   # benchmark names in run order
for a in allocs:
    for r in range(1, reps + 1):
        with open(os.path.join(out, f"{a}.{r}.json")) as f:
            d = json.load(f)
        ctx = d["context"]
        got = ctx.get("malloc_from", "?")
        if expect_from[a] not in got:
            print(f"WARNING: run {a}.{r}: malloc came from {got}", file=sys.stderr)
        if a == "cidmalloc" and r == 1:
            print(f"cidmalloc mode: {ctx.get('cidmalloc_mode', '?')}, "
                  f"registration: {ctx.get('cidmalloc_registration', '?')}",
                  file=sys.stderr)
        for b in iterations(d):
            assert b["time_unit"] == "ns", b["time_unit"]
            name = b["name"]
            if name not in order:
                order.append(name)
            pairs = b.get("pairs_per_iter", 1.0) or 1.0
            ns.setdefault((a, name), []).append(b["cpu_time"] / pairs)

def med(a, n):
    v = ns.get((a, n))
    return stat(v) if v else None

def fmt(x):
    if x is None:
        return "—"
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"

print()
print("ns per malloc+free pair (CPU time),", STAT, "of", reps,
      "interleaved runs")
print()
hdr = ["Benchmark"] + allocs
has_cmp = "cidmalloc" in allocs and "glibc" in allocs and others
has_base = "cidmalloc" in allocs and "baseline" in allocs
if has_cmp:
    hdr += ["cid/glibc", "cid/best other", "goals (≤0.5x glibc, ≤1x best)"]
if has_base:
    hdr += ["cid/baseline"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
met_glibc = met_best = rows = 0
for n in order:
    cells = [f"`{n}`"] + [fmt(med(a, n)) for a in allocs]
    if has_cmp:
        c, g = med("cidmalloc", n), med("glibc", n)
        best_a = min(others, key=lambda a: med(a, n) or float("inf"))
        b = med(best_a, n)
        rg, rb = c / g, c / b
        ok_g, ok_b = rg <= 0.5, rb <= 1.0
        rows += 1
        met_glibc += ok_g
        met_best += ok_b
        cells += [f"{rg:.2f}", f"{rb:.2f} ({best_a})",
                  ("met" if ok_g else "NOT met") + " / " +
                  ("met" if ok_b else "NOT met")]
    if has_base:
        cells.append(f"{med('cidmalloc', n) / med('baseline', n):.2f}")
    print("| " + " | ".join(cells) + " |")
if has_cmp:
    print()
    print(f"cidmalloc <= 0.5x glibc: {met_glibc}/{rows} rows; "
          f"cidmalloc <= fastest other: {met_best}/{rows} rows")

print()
print("Spread: lowest–highest of the", reps, "runs, ns per pair")
print()
print("| Benchmark | " + " | ".join(allocs) + " |")
print("|" + "---|" * (len(allocs) + 1))
for n in order:
    cells = [f"`{n}`"]
    for a in allocs:
        v = ns.get((a, n))
        cells.append(f"{fmt(min(v))}–{fmt(max(v))}" if v else "—")
    print("| " + " | ".join(cells) + " |")

# Geometric means of the medians (minima) over groups of rows (fixed-size pairs,
# random-size pairs, new+delete pairs of fixed and of random sizes, batches,
# many objects of one class in flight):
# the summary docs/benchmarks.md quotes.
groups = [("fixed-size pairs", lambda n: n.startswith("BM_Pair/")),
          ("random-size pairs", lambda n: n.startswith("BM_PairRandom")),
          ("new+delete pairs", lambda n: n.startswith("BM_NewDelete/")),
          ("random-size new+delete pairs",
           lambda n: n.startswith("BM_NewDeleteRandom")),
          ("batches", lambda n: n.startswith("BM_Batch")),
          ("many in flight", lambda n: n.startswith("BM_ManyInFlight")),
          ("aligned pairs", lambda n: n.startswith("BM_AlignedPair")),
          ("large pairs", lambda n: n.startswith("BM_LargePair")),
          ("huge buffers", lambda n: n.startswith("BM_HugeBuffer"))]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


print()
print(f"Geometric means of the {STATS}, ns per pair")
print()
hdr = ["Rows"] + allocs
if has_cmp:
    hdr += ["cid/glibc", "cid/best other"]
if has_base:
    hdr += ["cid/baseline"]
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for label, pick in groups:
    names = [n for n in order if pick(n)]
    if not names:
        continue
    cells = [f"{len(names)} {label}"]
    for a in allocs:
        v = [med(a, n) for n in names]
        cells.append(fmt(geomean(v)) if all(v) else "—")
    if has_cmp:
        cells.append(f"{geomean([med('cidmalloc', n) / med('glibc', n) for n in names]):.2f}")
        cells.append(f"{geomean([med('cidmalloc', n) / min(med(a, n) for a in others) for n in names]):.2f}")
    if has_base:
        cells.append(f"{geomean([med('cidmalloc', n) / med('baseline', n) for n in names]):.2f}")
    print("| " + " | ".join(cells) + " |")


# The floor: a pop and a push with no allocator around them (rseq_bench's
# BM_Stack rows, noinline like malloc and free), against the fixed-size
# pairs of the same thread count.  The goal of 0.5x glibc cannot be met by
# a pair that costs more than the floor plus the allocator's own work.
floor = {}   # name -> [ns per pop+push, one per run]
for r in range(1, reps + 1):
    path = os.path.join(out, f"floor.{r}.json")
    if not os.path.exists(path):
        continue
    with open(path) as f:
        d = json.load(f)
    for b in iterations(d):
        floor.setdefault(b["name"], []).append(b["cpu_time"])


def pair_geomean(a, threads):
    names = [n for n in order
             if n.startswith("BM_Pair/") and n.endswith(f"/threads:{threads}")]
    v = [med(a, n) for n in names]
    return geomean(v) if names and all(v) else None


if floor:
    print()
    print(f"Floor: a bare pop+push with no allocator (//bench:rseq_bench, no "
          f"preload), {STAT} of the runs, against the geometric mean of the "
          f"fixed-size pairs with as many threads")
    print()
    cols = [a for a in ("glibc", "cidmalloc") if a in allocs]
    hdr = ["Benchmark", "ns"] + [f"x {a}" for a in cols]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for name, v in floor.items():
        threads = name.rsplit(":", 1)[-1] if "threads:" in name else "1"
        cells = [f"`{name}`", fmt(stat(v))]
        for a in cols:
            g = pair_geomean(a, threads)
            cells.append(f"{stat(v) / g:.2f}" if g else "—")
        print("| " + " | ".join(cells) + " |")
