"""An allocation-heavy, deterministic Python workload for tests/preload_test.sh.

Builds a dict of 10^5 strings, sorts, joins and hashes them, and churns lists,
bytearrays (realloc), sets and JSON round trips.  Prints the same lines on
every run, whatever the allocator: the test compares the output with and
without libcidmalloc preloaded.  Run it with PYTHONMALLOC=malloc too, so every
object (not only pymalloc's arenas and large objects) comes from malloc.
"""
import hashlib
import json
import random

rng = random.Random(12345)
N = 10**5


def word(i):
    # 1..40 hex digits, then the index: strings of many sizes.
    n = 1 + rng.randrange(40)
    return ("%x" % rng.getrandbits(4 * n)).zfill(n) + "-" + str(i)


d = {}
for i in range(N):
    d["k%06d" % rng.randrange(10 * N)] = word(i)
keys = sorted(d)
values = sorted(d.values(), key=lambda s: (len(s), s))
joined = "\n".join(k + "=" + d[k] for k in keys)
h = hashlib.sha256(joined.encode()).hexdigest()
print("dict", len(d), "keys", keys[0], keys[-1], "sha256", h)
print("values", len(values), values[0], values[-1])

# Growing and shrinking buffers: realloc of every size class and beyond.
buf = bytearray()
for i in range(20000):
    buf += bytes([i % 251]) * (i % 97)
    if i % 1000 == 999:
        del buf[: len(buf) // 3]
print("bytearray", len(buf), hashlib.sha256(buf).hexdigest()[:16])

# Many short-lived containers of mixed sizes.
total = 0
for r in range(100):
    lst = [tuple(range(j % 13)) for j in range(500 + r)]
    st = {x * 7 % 1009 for x in range(r * 10)}
    total += sum(len(t) for t in lst) + len(st)
print("churn", total)

# JSON round trip of a nested structure.
doc = {"items": [{"id": i, "name": d[keys[i]], "tags": list(range(i % 7))}
                 for i in range(0, len(keys), 10)]}
text = json.dumps(doc, sort_keys=True)
back = json.loads(text)
assert back == doc
print("json", len(text), hashlib.sha256(text.encode()).hexdigest()[:16])
