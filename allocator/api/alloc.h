// allocator/api/alloc.h: layer 6's internal entry points, the fast paths
// that every public function (malloc, free, operator new, ...) inlines.
//
// Fast path budgets (x86-64, cid/cpu mode, -O2), checked by
// tests/allocator/fast_path_budget_test:
//   Alloc(small): size-class lookup, one rseq pop, clearing the free cookie:
//                 at most 40 instructions to the return.
//   Free(small):  pagemap lookup, class, misaligned-pointer and double-free
//                 checks, one rseq push: at most 60 instructions.
// Everything else is out of line (noinline) and reached by a tail call.
#ifndef CIDMALLOC_ALLOCATOR_API_ALLOC_H_
#define CIDMALLOC_ALLOCATOR_API_ALLOC_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/pagemap.h"

#define CIDMALLOC_NOINLINE __attribute__((noinline))

namespace cidmalloc::api {

// Freed small objects carry `address ^ g_cookie` in their second word; a
// free() that finds it there is a double free.  Random per process.
extern uintptr_t g_cookie CIDMALLOC_HIDDEN;
// CIDMALLOC_STATS=1: count every operation (the fast paths then take the
// out-of-line counting path).
extern bool g_counting CIDMALLOC_HIDDEN;

// Slow paths.
CIDMALLOC_NOINLINE void* AllocSmallSlow(int cls, void* hit);
CIDMALLOC_NOINLINE void* AllocLarge(size_t size, size_t align, bool clear);
CIDMALLOC_NOINLINE void FreeSlow(void* p);
CIDMALLOC_NOINLINE void FreeSmallSlow(int cls, void* p);
[[noreturn]] CIDMALLOC_NOINLINE void DoubleFree(const char* who, void* p);
[[noreturn]] CIDMALLOC_NOINLINE void InvalidPointer(const char* who, void* p);

inline void* Alloc(size_t size) {
  if (CIDMALLOC_LIKELY(size <= central::kMaxSmallSize)) {
    const int cls = central::ClassOf(size);
    void* p = front_end::TryAlloc(cls);
    if (CIDMALLOC_LIKELY(p != nullptr) && CIDMALLOC_LIKELY(!g_counting)) {
      static_cast<uintptr_t*>(p)[1] = 0;  // Not free any more.
      return p;
    }
    return AllocSmallSlow(cls, p);
  }
  return AllocLarge(size, central::kMinAlign, false);
}

inline void Free(void* ptr) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  page_heap::ChunkInfo* chunk = page_heap::LookupChunk(p);
  if (CIDMALLOC_UNLIKELY(chunk == nullptr)) return FreeSlow(ptr);
  const int cls = chunk->page_class[page_heap::PageIndex(p)];
  if (CIDMALLOC_UNLIKELY(cls == 0)) return FreeSlow(ptr);
  if (CIDMALLOC_UNLIKELY(!central::IsObjectStart(p, cls))) {
    InvalidPointer("free(): invalid pointer (not the start of an object)",
                   ptr);
  }
  uintptr_t* words = static_cast<uintptr_t*>(ptr);
  const uintptr_t cookie = p ^ g_cookie;
  if (CIDMALLOC_UNLIKELY(words[1] == cookie)) DoubleFree("free()", ptr);
  words[1] = cookie;
  if (CIDMALLOC_LIKELY(os::NumNodes() == 1 ||
                       chunk->node == os::CurrentNode()) &&
      CIDMALLOC_LIKELY(!g_counting) &&
      CIDMALLOC_LIKELY(front_end::TryFree(cls, ptr))) {
    return;
  }
  return FreeSmallSlow(cls, ptr);
}

// Usable size of a live allocation; aborts on a pointer this heap did not
// return (or already freed, where that can be told).
size_t UsableSize(const char* who, void* p);

// Allocation with alignment `align` (a power of two).
void* AllocAligned(size_t align, size_t size);

}  // namespace cidmalloc::api

#endif  // CIDMALLOC_ALLOCATOR_API_ALLOC_H_
