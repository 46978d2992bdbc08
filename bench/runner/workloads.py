"""The workloads of ./cidmalloc bench (issue 4) and the allocators.

A workload row is either a binary of //bench/workloads (run with its
arguments, plus --quick in quick mode) or a real program of programs.py.

The binaries' contract (bench/workloads/README.md): on success exit 0 with
a last stdout line starting "ok "; earlier lines "metric key=value" are
extra metrics; exit 77 with a "skip: reason" line means skipped (e.g. the
kernel refuses seccomp); anything else is a failure.  The "checksum=" of
the ok line must be the same under every allocator (the work is
deterministic).
"""
import os
from dataclasses import dataclass, field

import programs


@dataclass
class Workload:
    name: str
    group: str          # for --only: micro, handoff, programs, or the name
    binary: str = ""    # bench/workloads binary; "" for a real program
    args: list = field(default_factory=list)
    description: str = ""


WORKLOADS = [
    Workload("micro_fixed", "micro", "micro", ["--case=fixed"],
             "malloc(64) / free pairs, one thread"),
    Workload("micro_random", "micro", "micro", ["--case=random"],
             "pairs of random sizes 8 B-1 KiB, one thread"),
    Workload("micro_batch", "micro", "micro", ["--case=batch"],
             "1,000 objects of 8 B-1 KiB allocated, then all freed"),
    Workload("server", "server", "server", [],
             "larson-like: threads swap objects through shared slots and "
             "free each other's"),
    Workload("prodcons", "prodcons", "prodcons", [],
             "producers allocate, consumers on other threads check and free"),
    Workload("handoff_migrate", "handoff", "handoff", ["--mode=migrate"],
             "futex request / reply ping-pong between two threads"),
    Workload("handoff_pinned", "handoff", "handoff", ["--mode=pinned"],
             "the same, both threads pinned to one cpu"),
    Workload("handoff_seccomp", "handoff", "handoff", ["--mode=seccomp"],
             "request / reply through a seccomp user-notification supervisor "
             "(Linux 6.6+; skipped if the kernel refuses)"),
    Workload("realloc_growth", "realloc_growth", "realloc_growth", [],
             "documents grown by realloc and string appends, then shrunk"),
    Workload("fragmentation", "fragmentation", "fragmentation", [],
             "~1 GiB of mixed sizes, 90 % freed, more allocated, all freed, "
             "malloc_trim; RSS at the end"),
    Workload("thread_churn", "thread_churn", "thread_churn", [],
             "10,000 short-lived threads that allocate and hand objects to "
             "the main thread"),
    Workload("large_churn", "large_churn", "large_churn", [],
             "threads replace buffers of random sizes, 1 in 8 of 8 KiB-1 MiB; "
             "peak RSS against peak live bytes"),
] + [Workload(name, "programs", "", [], spec[3])
     for name, spec in programs.PROGRAMS.items()]

BY_NAME = {w.name: w for w in WORKLOADS}
GROUPS = sorted({w.group for w in WORKLOADS if w.group != w.name})

# The row that gets one more run under cidmalloc with CIDMALLOC_STATS=1, to
# show where the reply was served from.
STATS_ROW = "handoff_pinned"

# Extra metrics shown on stdout too, with their ratio to glibc.
HIGHLIGHT = {"fragmentation": ["rss_end_kb"], "redis": ["server_hwm_kb"],
             "large_churn": ["rss_over_live_pct"]}

LIBDIR = "/usr/lib/x86_64-linux-gnu"
# name -> (library to preload or "" for none, Debian package or "")
ALLOCATORS = {
    "glibc": ("", "libc6"),
    "jemalloc": (f"{LIBDIR}/libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": (f"{LIBDIR}/libmimalloc.so.2", "libmimalloc2.0"),
    "tcmalloc": (f"{LIBDIR}/libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    "cidmalloc": ("libcidmalloc.so", ""),  # in the work directory
}
BASELINE = "glibc"


def select(only):
    """The workloads named by --only (names or group names), in order."""
    if not only:
        return list(WORKLOADS)
    wanted = set()
    for item in only.split(","):
        item = item.strip()
        if not item:
            continue
        hits = [w.name for w in WORKLOADS if item in (w.name, w.group)]
        if not hits:
            raise ValueError(f"unknown workload {item!r}; known: "
                             + ", ".join(w.name for w in WORKLOADS)
                             + "; groups: " + ", ".join(GROUPS))
        wanted.update(hits)
    return [w for w in WORKLOADS if w.name in wanted]


def parse_output(stdout, stderr):
    """Splits a binary's output: (ok line or "", skip reason or "", metrics)."""
    metrics = {}
    skip = ""
    lines = stdout.splitlines()
    for line in lines:
        if line.startswith("metric "):
            for item in line[len("metric "):].split():
                key, sep, value = item.partition("=")
                if sep:
                    try:
                        metrics[key] = float(value)
                    except ValueError:
                        metrics[key] = value
    for line in lines + stderr.splitlines():
        if line.startswith("skip:") and not skip:
            skip = line[len("skip:"):].strip() or "no reason given"
    nonempty = [ln for ln in lines if ln.strip()]
    last = nonempty[-1] if nonempty else ""
    ok = last if last == "ok" or last.startswith("ok ") else ""
    return ok, skip, metrics


def checksum(ok_line):
    """The checksum=... of an ok line, or "".  The workloads are deterministic
    (bench/workloads/README.md): it must be the same under every allocator."""
    for item in ok_line.split():
        if item.startswith("checksum="):
            return item
    return ""


def check_binary(exit_code, stdout, stderr):
    """(status, reason, ok line, metrics) for one run of a workload binary."""
    ok, skip, metrics = parse_output(stdout, stderr)
    if exit_code == 77:
        return "skipped", skip or "exit 77", "", metrics
    if exit_code != 0:
        return "failed", f"exit {exit_code}", "", metrics
    if not ok:
        return "failed", "exit 0 but the last stdout line is not 'ok ...'", "", metrics
    return "ok", "", ok, metrics


def binary_path(bindir, workload):
    return os.path.join(bindir, "bench", "workloads", workload.binary)
