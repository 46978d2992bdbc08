"""Four Python threads allocating and freeing at once, for the preload tests.

Each thread keeps a dict of strings and bytes of 0-3000 bytes (past
pymalloc's 512, so from malloc even without PYTHONMALLOC=malloc), adding
20,000 entries (or argv[1]) and dropping the oldest after every third,
while the other threads do the same.
Prints the same line on every run, whatever the allocator: the tests compare
it with and without libcidmalloc preloaded.  Needs only the modules of
Debian's python3.11-minimal (the AArch64 VMs carry no more).
"""
import random
import sys
import threading

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20000


def work(seed, out):
    rng = random.Random(seed)
    d = {}
    for i in range(N):
        k = "%x" % rng.getrandbits(40)
        d[k] = [k * rng.randint(1, 40), bytes(rng.randint(0, 3000))]
        if i % 3 == 0:
            d.pop(next(iter(d)))
    out[seed] = (sum(len(v[0]) + len(v[1]) for v in d.values()), len(d))


out = {}
threads = [threading.Thread(target=work, args=(s, out)) for s in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads", sorted(out.items()))
