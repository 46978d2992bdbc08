"""One measured run: the launcher (//bench/runner:measure), its result file,
and whether the machine was busy meanwhile.

The launcher forks the command, waits with wait4 and reports wall time
(CLOCK_MONOTONIC), peak RSS (ru_maxrss, which covers the descendants the
command reaped), the command's CPU time and the "cpu" line of /proc/stat
before and after (measure.cc says why this is not done from Python).

Busy-ness: the CPU time everybody else used during the run is the non-idle
time of /proc/stat (user, nice, system, irq, softirq and steal: on a virtual
machine steal is CPU the host gave to others) minus the command's own CPU
time and the launcher's.  A run is flagged busy when that exceeds
BUSY_FRACTION of one CPU over the run's wall time, and at least BUSY_MIN_S
(/proc/stat counts in clock ticks of 10 ms per CPU, so tiny amounts on a
short run are rounding).
"""
import os
import subprocess

BUSY_FRACTION = 0.10   # of one CPU, averaged over the run
BUSY_MIN_S = 0.05      # ignore less than this (tick rounding)

_TICK = 1.0 / os.sysconf("SC_CLK_TCK")
# /proc/stat "cpu" fields: user nice system idle iowait irq softirq steal.
_NON_IDLE = (0, 1, 2, 5, 6, 7)


def _read_result(path):
    values = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            values[key] = value
    return values


def _tail(text, lines=20):
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def others_cpu(values):
    """CPU seconds used by everything but the measured command, or None."""
    before = values.get("stat_before", "").split()
    after = values.get("stat_after", "").split()
    if len(before) < 8 or len(after) < 8:
        return None
    busy_ticks = sum(int(after[i]) - int(before[i]) for i in _NON_IDLE)
    own = (int(values["utime_us"]) + int(values["stime_us"])
           + int(values.get("self_us", 0))) / 1e6
    return max(0.0, busy_ticks * _TICK - own)


def is_busy(others, wall, fraction=BUSY_FRACTION):
    return others is not None and others > max(fraction * wall, BUSY_MIN_S)


def run(measure, argv, env, setenv, workdir, timeout, busy_fraction=BUSY_FRACTION):
    """Runs argv through the launcher.

    env: the launcher's environment (no LD_PRELOAD); setenv: variables set
    for the command only.  Returns a dict: exit (int, or -signal), timed_out,
    wall_s, maxrss_kb, cpu_s, others_cpu_s (None if /proc/stat was not
    readable), busy, stdout, stderr (text), error (launcher trouble, or "").
    """
    result = os.path.join(workdir, "result.txt")
    out_path = os.path.join(workdir, "stdout.txt")
    err_path = os.path.join(workdir, "stderr.txt")
    cmd = [measure, "--result", result, "--timeout", f"{timeout:g}"]
    for key, value in setenv.items():
        cmd += ["--setenv", f"{key}={value}"]
    cmd += ["--", *argv]
    if os.path.exists(result):
        os.unlink(result)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out,
                            stderr=err, env=env, cwd=workdir).returncode
    with open(out_path, errors="replace") as f:
        stdout = f.read()
    with open(err_path, errors="replace") as f:
        stderr = f.read()
    if rc != 0 or not os.path.exists(result):
        return {"exit": None, "timed_out": False, "wall_s": None,
                "maxrss_kb": None, "cpu_s": None, "others_cpu_s": None,
                "busy": False, "stdout": stdout, "stderr": stderr,
                "error": f"launcher exit {rc}: {_tail(stderr, 3)}"}
    v = _read_result(result)
    code = int(v["exit"]) if "exit" in v else -int(v.get("signal", 0))
    wall = int(v["wall_ns"]) / 1e9
    others = others_cpu(v)
    return {
        "exit": code,
        "timed_out": v.get("timed_out") == "1",
        "wall_s": wall,
        "maxrss_kb": int(v["maxrss_kb"]),
        "cpu_s": (int(v["utime_us"]) + int(v["stime_us"])) / 1e6,
        "others_cpu_s": others,
        "busy": is_busy(others, wall, busy_fraction),
        "stdout": stdout,
        "stderr": stderr,
        "error": "",
    }


def tail(text, lines=20):
    return _tail(text, lines)
