/* cidmalloc.h: the public C interface of cidmalloc beyond the standard
 * malloc family.  Installed as <cidmalloc.h>.
 *
 * Counters marked (counting) are exact when the process runs with
 * CIDMALLOC_STATS=1 and zero otherwise: counting costs the fast paths a
 * branch and a critical section, so it is off by default. */
#ifndef CIDMALLOC_H_
#define CIDMALLOC_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CIDMALLOC_MAX_NODES 64

struct cidmalloc_stats {
  const char* mode;          /* "cid", "cpu" or "none" */
  const char* registration;  /* "glibc", "own" or "none" */
  unsigned num_nodes;
  unsigned num_rseq_ids;     /* cids or cpus the slab table covers */
  unsigned slabs;            /* slabs touched: IDs that ever had a cache */
  unsigned max_slab_id;
  unsigned long long slab_bytes;    /* pages of those slabs written */
  unsigned long long cached_bytes;  /* objects (and freed page runs)
                                       sitting in the caches */
  unsigned long long meta_bytes;    /* allocator metadata mapped */
  int counting;                     /* 1 under CIDMALLOC_STATS=1 */
  unsigned long long mallocs;       /* (counting) allocations */
  unsigned long long cache_hits;    /* (counting) served by a slab */
  unsigned long long frees;         /* (counting) */
  unsigned long long remote_frees;  /* (counting) freed off their node */
  unsigned long long local_allocs;  /* (counting) on the caller's node */
  unsigned long long node_mapped[CIDMALLOC_MAX_NODES];
  unsigned long long node_in_use[CIDMALLOC_MAX_NODES];
  unsigned long long node_free[CIDMALLOC_MAX_NODES];
  unsigned long long node_released[CIDMALLOC_MAX_NODES];
  unsigned long long node_bind_failures[CIDMALLOC_MAX_NODES];
  /* Appended after the fields above, as every later field will be: a
   * program built against an older, shorter struct must use
   * cidmalloc_get_stats_sized, or be rebuilt. */
  unsigned long long idle_drains;   /* caches drained after going idle
                                       (CIDMALLOC_CACHE_IDLE_MS) */
  /* The background thread (CIDMALLOC_BACKGROUND_THREAD): "off", "pending"
   * (asked for, not started yet: it starts one tick after start-up),
   * "starting", "running" or "failed", and how many times it woke up. */
  const char* background_thread;
  unsigned long long background_ticks;
  /* Distinct IDs among those with a slab: cids in cid mode (a cid that ran
   * on several nodes has a slab per node but counts once), cpus in cpu
   * mode, soft IDs in none mode. */
  unsigned ids_seen;
  /* Free pages inside spans that still hold objects in use, returned to
   * the OS by malloc_trim and the idle scan, ever (bytes; they come back
   * when their objects are reused, and the node figures above still count
   * them as in use). */
  unsigned long long span_bytes_purged;
};

/* Fills *out; returns 0.  Does not allocate.  Fills all of this header's
 * struct: a program built against an older header would have its shorter
 * struct overrun.  Prefer cidmalloc_get_stats_sized. */
int cidmalloc_get_stats(struct cidmalloc_stats* out);

/* Fills the first `size` bytes of *out, where `size` is the caller's
 * sizeof(struct cidmalloc_stats): fields are only ever appended, so a
 * program built against an older header gets the fields it knows, and one
 * built against a newer header gets this library's and zeros after them.
 * Returns how many bytes hold this library's fields (at most `size`).
 * Does not allocate. */
size_t cidmalloc_get_stats_sized(struct cidmalloc_stats* out, size_t size);

/* Writes the human-readable summary (the one CIDMALLOC_STATS=1 prints at
 * exit) to file descriptor fd.  Does not allocate. */
void cidmalloc_print_stats(int fd);

/* One size class.  Each object of a class's spans is in one of three
 * places: handed out to the program (in_use_objects), in a per-ID cache
 * (cached_objects), or free in the class's spans and its transfer caches
 * (free_objects); the three add up to objects.  Read while other threads
 * allocate, the figures are recent, not a snapshot: in_use_objects is what
 * the other two leave of objects.  On a machine of several nodes, objects
 * freed on another node than theirs and waiting in that ID's stack of
 * remote objects (at most 64 an ID, of any class) count as in use: that
 * stack is only counted, not walked. */
struct cidmalloc_class_stats {
  unsigned long long size;            /* bytes of one object */
  unsigned long long spans;           /* spans of the class, every node */
  unsigned long long span_bytes;      /* the bytes of those spans */
  unsigned long long objects;         /* objects those spans hold */
  unsigned long long in_use_objects;  /* objects the program holds */
  unsigned long long cached_objects;  /* objects in the per-ID caches */
  unsigned long long free_objects;    /* free in spans or transfer */
};

/* The classes are 1 .. cidmalloc_num_classes() - 1 (requests above the
 * largest class's size get page runs or mappings of their own). */
unsigned cidmalloc_num_classes(void);

/* Fills the first `size` bytes of *out (the caller's
 * sizeof(struct cidmalloc_class_stats); fields are only ever appended) for
 * class `cls`.  Returns how many bytes hold this library's fields, 0 (and
 * *out untouched) if cls is not a class.  Does not allocate. */
size_t cidmalloc_get_class_stats(unsigned cls,
                                 struct cidmalloc_class_stats* out,
                                 size_t size);

/* Writes a table of the classes that have spans to file descriptor fd:
 * the one CIDMALLOC_STATS=2 prints at exit after the summary.  Does not
 * allocate. */
void cidmalloc_print_class_stats(int fd);

/* Drains every cache and returns all free memory to the OS; returns the
 * bytes released (malloc_trim(0) does the same). */
size_t cidmalloc_release_free_memory(void);

#ifdef __cplusplus
}
#endif

#endif /* CIDMALLOC_H_ */
