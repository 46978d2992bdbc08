// allocator/page_heap/run_fit.h: where a page run that is no power of two
// goes in a heap: an index of its chunks by their longest stretch of free
// pages.  Internal to the page heap (buddy.cc calls it); every function is
// called with h->lock held.
//
// A run of n pages once needed a free buddy block of 2^ceil(log2 n) pages,
// aligned to that size: a chunk whose free pages lay in smaller pieces
// could not serve it, even where n of them were contiguous, and the heap
// took fresh pages instead (threads replacing buffers of random sizes to
// 1 MiB kept 2.3-2.9x their live bytes resident).  A run now goes to the
// chunk whose longest stretch of free pages is the shortest that holds it,
// at its best fit there; only where no chunk has room does it take a block
// of its order (docs/benchmarks/tuning_log.md).
//
// The index: each heap keeps its chunks in lists by their recorded longest
// stretch, 1 to kPagesPerChunk pages (ChunkInfo::fit_bucket; a bitmap marks
// the lists that are not empty), and the chunks whose stretch is not known
// any more on a list of their own.  Any free into a chunk (MarkFree) moves
// it to that list; a search measures those again first (a scan of the
// chunk's buddy bits), then takes the shortest list that holds the run.
// Taking pages only shortens stretches, so a recorded length is an upper
// bound: a chunk found shorter than its list says moves down.  A search
// thus costs a scan of each chunk freed into since the last one and of the
// chunk it takes.  The first version walked the buddy heap's order lists,
// a visit per chunk: a program that replaces buffers of 136 KiB-1 MiB at
// random among 2,000 (about 560 chunks) took 890-940 ns a replacement,
// 2,500 among 8,000; with the index 580-610 and 580 (glibc 570 and 730,
// the buddy block alone 130-140 and 205).
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_RUN_FIT_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_RUN_FIT_H_

#include <stdint.h>

#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/node_heap.h"

namespace cidmalloc::page_heap {

// What an allocation asks of a heap: `pages` pages at an alignment of
// `align_pages` pages (a power of two), and `order`, the least k with 2^k
// at least both: the buddy block that holds them.
struct PageRequest {
  uint32_t pages;
  uint32_t align_pages;
  int order;
};

// Puts c on the list `bucket` of h's index (0: on none), off the one it
// was on.
void FitMove(NodeHeap* h, ChunkInfo* c, uint16_t bucket);

// c's free pages changed (MarkFree): its longest stretch is measured again
// at the next search.  Inline: every free of a block calls it.
inline void FitForget(NodeHeap* h, ChunkInfo* c) {
  if (c->fit_bucket != kUnknownRun) FitMove(h, c, kUnknownRun);
}

// Takes c off the index (a chunk leaving the heap).
void FitRemove(NodeHeap* h, ChunkInfo* c);

// The chunk and first page of r's pages (r.pages not a power of two) at
// their best fit in the chunk whose longest stretch of free pages is the
// shortest that holds them; false if no chunk of h has room.  Leaves the
// pages free: the caller takes them.
bool FindRun(NodeHeap* h, const PageRequest& r, ChunkInfo** chunk,
             uint32_t* page);

// Aborts unless h's index is consistent: every chunk with free pages is on
// it, each list holds the chunks its length names (an upper bound of their
// longest stretch), the bitmap marks the lists that are not empty.
void CheckFit(NodeHeap* h);

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_RUN_FIT_H_
