// allocator/page_heap/pagemap.h: address -> ChunkInfo in O(1), lock-free.
//
// A two-level radix tree over the 2^26 chunks of a 47-bit address space.
// Lookups are two dependent loads.  Entries are written under the pagemap
// lock and published with release stores; lookups use acquire loads (plain
// moves on x86-64), so a reader that holds a pointer the allocator returned
// sees the ChunkInfo fully initialised.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGEMAP_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGEMAP_H_

#include <stdint.h>

#include <atomic>

#include "allocator/page_heap/chunk.h"
#include "rseq/state.h"

namespace cidmalloc::page_heap {

inline constexpr int kAddressBits = 47;
inline constexpr int kLeafBits = 13;
inline constexpr int kRootBits = kAddressBits - kChunkShift - kLeafBits;

struct PagemapLeaf {
  std::atomic<ChunkInfo*> entry[1u << kLeafBits];
};
extern std::atomic<PagemapLeaf*> g_pagemap_root[1u << kRootBits]
    CIDMALLOC_HIDDEN;

// The ChunkInfo covering `p`, or nullptr if the allocator never mapped it.
inline ChunkInfo* LookupChunk(uintptr_t p) {
  if (CIDMALLOC_UNLIKELY(p >> kAddressBits)) return nullptr;
  const uintptr_t chunk = p >> kChunkShift;
  PagemapLeaf* leaf =
      g_pagemap_root[chunk >> kLeafBits].load(std::memory_order_acquire);
  if (CIDMALLOC_UNLIKELY(leaf == nullptr)) return nullptr;
  return leaf->entry[chunk & ((1u << kLeafBits) - 1)].load(
      std::memory_order_acquire);
}

// Maps every chunk of [start, start + bytes) to `info` (nullptr unmaps).
// Returns false if a leaf could not be allocated.
bool SetChunks(uintptr_t start, size_t bytes, ChunkInfo* info);

void PagemapForkPrepare();
void PagemapForkParent();
void PagemapForkChild();

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGEMAP_H_
