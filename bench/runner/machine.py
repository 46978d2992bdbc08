"""What ./cidmalloc bench records about the machine and the software."""
import datetime
import os
import platform
import re
import subprocess

# Environment variables that change an allocator's behaviour: recorded in
# the report when set (the runner passes them through unchanged).
TUNING_PREFIXES = ("CIDMALLOC_", "MALLOC_", "MIMALLOC_", "TCMALLOC_",
                   "JE_MALLOC_CONF", "GLIBC_TUNABLES")


def _first(path, pattern):
    try:
        with open(path) as f:
            for line in f:
                m = re.match(pattern, line)
                if m:
                    return m.group(1).strip()
    except OSError:
        pass
    return "?"


def _output(argv, cwd=None):
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, cwd=cwd, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (p.stdout or p.stderr).strip() if p.returncode == 0 else ""


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def package_version(pkg):
    if not pkg:
        return ""
    v = _output(["dpkg-query", "-W", "-f=${Version}", pkg])
    return v or "not installed"


def git_state(root):
    head = _output(["git", "rev-parse", "--short=7", "HEAD"], cwd=root)
    if not head:
        return "?"
    subject = _output(["git", "log", "-1", "--format=%s"], cwd=root)
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"],
                    cwd=root)
    return f"{head} ({subject})" + (", with uncommitted changes" if dirty else "")


def program_versions():
    py = _output(["/usr/bin/python3", "--version"]).replace("Python ", "")
    gcc = _output(["gcc", "-dumpfullversion"])
    sqlite = _output(["sqlite3", "--version"]).split(" ")[0]
    return f"python3 {py or '?'}, gcc {gcc or '?'}, sqlite3 {sqlite or '?'}"


def collect(root, allocators, allocator_table):
    """A dict of strings, written at the top of the report."""
    cpus = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except OSError:
        usable = cpus
    mem_kb = _first("/proc/meminfo", r"MemTotal:\s+(\d+)")
    mem = f"{int(mem_kb) / 1048576:.1f} GiB RAM" if mem_kb.isdigit() else "? RAM"
    thp = _first("/sys/kernel/mm/transparent_hugepage/enabled", r"(.*)")
    thp = re.search(r"\[(\w+)\]", thp).group(1) if "[" in thp else thp
    libs = []
    for a in allocators:
        lib, pkg = allocator_table[a]
        if not lib:
            libs.append(f"{a}: no preload ({pkg} {package_version(pkg)})")
        elif pkg:
            libs.append(f"{a}: {lib} ({pkg} {package_version(pkg)})")
        elif lib.startswith("/"):
            libs.append(f"{a}: {lib}")  # --previous-lib
        else:
            libs.append(f"{a}: bazel-bin/{lib}")
    model = _first("/proc/cpuinfo", r"model name\s*:(.*)")
    tuning = sorted(f"{k}={v}" for k, v in os.environ.items()
                    if k.startswith(TUNING_PREFIXES)
                    and k not in ("CIDMALLOC_STATS", "CIDMALLOC_BENCH_COMMAND",
                                  "CIDMALLOC_BENCH_BAZEL_BIN"))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc)
                .strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{model}, {cpus} cpus ({usable} usable), {mem}",
        "kernel": f"{platform.release()} ({platform.version()})",
        "os": _first("/etc/os-release", r'PRETTY_NAME="?([^"]*)"?'),
        "glibc": os.confstr("CS_GNU_LIBC_VERSION") or "?",
        "transparent hugepages": thp,
        "commit": git_state(root),
        "allocators": libs,
        "programs": program_versions(),
        "allocator environment": ", ".join(tuning) or "none set",
        "load before": loadavg(),
    }
