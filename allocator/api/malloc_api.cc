// allocator/api/malloc_api.cc: the C malloc family, replacing glibc's
// (LD_PRELOAD or static link), plus glibc's __libc_* entry points.
//
// Behaviour follows glibc 2.36 where the standards leave room: malloc(0)
// returns a unique pointer, realloc(p, 0) frees p and returns NULL, memalign
// rounds a non-power-of-two alignment up, aligned_alloc rejects one with
// EINVAL.
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "allocator/api/alloc.h"
#include "allocator/api/cidmalloc.h"
#include "allocator/api/stats_internal.h"
#include "allocator/central/central_list.h"
#include "allocator/front_end/run_cache.h"
#include "allocator/page_heap/page_heap.h"

#define CIDMALLOC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using cidmalloc::api::Alloc;
using cidmalloc::api::AllocAligned;
using cidmalloc::api::Free;
using cidmalloc::api::UsableSize;

constexpr size_t kPage = 4096;

bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

void* Calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (total > cidmalloc::central::kMaxSmallSize) {
    return cidmalloc::api::AllocLarge(total, cidmalloc::central::kMinAlign,
                                      cidmalloc::api::Fill::kZero);
  }
  void* p = Alloc(total);
  if (p != nullptr) memset(p, 0, total);
  return p;
}

// realloc of a large block to a large size without copying, where the page
// heap can: a page run grows into the free pages after it or gives back its
// tail; a mapping of its own moves its pages with mremap.  nullptr if not.
// `old` is the block's usable size.
void* ResizeLarge(void* ptr, size_t size, size_t old) {
  namespace ph = cidmalloc::page_heap;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  ph::ChunkInfo* chunk = ph::LookupChunk(p);  // p passed UsableSize.
  if (chunk->kind == ph::ChunkKind::kHuge) {
    return size > ph::kChunkSize ? ph::ResizeHuge(chunk, p, size) : nullptr;
  }
  if (cidmalloc::central::ClassOfAddress(p) != 0) return nullptr;  // Small.
  // The run the thread's ID cached may be what the growth needs (as the
  // heap's parked run, which it merges back first).
  if (size > old) cidmalloc::front_end::ReturnRuns();
  return ph::ResizeRun(chunk, p, size) ? ptr : nullptr;
}

void* Realloc(void* p, size_t size) {
  if (p == nullptr) return Alloc(size);
  if (size == 0) {
    Free(p);
    return nullptr;
  }
  const size_t old = UsableSize("realloc(): invalid pointer", p);
  // Keep the block when the new size still fits and does not waste more
  // than half of it, nor a chunk (2 MiB) or more: a mapping of its own
  // shrinks in place below (mremap), as glibc shrinks its mmapped chunks
  // (8 mappings of 64 MiB cut to 33 MB each kept 513 MB resident, glibc's
  // 259).
  if (size <= old && size >= old / 2 &&
      old - size < cidmalloc::page_heap::kChunkSize) {
    // A mapping of its own (usable over a chunk) stays, but the pages past
    // the new size go back (ResizeHuge's same-mapping case), as glibc's
    // mremap gives them back.
    if (size < old && size > cidmalloc::page_heap::kChunkSize) {
      const int saved = errno;
      ResizeLarge(p, size, old);
      errno = saved;
    }
    return p;
  }
  if (size > cidmalloc::central::kMaxSmallSize) {
    // An attempt: its failed system calls (mremap in place before a move)
    // must not leave errno set on a realloc that succeeds, as glibc's does
    // not; Alloc below sets ENOMEM if it comes to that.
    const int saved = errno;
    void* q = ResizeLarge(p, size, old);
    errno = saved;
    if (q != nullptr) return q;
  }
  void* q = Alloc(size);
  if (q == nullptr) return nullptr;  // errno is ENOMEM; p is untouched.
  if (size > old && size > cidmalloc::page_heap::kChunkSize) {
    // A growing buffer moved into a mapping of its own: huge pages, before
    // the copy faults it in.
    cidmalloc::page_heap::AdviseGrowing(
        cidmalloc::page_heap::LookupChunk(reinterpret_cast<uintptr_t>(q)));
  }
  memcpy(q, p, size < old ? size : old);
  Free(p);
  return q;
}

void* Memalign(size_t align, size_t size) {
  if (align > (SIZE_MAX >> 1) + 1) {
    errno = EINVAL;
    return nullptr;
  }
  // glibc rounds the alignment up to a power of two; AllocAligned does.
  return AllocAligned(align, size);
}

}  // namespace

// malloc and free start on a cache line of their own (CIDMALLOC_HOT_ENTRY,
// alloc.h).
CIDMALLOC_EXPORT CIDMALLOC_HOT_ENTRY void* malloc(size_t size) {
  return Alloc(size);
}

CIDMALLOC_EXPORT CIDMALLOC_HOT_ENTRY void free(void* p) { Free(p); }

CIDMALLOC_EXPORT void* calloc(size_t n, size_t size) { return Calloc(n, size); }

CIDMALLOC_EXPORT void* realloc(void* p, size_t size) { return Realloc(p, size); }

CIDMALLOC_EXPORT void* reallocarray(void* p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return Realloc(p, total);
}

CIDMALLOC_EXPORT void* memalign(size_t align, size_t size) {
  return Memalign(align, size);
}

CIDMALLOC_EXPORT int posix_memalign(void** out, size_t align, size_t size) {
  if (!IsPowerOfTwo(align) || align % sizeof(void*) != 0) return EINVAL;
  const int saved = errno;
  void* p = AllocAligned(align, size);
  if (p == nullptr) {
    errno = saved;  // POSIX: errno is not set; the result says ENOMEM.
    return ENOMEM;
  }
  *out = p;
  return 0;
}

CIDMALLOC_EXPORT void* aligned_alloc(size_t align, size_t size) {
  if (!IsPowerOfTwo(align)) {
    errno = EINVAL;
    return nullptr;
  }
  return AllocAligned(align, size);
}

CIDMALLOC_EXPORT void* valloc(size_t size) { return AllocAligned(kPage, size); }

CIDMALLOC_EXPORT void* pvalloc(size_t size) {
  if (size > SIZE_MAX - kPage) {
    errno = ENOMEM;
    return nullptr;
  }
  const size_t rounded = size == 0 ? kPage : (size + kPage - 1) & ~(kPage - 1);
  return AllocAligned(kPage, rounded);
}

CIDMALLOC_EXPORT size_t malloc_usable_size(void* p) {
  if (p == nullptr) return 0;
  return UsableSize("malloc_usable_size(): invalid pointer", p);
}

// C23.  The size is a promise we check cheaply: a size larger than the
// block is a mismatched free.
CIDMALLOC_EXPORT void free_sized(void* p, size_t size) {
  if (p != nullptr && size > UsableSize("free_sized(): invalid pointer", p)) {
    cidmalloc::api::InvalidPointer("free_sized(): size larger than the block",
                                   p);
  }
  Free(p);
}

CIDMALLOC_EXPORT void free_aligned_sized(void* p, size_t align, size_t size) {
  if (p != nullptr &&
      (reinterpret_cast<uintptr_t>(p) & (align - 1)) != 0) {
    cidmalloc::api::InvalidPointer(
        "free_aligned_sized(): pointer not aligned as promised", p);
  }
  free_sized(p, size);
}

CIDMALLOC_EXPORT int malloc_trim(size_t pad) {
  cidmalloc::api::Config();
  cidmalloc::front_end::DrainAll();
  cidmalloc::central::ReleaseEmptySpans();
  return cidmalloc::page_heap::ReleaseFreeMemory(pad) > 0 ? 1 : 0;
}

CIDMALLOC_EXPORT void malloc_stats(void) { cidmalloc_print_stats(2); }

CIDMALLOC_EXPORT struct mallinfo2 mallinfo2(void) {
  struct cidmalloc_stats s;
  cidmalloc_get_stats(&s);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  size_t mapped = 0, in_use = 0, released = 0;
  for (unsigned n = 0; n < s.num_nodes; ++n) {
    mapped += s.node_mapped[n];
    in_use += s.node_in_use[n];
    released += s.node_released[n];
  }
  mi.arena = mapped;                    // Bytes mapped for the heap.
  mi.ordblks = s.slabs;                 // Slabs (per-ID caches).
  mi.hblkhd = s.meta_bytes;             // Metadata mapped.
  mi.uordblks = in_use;                 // Bytes in use (program + caches).
  mi.fordblks = mapped - in_use;        // Free bytes.
  mi.fsmblks = s.cached_bytes;          // Bytes of objects in the caches.
  mi.keepcost = released;               // Free bytes returned to the OS.
  return mi;
}

CIDMALLOC_EXPORT struct mallinfo mallinfo(void) {
  const struct mallinfo2 m2 = mallinfo2();
  struct mallinfo mi;
  // The old interface has int fields: values saturate at INT_MAX.
  auto clamp = [](size_t v) { return v > 0x7fffffff ? 0x7fffffff : static_cast<int>(v); };
  mi.arena = clamp(m2.arena);
  mi.ordblks = clamp(m2.ordblks);
  mi.smblks = clamp(m2.smblks);
  mi.hblks = clamp(m2.hblks);
  mi.hblkhd = clamp(m2.hblkhd);
  mi.usmblks = clamp(m2.usmblks);
  mi.fsmblks = clamp(m2.fsmblks);
  mi.uordblks = clamp(m2.uordblks);
  mi.fordblks = clamp(m2.fordblks);
  mi.keepcost = clamp(m2.keepcost);
  return mi;
}

// mallopt: every glibc parameter is accepted (returns 1) so programs that
// tune glibc keep working; none changes cidmalloc's behaviour, which the
// CIDMALLOC_* knobs control (README: "mallopt").  Unknown parameters: 0.
CIDMALLOC_EXPORT int mallopt(int param, int value) {
  (void)value;
  switch (param) {
    case M_MXFAST:
    case M_TRIM_THRESHOLD:
    case M_TOP_PAD:
    case M_MMAP_THRESHOLD:
    case M_MMAP_MAX:
    case M_CHECK_ACTION:
    case M_PERTURB:
    case M_ARENA_TEST:
    case M_ARENA_MAX:
      return 1;
    default:
      return 0;
  }
}

// glibc's internal names, which some programs and libraries call directly.
#define CIDMALLOC_ALIAS(name, target) \
  CIDMALLOC_EXPORT __typeof__(target) name \
      __attribute__((alias(#target), copy(target)));
CIDMALLOC_ALIAS(__libc_malloc, malloc)
CIDMALLOC_ALIAS(__libc_free, free)
CIDMALLOC_ALIAS(__libc_calloc, calloc)
CIDMALLOC_ALIAS(__libc_realloc, realloc)
CIDMALLOC_ALIAS(__libc_memalign, memalign)
CIDMALLOC_ALIAS(__libc_valloc, valloc)
CIDMALLOC_ALIAS(__libc_pvalloc, pvalloc)
CIDMALLOC_ALIAS(__libc_mallinfo, mallinfo)
CIDMALLOC_ALIAS(__libc_mallopt, mallopt)
CIDMALLOC_ALIAS(__posix_memalign, posix_memalign)
CIDMALLOC_ALIAS(cfree, free)
