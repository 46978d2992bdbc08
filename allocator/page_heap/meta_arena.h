// allocator/page_heap/meta_arena.h: memory for the allocator's own
// metadata (ChunkInfos, pagemap leaves, front-end slabs, ID tables).
//
// A bump allocator over 2 MiB mappings, never returned to the OS, plus a
// free list for ChunkInfo records (huge mappings come and go).  It never
// calls malloc.  Guarded by one spin lock; callers are slow paths only.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_META_ARENA_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_META_ARENA_H_

#include <stddef.h>

#include "allocator/page_heap/chunk.h"

namespace cidmalloc::page_heap {

// Zeroed memory at `phase` bytes past a multiple of `align` (a power of
// two, <= 4096; phase < align).  nullptr with ENOMEM.
void* MetaAlloc(size_t bytes, size_t align, size_t phase = 0);
ChunkInfo* NewChunkInfo();             // Zeroed.
void DeleteChunkInfo(ChunkInfo* info);  // Back to the free list.
size_t MetaBytesMapped();

void MetaForkPrepare();
void MetaForkParent();
void MetaForkChild();

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_META_ARENA_H_
