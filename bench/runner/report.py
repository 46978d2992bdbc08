"""The tables of ./cidmalloc bench: markdown for stdout and latest.md.

Input: the results dict bench.py writes to latest.json ("info",
"allocators", "workloads", "runs", "stats").  Per workload and allocator:
the median and lowest-highest of wall time and of peak RSS over the runs,
the ratio of the medians to glibc's, and per allocator the geometric mean
of the ratios (over the rows where every allocator has results).
"""
import math
import statistics

BASELINE = "glibc"
BUSY_MARK = "†"


def summarize(data):
    """(workload, allocator) -> {"status", "reason", "wall", "rss", "busy",
    "metrics": {key: [values]}} over the runs of that pair."""
    out = {}
    for w in data["workloads"]:
        for a in data["allocators"]:
            out[(w["name"], a)] = {"status": "not run", "reason": "",
                                   "wall": [], "rss": [], "busy": 0,
                                   "metrics": {}}
    for r in data["runs"]:
        s = out.get((r["workload"], r["allocator"]))
        if s is None:
            continue
        if r["status"] == "failed":
            s["status"], s["reason"] = "failed", r["reason"]
        elif r["status"] == "skipped":
            if s["status"] != "failed":
                s["status"], s["reason"] = "skipped", r["reason"]
        else:
            if s["status"] == "not run":
                s["status"] = "ok"
            s["wall"].append(r["wall_s"])
            s["rss"].append(r["maxrss_kb"] / 1024)
            s["busy"] += bool(r["busy"])
            for k, v in r["metrics"].items():
                if isinstance(v, (int, float)):
                    s["metrics"].setdefault(k, []).append(v)
    return out


def num(x):
    """A number with 3 significant figures, at most 3 decimals."""
    if x is None:
        return "—"
    ax = abs(x)
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _ok(summary, w, a, key):
    s = summary.get((w, a))  # None: allocator a was not run (--allocators)
    return s is not None and s["status"] == "ok" and bool(s[key])


def ratio(summary, w, a, key):
    """median(a) / median(glibc) for key "wall" or "rss", or None."""
    if not (_ok(summary, w, a, key) and _ok(summary, w, BASELINE, key)):
        return None
    base = statistics.median(summary[(w, BASELINE)][key])
    return statistics.median(summary[(w, a)][key]) / base if base > 0 else None


def _cell(summary, w, a, key, has_base):
    s = summary[(w, a)]
    if s["status"] == "failed":
        return "FAILED"
    if s["status"] in ("skipped", "not run"):
        return s["status"]
    v = s[key]
    text = num(statistics.median(v))
    if len(v) > 1:
        text += f" [{num(min(v))}–{num(max(v))}]"
    r = ratio(summary, w, a, key)
    if a != BASELINE and has_base:
        text = (f"{r:.2f}x · " if r is not None else "—x · ") + text
    if s["busy"]:
        text += f" {BUSY_MARK}"
    return text


def table(data, summary, key, title):
    """Markdown lines: one row per workload, one column per allocator."""
    allocs = data["allocators"]
    has_base = BASELINE in allocs
    names = [w["name"] for w in data["workloads"]]
    lines = [f"### {title}", "",
             "| workload | " + " | ".join(allocs) + " |",
             "|---|" + "---|" * len(allocs)]
    for w in names:
        lines.append(f"| {w} | " + " | ".join(
            _cell(summary, w, a, key, has_base) for a in allocs) + " |")
    complete = [w for w in names if all(_ok(summary, w, a, key) for a in allocs)]
    if complete:
        cells = []
        for a in allocs:
            g = geomean([statistics.median(summary[(w, a)][key]) for w in complete])
            r = geomean([ratio(summary, w, a, key) for w in complete]) if has_base else None
            cells.append((f"{r:.2f}x · " if r and a != BASELINE else "") + num(g))
        lines.append(f"| geometric mean ({len(complete)} rows) | "
                     + " | ".join(cells) + " |")
    return lines


def highlight_tables(data, summary, highlight):
    """Extra metrics worth a table of their own (e.g. fragmentation's RSS at
    the end), in MiB when the key ends in _kb, with the ratio to glibc."""
    lines = []
    allocs = data["allocators"]
    names = {w["name"] for w in data["workloads"]}
    for w, keys in highlight.items():
        if w not in names:
            continue
        for key in keys:
            kb = key.endswith("_kb")
            label = key[:-3] + " (MiB)" if kb else key
            base = _metric_median(summary, w, BASELINE, key)
            cells = []
            for a in allocs:
                m = _metric_median(summary, w, a, key)
                if m is None:
                    cells.append(summary[(w, a)]["status"]
                                 if summary[(w, a)]["status"] != "ok" else "—")
                    continue
                text = num(m / 1024 if kb else m)
                if a != BASELINE and base:
                    text = f"{m / base:.2f}x · " + text
                cells.append(text)
            lines += [f"### {w}: {label}, median", "",
                      "| metric | " + " | ".join(allocs) + " |",
                      "|---|" + "---|" * len(allocs),
                      f"| {label} | " + " | ".join(cells) + " |", ""]
    return lines


def _metric_median(summary, w, a, key):
    s = summary.get((w, a))  # None: allocator a was not run (--allocators)
    if s is None:
        return None
    v = s["metrics"].get(key)
    return statistics.median(v) if s["status"] == "ok" and v else None


def metrics_tables(data, summary):
    """Every workload's extra metrics: medians per allocator."""
    lines = []
    allocs = data["allocators"]
    for w in data["workloads"]:
        keys = []
        for a in allocs:
            for k in summary[(w["name"], a)]["metrics"]:
                if k not in keys:
                    keys.append(k)
        if not keys:
            continue
        lines += [f"**{w['name']}**", "",
                  "| metric | " + " | ".join(allocs) + " |",
                  "|---|" + "---|" * len(allocs)]
        for k in keys:
            cells = []
            for a in allocs:
                m = _metric_median(summary, w["name"], a, k)
                cells.append("—" if m is None else
                             (f"{m:.0f}" if m == int(m) and abs(m) < 1e15 else f"{m:.4g}"))
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def notes(data, summary):
    """Busy runs, skipped and failed pairs, as markdown lines."""
    lines = []
    busy = [r for r in data["runs"] if r["busy"]]
    frac = data["info"].get("busy fraction", 0.1)
    if busy:
        lines += [f"{BUSY_MARK} The machine was busy during {len(busy)} of "
                  f"{len(data['runs'])} runs (others used more than "
                  f"{frac:.0%} of one CPU):", ""]
        for r in busy:
            lines.append(f"- {r['workload']} / {r['allocator']}, run {r['round']}: "
                         f"others used {r['others_cpu_s']:.2f} s of CPU in "
                         f"{r['wall_s']:.2f} s ({r['others_cpu_s'] / r['wall_s']:.0%} "
                         f"of one CPU)")
        lines.append("")
    else:
        lines += [f"No run was disturbed: others never used more than "
                  f"{frac:.0%} of one CPU during a run.", ""]
    for status in ("skipped", "failed"):
        pairs = [(w, a, s) for (w, a), s in summary.items() if s["status"] == status]
        if not pairs:
            continue
        lines += [f"{status.capitalize()}:", ""]
        for w, a, s in pairs:
            lines.append(f"- {w} / {a}: {s['reason']}")
        lines.append("")
    failed = [r for r in data["runs"] if r["status"] == "failed"]
    if data.get("stats") and data["stats"]["status"] == "failed":
        failed.append(data["stats"])
    for r in failed:
        lines += [f"{r['workload']} / {r['allocator']} run {r['round']}: "
                  f"{r['reason']}; command: `{r.get('command', '?')}`", ""]
        if r.get("stderr_tail"):
            lines += ["```", r["stderr_tail"], "```", ""]
    return lines


def stats_section(data):
    st = data.get("stats")
    if not st:
        return []
    lines = [f"### {st['workload']} under cidmalloc with CIDMALLOC_STATS=1", "",
             f"One more run, not part of the tables: `{st['command']}` "
             f"({st['status']}{', ' + st['reason'] if st['reason'] else ''}).",
             "", "```"]
    lines += st.get("excerpt") or ["(no cidmalloc: lines on stderr)"]
    if st.get("ok_line"):
        lines.append(st["ok_line"])
    lines += ["```", ""]
    return lines


def stdout_text(data):
    s = summarize(data)
    info = data["info"]
    n = info["runs per allocator"]
    how = f"median [lowest–highest] of {n} runs" if n > 1 else "one run"
    lines = ["", f"## ./cidmalloc bench: {info['mode']}, {n} run(s) per allocator",
             ""]
    lines += table(data, s, "wall", f"Wall time (s), {how}; ratio to glibc")
    lines.append("")
    lines += table(data, s, "rss", f"Peak RSS (MiB), {how}; ratio to glibc")
    lines.append("")
    lines += highlight_tables(data, s, data.get("highlight", {}))
    lines += stats_section(data)
    lines += notes(data, s)
    return "\n".join(lines)


def markdown(data, plot_name):
    s = summarize(data)
    info = data["info"]
    n = info["runs per allocator"]
    how = f"median [lowest–highest] of {n} runs" if n > 1 else "one run"
    lines = ["# ./cidmalloc bench: latest results", "",
             "Written by `./cidmalloc bench` (bench/runner/); "
             "[docs/benchmarks/runner.md](runner.md) "
             "describes the runner.", ""]
    for key in ("date", "command", "mode", "runs per allocator", "sizes",
                "machine", "kernel", "os", "glibc", "transparent hugepages",
                "commit", "cidmalloc mode", "programs",
                "allocator environment", "load before", "load after",
                "duration", "busy threshold"):
        if key in info:
            value = info[key]
            if key == "command":
                value = f"`{value}`"
            lines.append(f"- **{key}**: {value}")
    lines.append("- **allocators**:")
    lines += [f"  - {x}" for x in info.get("allocators", [])]
    lines += ["", "Order: every round runs every workload under every "
              "allocator in turn (" + " ".join(data["allocators"]) + "), so "
              "drift on a shared machine hits all alike.  Wall time from "
              "fork to wait4; peak RSS is wait4's ru_maxrss (it includes "
              "reaped children, e.g. gcc's cc1).  Cells: " + how +
              "; \"0.95x ·\" is the ratio of the medians to glibc's; "
              f"{BUSY_MARK} marks a cell with a busy run.", ""]
    lines += table(data, s, "wall", "Wall time (s)")
    lines.append("")
    lines += table(data, s, "rss", "Peak RSS (MiB)")
    lines.append("")
    if plot_name:
        lines += [f"![time and RSS ratios to glibc]({plot_name})", ""]
    lines += highlight_tables(data, s, data.get("highlight", {}))
    lines += stats_section(data)
    lines += ["### Notes", ""] + notes(data, s)
    lines += ["### Workloads", "", "| workload | command | what |", "|---|---|---|"]
    for w in data["workloads"]:
        lines.append(f"| {w['name']} | `{w['command']}` | {w['description']} |")
    lines.append("")
    extra = metrics_tables(data, s)
    if extra:
        lines += ["### Extra metrics (median per allocator)", "",
                  "Printed by the workloads as `metric key=value` lines.", ""]
        lines += extra
    return "\n".join(lines).rstrip("\n") + "\n"


def plot_rows(data):
    """[(workload, {allocator: (time ratio, rss ratio)})] for the plot."""
    s = summarize(data)
    rows = []
    for w in data["workloads"]:
        rows.append((w["name"], {a: (ratio(s, w["name"], a, "wall"),
                                     ratio(s, w["name"], a, "rss"))
                                 for a in data["allocators"] if a != BASELINE}))
    return rows


def counts(data):
    """(ok, skipped, failed) over all runs, the stats run included."""
    runs = list(data["runs"]) + ([data["stats"]] if data.get("stats") else [])
    return tuple(sum(r["status"] == st for r in runs)
                 for st in ("ok", "skipped", "failed"))
