// tests/allocator/alloc_probe.h: looks inside cidmalloc's heap from a test
// that links it (//:cidmalloc plus the internal layers), to tell what kind
// of block a pointer is and whether a block the test freed really went back.
#ifndef CIDMALLOC_TESTS_ALLOCATOR_ALLOC_PROBE_H_
#define CIDMALLOC_TESTS_ALLOCATOR_ALLOC_PROBE_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/api/alloc.h"
#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/front_end/run_cache.h"
#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc_test {

// Hides a pointer's provenance from the compiler, so that tests may look at
// a block after freeing it, or hand free() a pointer it did not allocate,
// without -Wuse-after-free / -Wfree-nonheap-object (and without the
// optimiser reasoning about it).
template <typename T>
inline T Opaque(T v) {
  asm volatile("" : "+r"(v));
  return v;
}

enum class BlockKind { kNotOurs, kSmall, kLarge, kHuge, kFreePages };

inline BlockKind KindOf(const void* ptr) {
  using namespace cidmalloc::page_heap;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  const ChunkInfo* c = LookupChunk(p);
  if (c == nullptr) return BlockKind::kNotOurs;
  if (c->kind == ChunkKind::kHuge) return BlockKind::kHuge;
  if (cidmalloc::central::ClassOfAddress(p) != 0) return BlockKind::kSmall;
  if (c->run_pages[PageIndex(p)] != 0) return BlockKind::kLarge;
  return BlockKind::kFreePages;
}

// The size class of a small object, 0 otherwise.
inline int ClassOfPointer(const void* ptr) {
  using namespace cidmalloc::page_heap;
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  return cidmalloc::central::ClassOfAddress(p);
}

// The node whose chunk holds `ptr`, or -1.
inline int NodeOfPointer(const void* ptr) {
  const cidmalloc::page_heap::ChunkInfo* c =
      cidmalloc::page_heap::LookupChunk(reinterpret_cast<uintptr_t>(ptr));
  return c == nullptr ? -1 : c->node;
}

// True if the block the test allocated at `ptr` (and has since passed to a
// deallocation function) is free in the allocator's eyes: a small object
// carries the free cookie, a large run's first page has no run length any
// more (or the run sits marked in a run stack), a huge mapping is gone
// from the pagemap or sits in its node's cache.
// Only meaningful right after the deallocation, before anything could
// reuse the block.
inline bool LooksFreed(void* ptr) {
  ptr = Opaque(ptr);
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  using namespace cidmalloc::page_heap;
  const ChunkInfo* c = LookupChunk(p);
  if (c == nullptr) return true;  // A huge mapping, unmapped.
  if (c->kind == ChunkKind::kHuge) {  // Or kept in its node's cache.
    return c->huge_state == HugeState::kCached;
  }
  if (cidmalloc::central::ClassOfAddress(p) != 0) {
    return static_cast<volatile uintptr_t*>(ptr)[1] ==
           cidmalloc::api::FreeMark(p, cidmalloc::api::g_state);
  }
  // A run back in the page heap, or (up to 256 KiB) in the freeing
  // thread's run stack, marked so (front_end/run_cache.h).
  const uint32_t pages = c->run_pages[PageIndex(p)];
  return pages == 0 || (pages <= cidmalloc::front_end::kMaxCachedRunPages &&
                        cidmalloc::front_end::IsCachedRun(ptr));
}

}  // namespace cidmalloc_test

#endif  // CIDMALLOC_TESTS_ALLOCATOR_ALLOC_PROBE_H_
