"""Resident set of a process that frees a burst of memory and then goes quiet.

Four threads each build and drop 300,000 bytes objects of 16-1015 bytes
(run it with PYTHONMALLOC=malloc so that they come from malloc); the main
thread then only sleeps, and prints its resident set in MiB right after
the threads and every 0.5 s for 3 s, on one line.  An allocator that gives
memory back only when it is called keeps it all; one with a background
thread (cidmalloc's CIDMALLOC_BACKGROUND_THREAD=on, jemalloc's
background_thread:true) can return it.  docs/benchmarks/tuning_log.md.

  PYTHONMALLOC=malloc LD_PRELOAD=<lib> python3 bench/alloc/quiet_after_burst.py
"""
import threading
import time


def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def burst(n):
    objs = [bytes(16 + (i * 7919) % 1000) for i in range(n)]
    del objs


def main():
    threads = [threading.Thread(target=burst, args=(300000,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    samples = [resident_mib()]
    for _ in range(6):
        time.sleep(0.5)
        samples.append(resident_mib())
    print(" ".join("%.1f" % s for s in samples))


if __name__ == "__main__":
    main()
