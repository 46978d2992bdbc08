/* bench/alloc/floor_alloc.c: the least an allocator can do under
 * malloc_bench's pair rows (malloc, then free of that pointer), preloaded
 * to measure what the benchmark loop and the two calls cost by themselves:
 * the floor under every allocator's pair.
 *
 *   bench/alloc/ab_libs.py 5 'BM_Pair/16/threads:1$' \
 *       floor=$PWD/bazel-bin/bench/alloc/libfloor_alloc.so glibc=glibc ...
 *
 * and linked into :malloc_bench_floor, the floor under the benchmarks with
 * an allocator linked in (bin:$PWD/bazel-bin/bench/alloc/malloc_bench_floor).
 *
 * Every block comes from a bump pointer in one reservation and carries its
 * capacity in the 16 bytes before it.  free() keeps the block in a
 * one-entry slot per thread (dropping the block the slot held: freed memory
 * is never reused otherwise), and malloc() hands the slot's block back when
 * it is large enough.  A pair of one size is then a thread-local load and
 * store on each side, with no size classes, no checks and no locks.  For
 * benchmarks only: memory runs out after kReserve bytes (then abort). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum { kHeader = 16 };
static const size_t kReserve = (size_t)64 << 30; /* address space only */

static char* g_base;
static size_t g_used; /* bytes handed out, advanced atomically */

/* Initial-exec: the general-dynamic model of a -fPIC library calls
 * __tls_get_addr on every access. */
static __thread void* t_slot __attribute__((tls_model("initial-exec")));

static void Die(const char* msg) {
  (void)!write(2, msg, strlen(msg));
  abort();
}

static size_t* CapacityOf(void* p) { return (size_t*)((char*)p - kHeader); }

/* A new block of at least `size` bytes whose start is aligned to `align`
 * (a power of two, at least kHeader). */
static void* Bump(size_t size, size_t align) {
  if (size > kReserve || align > kReserve) {
    errno = ENOMEM;
    return NULL;
  }
  char* base = __atomic_load_n(&g_base, __ATOMIC_ACQUIRE);
  if (base == NULL) {
    char* fresh = mmap(NULL, kReserve, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (fresh == MAP_FAILED) Die("floor_alloc: mmap failed\n");
    if (!__atomic_compare_exchange_n(&g_base, &base, fresh, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      munmap(fresh, kReserve);  /* another thread won; base is its */
    } else {
      base = fresh;
    }
  }
  const size_t need = kHeader + size + align;
  const size_t at = __atomic_fetch_add(&g_used, (need + 15) & ~(size_t)15,
                                       __ATOMIC_RELAXED);
  if (at + need > kReserve) Die("floor_alloc: reservation exhausted\n");
  uintptr_t p = (uintptr_t)base + at + kHeader;
  p = (p + align - 1) & ~(uintptr_t)(align - 1);
  *CapacityOf((void*)p) = size;
  return (void*)p;
}

EXPORT void* malloc(size_t size) {
  void* p = t_slot;
  if (p != NULL && *CapacityOf(p) >= size) {
    t_slot = NULL;
    return p;
  }
  return Bump(size, kHeader);
}

EXPORT void free(void* p) {
  if (p != NULL) t_slot = p;
}

EXPORT void* calloc(size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  return Bump(n * size, kHeader); /* never reused: zero from mmap */
}

EXPORT void* realloc(void* old, size_t size) {
  if (old == NULL) return malloc(size);
  void* p = Bump(size, kHeader);
  if (p == NULL) return NULL;
  const size_t have = *CapacityOf(old);
  memcpy(p, old, have < size ? have : size);
  return p;
}

EXPORT int posix_memalign(void** out, size_t align, size_t size) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = Bump(size, align < kHeader ? kHeader : align);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

EXPORT void* aligned_alloc(size_t align, size_t size) {
  if ((align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  return Bump(size, align < kHeader ? kHeader : align);
}

EXPORT void* memalign(size_t align, size_t size) {
  return aligned_alloc(align, size);
}

EXPORT void* valloc(size_t size) { return Bump(size, 4096); }

EXPORT size_t malloc_usable_size(void* p) {
  return p == NULL ? 0 : *CapacityOf(p);
}
