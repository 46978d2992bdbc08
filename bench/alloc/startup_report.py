"""bench/alloc/startup_report.py: the tables of bench/alloc/startup.sh.

    python3 bench/alloc/startup_report.py OUT ROUNDS NAME...

Reads OUT/round.<r>.json (hyperfine --export-json, one per round, each with
every variant) and prints markdown: per variant the wall time over all runs
(mean ± sd, median, minimum) and the user+system CPU time per run (the mean
over the rounds of hyperfine's per-round means: hyperfine 1.15 exports no
per-run CPU times); then the differences that split cidmalloc's cost and
cidmalloc against jemalloc, mimalloc and tcmalloc.
"""
import json
import math
import os
import statistics
import sys

out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times = {n: [] for n in names}  # wall time of every run, s
cpu = {n: [] for n in names}    # user+system per run, one mean per round, s
for r in range(1, rounds + 1):
    with open(os.path.join(out, f"round.{r}.json")) as f:
        for res in json.load(f)["results"]:
            times[res["command"]].extend(res["times"])
            cpu[res["command"]].append(res["user"] + res["system"])

st = {}
for n in names:
    v = times[n]
    st[n] = {
        "mean": statistics.mean(v),
        "sd": statistics.stdev(v),
        "n": len(v),
        "median": statistics.median(v),
        "min": min(v),
        "cpu": statistics.mean(cpu[n]),
        # Standard error of the CPU mean, from the spread of the rounds.
        "cpu_se": (statistics.stdev(cpu[n]) / math.sqrt(len(cpu[n]))
                   if len(cpu[n]) > 1 else 0.0),
    }


def ms(x):
    return f"{x * 1e3:.3f}"


def signed(x):
    return f"{x * 1e3:+.3f}"


base = st[names[0]]
print()
print(f"`env [LD_PRELOAD=lib] /bin/true`, ms: wall time of {base['n']} runs per "
      f"variant ({rounds} interleaved hyperfine rounds); CPU = user+system per "
      f"run (mean of the per-round means)")
print()
print(f"| Variant | wall mean ± sd | wall median | wall min | CPU user+sys | "
      f"Δ wall median vs {names[0]} | Δ CPU vs {names[0]} |")
print("|---|---|---|---|---|---|---|")
for n in names:
    s = st[n]
    print(f"| {n} | {ms(s['mean'])} ± {ms(s['sd'])} | {ms(s['median'])} | "
          f"{ms(s['min'])} | {ms(s['cpu'])} | {signed(s['median'] - base['median'])} | "
          f"{signed(s['cpu'] - base['cpu'])} |")


def diff(a, b):
    x, y = st[a], st[b]
    # Standard error of the difference of the two wall means.
    se = math.sqrt(x["sd"] ** 2 / x["n"] + y["sd"] ** 2 / y["n"])
    cpu_se = math.sqrt(x["cpu_se"] ** 2 + y["cpu_se"] ** 2)
    return (f"{signed(x['mean'] - y['mean'])} ± {se * 1e3:.3f} | "
            f"{signed(x['median'] - y['median'])} | "
            f"{signed(x['cpu'] - y['cpu'])} ± {cpu_se * 1e3:.3f}")


rows = [
    ("loading an empty library (empty − none)", "empty", "none"),
    ("libstdc++ + libm (empty_stdcxx − empty)", "empty_stdcxx", "empty"),
    # libcidmalloc.so needs only libc (since 2026-11-30: its references to
    # libstdc++ are weak), as libempty.so does.
    ("cidmalloc's own code and init (cidmalloc − empty)", "cidmalloc", "empty"),
    ("libhwloc + libudev, no longer loaded by cidmalloc (empty_hwloc − empty_stdcxx)",
     "empty_hwloc", "empty_stdcxx"),
    ("jemalloc's own code and init (jemalloc − empty_stdcxx)", "jemalloc", "empty_stdcxx"),
    ("**cidmalloc − jemalloc**", "cidmalloc", "jemalloc"),
    ("cidmalloc − mimalloc", "cidmalloc", "mimalloc"),
    ("cidmalloc − tcmalloc", "cidmalloc", "tcmalloc"),
]
print()
print("Differences, ms: wall means and CPU times (± standard error of the "
      "difference; for CPU from the spread of the round means), wall medians")
print()
print("| What | wall mean | wall median | CPU user+sys |")
print("|---|---|---|---|")
for label, a, b in rows:
    if a in st and b in st:
        print(f"| {label} | {diff(a, b)} |")
print()
if "cidmalloc" in st and "jemalloc" in st:
    c, j = st["cidmalloc"], st["jemalloc"]
    se = {  # standard errors of the differences; none for medians
        "mean": math.sqrt(c["sd"] ** 2 / c["n"] + j["sd"] ** 2 / j["n"]),
        "cpu": math.sqrt(c["cpu_se"] ** 2 + j["cpu_se"] ** 2),
    }
    for key, label in (("mean", "wall means"), ("median", "wall medians"),
                       ("cpu", "CPU times")):
        d = c[key] - j[key]
        verdict = "met" if d <= 0 else "NOT met"
        if key in se and abs(d) < 2 * se[key]:
            verdict += (f" (difference {signed(d)} ms, standard error "
                        f"{se[key] * 1e3:.3f} ms: within 2 standard errors, "
                        f"not resolved)")
        print(f"cidmalloc / jemalloc ({label}): {c[key] / j[key]:.3f} — goal "
              f"(costs no more than jemalloc): {verdict}")
