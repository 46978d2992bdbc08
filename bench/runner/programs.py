"""Real programs for ./cidmalloc bench: python3, gcc, sqlite3 and Redis.

Each program runs under every allocator via LD_PRELOAD, timed end to end.
The runner generates the inputs here once per bench (not timed), in its
work directory; each run is then checked:

- python: PYTHONMALLOC=malloc /usr/bin/python3 on a generated script that
  churns dicts, lists and strings (records, an index, deletions, JSON round
  trips, a sort and a join).  With Python's own small-object allocator
  (pymalloc, the default) objects up to 512 bytes would never reach malloc
  and the row would measure Python rather than the allocator.  The script
  checks two counts against closed forms and prints a CRC of everything it
  serialised; the runner requires the same CRC from every run.
- gcc: gcc -O2 -c on a generated C file of many small functions that call
  each other (inlining and IPA work).  Checks the exit status and that the
  object file exists; its SHA-256 must be the same in every run.  Peak RSS
  covers cc1 and as: the gcc driver reaps them, and wait4's ru_maxrss
  includes the descendants a process has reaped.
- sqlite: sqlite3 on an in-memory database: inserts N rows with a recursive
  CTE, builds two indexes, updates, deletes and queries; every query's
  output is compared with values this module computes directly.
- redis: a Redis server session (redis_session.sh beside this file, "bench"
  mode): the server, preloaded, is filled through redis-cli --pipe, forks
  for a BGSAVE while a churn deletes and resizes a third of the data, then
  serves redis-benchmark; its clients run on glibc's malloc.  The DEBUG
  DIGEST of the data set must be the same in every run.  Peak RSS is the
  largest of the session's processes: the server's (or its BGSAVE child's).
"""
import hashlib
import os
import subprocess
import zlib

# Sizes: a full run takes 2-10 s on the 2-vCPU development machine (CPU
# time under glibc: python ~3 s, gcc ~5 s, sqlite ~4 s); --quick well
# under 1 s.  gcc's time grows a little faster than linearly with the
# number of functions (~20 ms each).
PYTHON_RECORDS = {"full": 200_000, "quick": 5_000}
GCC_FUNCTIONS = {"full": 250, "quick": 10}
SQLITE_ROWS = {"full": 1_000_000, "quick": 10_000}
REDIS_KEYS = {"full": 100_000, "quick": 5_000}

PYTHON = "/usr/bin/python3"  # Debian's; a pyenv shim would be a bash script
GCC = "gcc"
SQLITE = "sqlite3"
# Debian's redis-tools installs the server binary under this name.
REDIS = "redis-check-rdb"
REDIS_SESSION = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "redis_session.sh")

PYTHON_SCRIPT = r'''"""Allocation churn for ./cidmalloc bench (bench/runner/programs.py)."""
import json
import sys
import zlib


def main():
    n = int(sys.argv[1])
    records = []
    for i in range(n):
        records.append({"id": i, "name": "item-%d" % i,
                        "tags": [str(i % 7), "t%d" % (i % 11)],
                        "payload": "x" * (i % 300)})
    index = {}
    for rec in records:
        for tag in rec["tags"]:
            index.setdefault(tag, []).append(rec["id"])
    kept = [r for r in records if r["id"] % 3]
    del records
    crc = 0
    total = 0
    for start in range(0, len(kept), 500):
        text = json.dumps(kept[start:start + 500], sort_keys=True)
        back = json.loads(text)
        total += len(back)
        crc = zlib.crc32(text.encode(), crc)
    words = sorted("w%x" % (i * 2654435761 % 1000003) for i in range(n))
    crc = zlib.crc32(" ".join(words).encode(), crc)
    indexed = sum(len(v) for v in index.values())
    # Closed forms: ids not divisible by 3 survive; two tags per record.
    if total != n - (n + 2) // 3 or indexed != 2 * n:
        print("FAIL python: total %d, indexed %d for n=%d" % (total, indexed, n),
              file=sys.stderr)
        sys.exit(1)
    print("ok python records=%d kept=%d crc=%08x" % (n, total, crc))


main()
'''


def python_prepare(workdir, size):
    path = os.path.join(workdir, "alloc_churn.py")
    with open(path, "w") as f:
        f.write(PYTHON_SCRIPT)
    return {"argv": [PYTHON, "-s", "-B", path, str(PYTHON_RECORDS[size])],
            "env": {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}}


def python_check(ctx, stdout, stderr):
    """Returns (ok, reason, result fingerprint)."""
    lines = stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("ok python "):
        return False, "no 'ok python' line", None
    crc = lines[-1].rsplit("crc=", 1)[-1]
    return True, "", "crc=" + crc


def _c_function(i):
    """One generated function pair; func_i calls func_(i-1)."""
    m = i % 5
    prev = (f"(n > 1 ? func_{i - 1}(r + 1, n - 1, scale * 0.5) : 0)"
            if i > 0 else "0")
    return f"""
static int helper_{i}(const struct rec *r, int n) {{
  int acc = {i};
  for (int j = 0; j < n; ++j) {{
    switch ((r[j].a + j) % {3 + m}) {{
    case 0: acc += r[j].b * {i % 97 + 1}; break;
    case 1: acc ^= (int)(r[j].c * {m + 2}.5); break;
    case 2: acc -= (int)strlen(r[j].name); break;
    default: acc = acc * 31 + j;
    }}
  }}
  return acc;
}}

int func_{i}(struct rec *r, int n, double scale) {{
  double sum = 0;
  struct rec *p = r;
  if (n > 64) n = 64;
  for (int j = 0; j < n; ++j, ++p) {{
    p->a = (p->a * {i % 13 + 3}) ^ j;
    p->c = p->c * scale + {i}.25;
    if (p->a & {1 << m}) sum += p->c; else sum -= p->b;
    for (int q = 0; q < {m + 2}; ++q) p->name[q] = (char)('a' + (p->a + q) % 26);
    p->name[{m + 2}] = 0;
  }}
  return helper_{i}(r, n) + (int)sum + {prev};
}}
"""


def gcc_source(k):
    parts = ["/* Generated by bench/runner/programs.py for ./cidmalloc bench. */",
             "#include <string.h>",
             "struct rec { int a, b; double c; char name[16]; struct rec *next; };"]
    parts += [f"int func_{i}(struct rec *r, int n, double scale);"
              for i in range(k)]
    parts += [_c_function(i) for i in range(k)]
    return "\n".join(parts) + "\n"


def gcc_prepare(workdir, size):
    src = os.path.join(workdir, "big.c")
    with open(src, "w") as f:
        f.write(gcc_source(GCC_FUNCTIONS[size]))
    obj = os.path.join(workdir, "big.o")
    return {"argv": [GCC, "-O2", "-c", src, "-o", obj], "env": {},
            "object": obj}


def gcc_before(ctx):
    try:
        os.unlink(ctx["object"])
    except FileNotFoundError:
        pass


def gcc_check(ctx, stdout, stderr):
    obj = ctx["object"]
    if not os.path.isfile(obj) or os.path.getsize(obj) == 0:
        return False, f"{obj} missing or empty", None
    with open(obj, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return True, "", "sha256=" + digest


def sqlite_script(n):
    return f"""-- Generated by bench/runner/programs.py for ./cidmalloc bench.
PRAGMA cache_size = -400000;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
INSERT INTO t
  SELECT x, x % 1000,
         printf('name-%08d-%s', x,
                substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26, 1 + x % 17)),
         x * 0.5
  FROM c;
CREATE INDEX t_grp ON t(grp);
CREATE INDEX t_name ON t(name);
SELECT 'q1', count(*), sum(id), sum(grp) FROM t;
SELECT 'q2', grp, count(*), sum(id) FROM t WHERE grp IN (0, 1, 999)
  GROUP BY grp ORDER BY grp;
SELECT 'q3', length(name), count(*) FROM t GROUP BY length(name)
  ORDER BY length(name);
UPDATE t SET name = name || '-updated' WHERE id % 10 = 0;
DELETE FROM t WHERE id % 7 = 0;
SELECT 'q4', count(*), sum(length(name)) FROM t;
SELECT 'q5', count(*) FROM t WHERE name >= 'name-0000' AND name < 'name-0001';
"""


def sqlite_expected(n):
    """The output sqlite_script(n) must print, computed directly."""
    alpha = "abcdefghijklmnopqrstuvwxyz"
    lines = [f"q1|{n}|{n * (n + 1) // 2}|{sum(x % 1000 for x in range(1, n + 1))}"]
    for g in (0, 1, 999):
        ids = range(g if g else 1000, n + 1, 1000)
        if len(ids):
            lines.append(f"q2|{g}|{len(ids)}|{sum(ids)}")
    by_len = {}
    count4 = len4 = count5 = 0
    for x in range(1, n + 1):
        name = "name-%08d-%s" % (x, alpha[x % 26:x % 26 + 1 + x % 17])
        by_len[len(name)] = by_len.get(len(name), 0) + 1
        if x % 10 == 0:
            name += "-updated"
        if x % 7:
            count4 += 1
            len4 += len(name)
            if "name-0000" <= name < "name-0001":
                count5 += 1
    lines += [f"q3|{k}|{by_len[k]}" for k in sorted(by_len)]
    lines.append(f"q4|{count4}|{len4}")
    lines.append(f"q5|{count5}")
    return lines


def sqlite_prepare(workdir, size):
    n = SQLITE_ROWS[size]
    path = os.path.join(workdir, "rows.sql")
    with open(path, "w") as f:
        f.write(sqlite_script(n))
    return {"argv": [SQLITE, "-batch", "-bail", ":memory:", f".read {path}"],
            "env": {}, "expected": sqlite_expected(n)}


def sqlite_check(ctx, stdout, stderr):
    got = stdout.strip().splitlines()
    want = ctx["expected"]
    if got != want:
        for i, (g, w) in enumerate(zip(got + [""] * len(want), want)):
            if g != w:
                return False, f"query line {i + 1}: got {g!r}, want {w!r}", None
        return False, f"{len(got)} output lines, want {len(want)}", None
    digest = zlib.crc32("\n".join(got).encode())
    return True, "", f"crc={digest:08x}"


def redis_prepare(workdir, size):
    """Writes the session's commands once (untimed)."""
    d = os.path.join(workdir, "redis")
    n = str(REDIS_KEYS[size])
    subprocess.run(["bash", REDIS_SESSION, "gen", d, n], check=True)
    return {"argv": ["/bin/bash", REDIS_SESSION, "bench", d, n], "env": {}}


def redis_check(ctx, stdout, stderr):
    lines = stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("ok redis "):
        reason = stderr.strip().splitlines()[-1:] or ["no 'ok redis' line"]
        return False, reason[0], None
    fields = dict(f.split("=", 1) for f in lines[-1].split()[2:])
    return True, "", f"keys={fields['keys']} digest={fields['digest'][:16]}"


# name -> (prepare, before each run or None, check, description)
PROGRAMS = {
    "python": (python_prepare, None, python_check,
               "python3 (PYTHONMALLOC=malloc): dict/list/string churn, JSON"),
    "gcc": (gcc_prepare, gcc_before, gcc_check,
            "gcc -O2 -c on a generated C file"),
    "sqlite": (sqlite_prepare, None, sqlite_check,
               "sqlite3 in memory: insert, index, update, delete, query"),
    "redis": (redis_prepare, None, redis_check,
              "Redis server: pipelined fill, churn during a BGSAVE fork, "
              "redis-benchmark"),
}


def sizes_text(size):
    return (f"python {PYTHON_RECORDS[size]} records, gcc {GCC_FUNCTIONS[size]} "
            f"functions, sqlite {SQLITE_ROWS[size]} rows, "
            f"redis {REDIS_KEYS[size]} keys")
