#!/usr/bin/env python3
"""bench/runner/bench.py: the runner of `./cidmalloc bench` (issue 4).

Runs every workload (bench/workloads binaries and real programs: python3,
gcc, sqlite3) under glibc (no preload), jemalloc, mimalloc, tcmalloc (Debian
libraries) and cidmalloc (LD_PRELOAD), interleaved: every round runs every
workload under every allocator in turn.  Reports per workload and allocator
the median and lowest-highest wall time and peak RSS, their ratio to glibc
and the geometric means; flags runs during which other processes used the
machine; writes latest.md, latest.json and latest.svg.

./cidmalloc bench builds //:libcidmalloc.so, //bench/workloads:all and
//bench/runner:measure and then runs this with --bazel-bin; see --help and
docs/benchmarks/runner.md.  Python 3 standard library only.
"""
import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402
import plot  # noqa: E402
import programs  # noqa: E402
import report  # noqa: E402
import runs  # noqa: E402
import workloads  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS_OUT = os.path.join(ROOT, "docs", "benchmarks")
TIMEOUT = {"full": 300.0, "quick": 60.0}
DEFAULT_RUNS = 5


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="./cidmalloc bench",
        description="Run the workloads of issue 4 under glibc, jemalloc, "
        "mimalloc, tcmalloc and cidmalloc; print markdown tables (time and "
        "peak RSS, ratios to glibc) and write latest.md, latest.json and "
        "latest.svg.")
    p.add_argument("--quick", action="store_true",
                   help="small sizes, one run each: checks that every workload "
                   "completes under every allocator; asserts no speed; writes "
                   "to a new temporary directory unless --out is given")
    p.add_argument("--only", metavar="W1,W2",
                   help="workloads or groups (micro, handoff, programs) to run; "
                   "see --list")
    p.add_argument("--runs", type=int, metavar="N",
                   help=f"runs per workload and allocator (default {DEFAULT_RUNS}, "
                   "--quick: 1)")
    p.add_argument("--allocators", metavar="A,B",
                   help="subset and order (default: " + ",".join(workloads.ALLOCATORS) + ")")
    p.add_argument("--previous-lib", metavar="SO",
                   help="an older libcidmalloc.so, run as allocator "
                   "'previous' next to the others (a change measured side by "
                   "side; the report shows it like any allocator)")
    p.add_argument("--out", metavar="DIR",
                   help="where latest.md/.json/.svg go (default: docs/benchmarks/, "
                   "--quick: a new directory under $TMPDIR)")
    p.add_argument("--bazel-bin", metavar="DIR",
                   help="Bazel's output directory holding libcidmalloc.so, "
                   "bench/workloads/ and bench/runner/measure (default: "
                   "$CIDMALLOC_BENCH_BAZEL_BIN, else <repo>/bazel-bin)")
    p.add_argument("--timeout", type=float, metavar="SECS",
                   help="per run (default 300, --quick: 60); a run that takes "
                   "longer is killed and counts as failed")
    p.add_argument("--busy-threshold", type=float, default=runs.BUSY_FRACTION,
                   metavar="FRACTION",
                   help="flag a run as busy when other processes used more than "
                   "this fraction of one CPU during it (default %(default)s)")
    p.add_argument("--keep-work", action="store_true",
                   help="keep the work directory (binaries, inputs, logs)")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--report", metavar="JSON",
                   help="do not run: rewrite latest.md and latest.svg (in --out, "
                   "default the JSON's directory) from a latest.json")
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def write_outputs(data, outdir):
    """latest.json, latest.svg and latest.md in outdir; prints the tables."""
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "latest.json"), "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    others = [a for a in data["allocators"] if a != report.BASELINE]
    svg = os.path.join(outdir, "latest.svg")
    n = data["info"]["runs per allocator"]
    why = "no glibc column" if report.BASELINE not in data["allocators"] else \
        plot.write(report.plot_rows(data), others, svg,
                   f"cidmalloc bench {data['info']['date']}: ratio to glibc ("
                   + (f"median of {n} runs)" if n > 1 else "one run)"))
    if why:
        log(f"bench: no plot: {why}")
    with open(os.path.join(outdir, "latest.md"), "w") as f:
        f.write(report.markdown(data, "" if why else "latest.svg"))
    print(report.stdout_text(data), flush=True)


class Bench:
    def __init__(self, args):
        self.args = args
        self.size = "quick" if args.quick else "full"
        self.nruns = args.runs or (1 if args.quick else DEFAULT_RUNS)
        self.timeout = args.timeout or TIMEOUT[self.size]
        self.selected = workloads.select(args.only)
        if args.previous_lib:
            workloads.ALLOCATORS["previous"] = (os.path.abspath(args.previous_lib), "")
        names = args.allocators.split(",") if args.allocators else list(workloads.ALLOCATORS)
        for a in names:
            if a not in workloads.ALLOCATORS:
                raise ValueError(f"unknown allocator {a!r}; known: "
                                 + ", ".join(workloads.ALLOCATORS))
        self.allocs = names
        self.bindir = (args.bazel_bin or os.environ.get("CIDMALLOC_BENCH_BAZEL_BIN")
                       or os.path.join(ROOT, "bazel-bin"))
        self.work = tempfile.mkdtemp(prefix="cidmalloc-bench.")

    # --- set-up ------------------------------------------------------------

    def check_inputs(self):
        """Copies the built files into the work directory (a rebuild in the
        shared workspace cannot swap them mid-run); returns missing files."""
        missing = []
        bin_copy = os.path.join(self.work, "bin")
        os.makedirs(bin_copy)
        wanted = {"measure": os.path.join(self.bindir, "bench", "runner", "measure")}
        if "cidmalloc" in self.allocs:
            wanted["libcidmalloc.so"] = os.path.join(self.bindir, "libcidmalloc.so")
        for w in self.selected:
            if w.binary:
                wanted[w.binary] = workloads.binary_path(self.bindir, w)
        self.files = {}
        self.display = {}  # copy -> how the report shows it
        for name, src in wanted.items():
            if not os.path.isfile(src):
                missing.append(src)
                continue
            dst = os.path.join(bin_copy, name)
            shutil.copy2(src, dst)
            self.files[name] = dst
            self.display[dst] = "bazel-bin/" + os.path.relpath(src, self.bindir)
        for a in self.allocs:
            lib = workloads.ALLOCATORS[a][0]
            if lib.startswith("/") and not os.path.isfile(lib):
                missing.append(f"{lib} ({workloads.ALLOCATORS[a][1]}; "
                               "./cidmalloc setup installs it)")
        need = {"python": programs.PYTHON, "gcc": programs.GCC,
                "sqlite": programs.SQLITE, "redis": programs.REDIS}
        for w in self.selected:
            if not w.binary and not shutil.which(need[w.name]):
                missing.append(f"{need[w.name]} (for the {w.name} row)")
        return missing

    def lib_of(self, alloc):
        lib = workloads.ALLOCATORS[alloc][0]
        return self.files.get(lib, "") if lib and not lib.startswith("/") else lib

    def prepare(self):
        self.prog = {}
        pdir = os.path.join(self.work, "programs")
        os.makedirs(pdir)
        for w in self.selected:
            if not w.binary:
                log(f"bench: preparing {w.name} input ({self.size} size)")
                self.prog[w.name] = programs.PROGRAMS[w.name][0](pdir, self.size)
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "CIDMALLOC_STATS")
               and not k.startswith("PYTHON")}
        env["LC_ALL"] = "C"
        self.env = env
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs)

    def command(self, w):
        """(argv, environment for the command only) of one workload run."""
        if w.binary:
            argv = [self.files[w.binary], *w.args]
            if self.size == "quick":
                argv.append("--quick")
            return argv, {}
        ctx = self.prog[w.name]
        return list(ctx["argv"]), dict(ctx["env"])

    def shown(self, argv, setenv=None):
        """A command as the report shows it: the built files as bazel-bin/...,
        generated inputs as <work>/..."""
        def fix(word):
            for copy, name in self.display.items():
                word = word.replace(copy, name)
            return shlex.quote(word.replace(self.work + "/", "<work>/"))
        words = [fix(f"{k}={v}") for k, v in (setenv or {}).items()]
        return " ".join(words + [fix(a) for a in argv])

    # --- one run -------------------------------------------------------------

    def one(self, w, alloc, rnd, extra_env=None):
        argv, setenv = self.command(w)
        lib = self.lib_of(alloc)
        if lib:
            setenv["LD_PRELOAD"] = lib
        setenv.update(extra_env or {})
        if not w.binary and programs.PROGRAMS[w.name][1]:
            programs.PROGRAMS[w.name][1](self.prog[w.name])
        r = runs.run(self.files["measure"], argv, self.env, setenv, self.work,
                     self.timeout, self.args.busy_threshold)
        rec = {"workload": w.name, "allocator": alloc, "round": rnd,
               "status": "failed", "reason": "", "wall_s": r["wall_s"],
               "maxrss_kb": r["maxrss_kb"], "cpu_s": r["cpu_s"],
               "others_cpu_s": r["others_cpu_s"], "busy": r["busy"],
               "metrics": {}, "ok_line": "", "result": "", "stderr_tail": "",
               "command": self.shown(argv, setenv)}
        if r["error"]:
            rec["reason"] = r["error"]
        elif r["timed_out"]:
            rec["reason"] = f"timed out after {self.timeout:g} s (killed)"
        elif r["exit"] < 0:
            rec["reason"] = f"killed by signal {-r['exit']}"
        elif w.binary:
            (rec["status"], rec["reason"], rec["ok_line"],
             rec["metrics"]) = workloads.check_binary(r["exit"], r["stdout"], r["stderr"])
            rec["result"] = workloads.checksum(rec["ok_line"])
        elif r["exit"] != 0:
            rec["reason"] = f"exit {r['exit']}"
        else:
            ok, reason, result = programs.PROGRAMS[w.name][2](
                self.prog[w.name], r["stdout"], r["stderr"])
            rec["status"] = "ok" if ok else "failed"
            rec["reason"], rec["result"] = reason, result or ""
            rec["metrics"] = workloads.parse_output(r["stdout"], "")[2]
            rec["ok_line"] = (r["stdout"].strip().splitlines() or [""])[-1][:200]
        if rec["status"] == "ok" and rec["result"]:
            ref = self.reference.setdefault(w.name, (alloc, rnd, rec["result"]))
            if ref[2] != rec["result"]:
                rec["status"] = "failed"
                rec["reason"] = (f"output {rec['result']} differs from the "
                                 f"{ref[0]} run {ref[1]}'s {ref[2]}")
        if rec["status"] == "failed":
            rec["stderr_tail"] = runs.tail(r["stderr"])
            if not rec["stderr_tail"].strip():
                rec["stderr_tail"] = "(stderr empty; stdout ends:)\n" + runs.tail(r["stdout"], 5)
            base = os.path.join(self.logs, f"{w.name}.{alloc}.{rnd}")
            for suffix, text in ((".out", r["stdout"]), (".err", r["stderr"])):
                with open(base + suffix, "w") as f:
                    f.write(text)
        return rec, r["stderr"]

    # --- the bench -----------------------------------------------------------

    def run(self):
        start = time.monotonic()
        info = machine.collect(ROOT, self.allocs, workloads.ALLOCATORS)
        info.update({
            "command": os.environ.get("CIDMALLOC_BENCH_COMMAND")
            or "bench/runner/bench.py " + " ".join(map(shlex.quote, sys.argv[1:])),
            "mode": "quick (--quick sizes; no speed asserted)" if self.size == "quick"
                    else "full",
            "runs per allocator": self.nruns,
            "sizes": ("workload binaries with --quick; " if self.size == "quick"
                      else "workload binaries' defaults; ") + programs.sizes_text(self.size),
            "busy fraction": self.args.busy_threshold,
            "busy threshold": (f"others used more than {self.args.busy_threshold:.0%} "
                               f"of one CPU over the run (and at least "
                               f"{runs.BUSY_MIN_S} s)"),
        })
        if "cidmalloc" in self.allocs:
            probe = runs.run(self.files["measure"], ["/bin/true"], self.env,
                             {"LD_PRELOAD": self.lib_of("cidmalloc"),
                              "CIDMALLOC_STATS": "1"}, self.work, 30)
            mode = [ln for ln in probe["stderr"].splitlines()
                    if ln.startswith("cidmalloc: mode")]
            info["cidmalloc mode"] = mode[0][len("cidmalloc: mode "):] if mode else \
                "? (no stats line: is libcidmalloc.so loading?)"
        self.reference = {}
        records = []
        done = set()  # (workload, allocator) that failed or skipped: not rerun
        total = self.nruns * len(self.selected) * len(self.allocs)
        k = 0
        for rnd in range(1, self.nruns + 1):
            for w in self.selected:
                for a in self.allocs:
                    k += 1
                    if (w.name, a) in done:
                        continue
                    rec, _ = self.one(w, a, rnd)
                    records.append(rec)
                    if rec["status"] != "ok":
                        done.add((w.name, a))
                    log(progress(k, total, rnd, self.nruns, rec))
        stats = None
        row = workloads.BY_NAME[workloads.STATS_ROW]
        if (row in self.selected and "cidmalloc" in self.allocs
                and (row.name, "cidmalloc") not in done):
            rec, stderr = self.one(row, "cidmalloc", 0, {"CIDMALLOC_STATS": "1"})
            rec["excerpt"] = [ln for ln in stderr.splitlines()
                              if ln.startswith("cidmalloc:")]
            stats = rec
            log(f"stats run: {row.name} / cidmalloc with CIDMALLOC_STATS=1: "
                f"{rec['status']} {rec['reason']}")
        info["load after"] = machine.loadavg()
        info["duration"] = f"{time.monotonic() - start:.0f} s"
        return {
            "info": info,
            "allocators": self.allocs,
            "workloads": [{"name": w.name, "description": w.description,
                           "command": self.shown(self.command(w)[0],
                                                 self.command(w)[1])}
                          for w in self.selected],
            "runs": records,
            "stats": stats,
            "highlight": workloads.HIGHLIGHT,
        }


def progress(k, total, rnd, nruns, rec):
    width = len(str(total))
    if rec["status"] == "ok":
        what = (f"{rec['wall_s']:8.3f} s {rec['maxrss_kb'] / 1024:8.1f} MiB"
                + (f"  busy: others {rec['others_cpu_s']:.2f} s CPU"
                   if rec["busy"] else ""))
    else:
        what = f"{rec['status'].upper()}: {rec['reason']}"
        if rec["status"] == "failed" and rec["stderr_tail"]:
            what += "\n    " + rec["stderr_tail"].replace("\n", "\n    ")
    return (f"[{k:{width}}/{total}] round {rnd}/{nruns} "
            f"{rec['workload']:<16} {rec['allocator']:<9} {what}")


def main(argv):
    args = parse_args(argv)
    if args.list:
        for w in workloads.WORKLOADS:
            print(f"{w.name:<16} {w.group:<14} {w.description}")
        return 0
    if args.report:
        with open(args.report) as f:
            data = json.load(f)
        write_outputs(data, args.out or os.path.dirname(os.path.abspath(args.report)))
        return 0
    try:
        bench = Bench(args)
    except ValueError as e:
        log(f"bench: {e}")
        return 2
    outdir = args.out or (tempfile.mkdtemp(prefix="cidmalloc-bench-quick.")
                          if args.quick else DOCS_OUT)
    keep = args.keep_work
    try:
        missing = bench.check_inputs()
        if missing:
            log("bench: missing (./cidmalloc bench builds and installs them):\n  "
                + "\n  ".join(missing))
            return 2
        bench.prepare()
        data = bench.run()
        write_outputs(data, outdir)
        ok, skipped, failed = report.counts(data)
        if failed:
            keep = True
        log(f"bench: work directory {bench.work}"
            + (" kept (logs of failed runs in logs/)" if keep else " removed"))
        log(f"bench {bench.size}: {len(bench.selected)} workloads x "
            f"{len(bench.allocs)} allocators x {bench.nruns} run(s): {ok} ok, "
            f"{skipped} skipped, {failed} failed in {data['info']['duration']}; "
            f"report: {os.path.join(outdir, 'latest.md')}")
        return 1 if failed else 0
    except KeyboardInterrupt:
        log("bench: interrupted")
        return 130
    finally:
        if not keep:
            shutil.rmtree(bench.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
