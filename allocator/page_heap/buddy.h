// allocator/page_heap/buddy.h: the buddy allocator of one heap (a node's
// arena, node_heap.h): its per-order chunk lists, growth by chunk
// reservations, taking and freeing page blocks and ranges, and the parked
// run.  Internal to the page heap: page_heap.cc builds the arenas, the
// release to the OS and the public functions on it.  Every function here
// is called with h->lock held.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_BUDDY_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_BUDDY_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/node_heap.h"
#include "allocator/page_heap/release_decay.h"
#include "allocator/page_heap/run_fit.h"

namespace cidmalloc::page_heap {

// Where a heap is in g_heaps (inline: the release check of every free
// asks, and a call was 3 % of a 72 KiB malloc + free).
inline int NodeOf(const NodeHeap* h) {
  return static_cast<int>(h - &g_heaps[0][0]) / kArenasPerNode;
}
inline int ArenaOf(const NodeHeap* h) {
  return static_cast<int>(h - &g_heaps[0][0]) % kArenasPerNode;
}

// Pages of c in [page, page + n) whose memory went back to the OS.
uint32_t CountReleased(const ChunkInfo* c, uint32_t page, uint32_t n);
inline uint32_t BlocksOfOrder(int k) { return kPagesPerChunk >> k; }
// Free pages whose memory is committed; the parked run counts, as free as
// any free block.
inline size_t CommittedFreePages(const NodeHeap* h) {
  return h->free_pages - h->released_free_pages + h->parked_pages;
}
// After pages were taken: the committed free pages may now be under the
// floor of the last automatic release, and the release delay starts again
// for the pages taken.
inline void NotePagesTaken(NodeHeap* h) {
  const size_t committed = CommittedFreePages(h);
  if (committed < h->release_floor) h->release_floor = committed;
  h->decay.Note(committed);
}

// Whether a heap with no free block large enough may reserve more chunks.
enum class Reserve : uint8_t { kMayGrow, kFreeBlocksOnly };

// The pages of r: where r.pages is not a power of two, at their best fit in
// the chunk whose longest stretch of free pages is the shortest that holds
// them (run_fit.h); else, or where no chunk has room, from a free block of
// r's order (split as needed, its tail freed), which the heap grows for.
// 0 if h has neither and may not (or cannot) grow.  *zeroed tells whether
// every page is known to read as zero.
uintptr_t TakeBlockPages(NodeHeap* h, const PageRequest& r, Reserve reserve,
                         bool* zeroed, ChunkInfo** chunk_out);
// The same, but the parked run first if it has that length and alignment
// (inline: the whole of a malloc + free of one large size in a loop, with
// ParkRun below).
inline uintptr_t TakePages(NodeHeap* h, const PageRequest& r,
                           Reserve reserve, bool* zeroed,
                           ChunkInfo** chunk_out) {
  if (h->parked_pages == r.pages &&
      (h->parked_page & (r.align_pages - 1)) == 0) {
    ChunkInfo* const c = h->parked_chunk;
    const uint32_t page = h->parked_page;
    h->parked_pages = 0;
    h->parked_chunk = nullptr;
    *zeroed = false;  // Its pages were in use.
    NotePagesTaken(h);
    *chunk_out = c;
    return c->base + (uintptr_t{page} << kPageShift);
  }
  return TakeBlockPages(h, r, reserve, zeroed, chunk_out);
}
// Frees pages [page, page + n) of c, as naturally aligned blocks.
void FreeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n);
// Takes pages [page, page + n) of c if every one is free (growth in place),
// merging the parked run first if it lies in c.
bool TakeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n);
// The same without merging the parked run: its pages are not free blocks,
// so a range that holds one of them is not taken.
bool TakeFreeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n);
// Fills map (kPagesPerChunk bits) with a bit per page of c, set where the
// page is in a free block.
void FreePageMap(const ChunkInfo* c, uint64_t* map);
// The order of the free block of c that contains page p, or -1.
int FreeOrderAt(const ChunkInfo* c, uint32_t p);

// The parked run (buddy.cc): runs of up to this many pages (a chunk) freed
// last are kept whole for the next allocation of the same length.
inline constexpr uint32_t kMaxParkedPages = kPagesPerChunk;
// Frees the parked run into the buddy heap, if there is one.
void Unpark(NodeHeap* h);
// Parks the freed run [page, page + n) of c (merging the one parked
// before), or frees it into the buddy heap if it is longer.
inline void ParkRun(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n) {
  if (n > kMaxParkedPages) return FreeRange(h, c, page, n);
  if (h->parked_pages != 0) Unpark(h);
  h->parked_chunk = c;
  h->parked_page = page;
  h->parked_pages = n;
}

// Takes the chunks of h that are wholly free (merging the parked run
// first) off its lists and out of its counts, for their memory and address
// space to go back to the OS; returns them as a list through cache_older.
// The caller unmaps them after letting go of h->lock (UnmapDetached).
// Only when the OS refuses memory: chunks otherwise stay mapped for good.
ChunkInfo* DetachFreeChunks(NodeHeap* h);

// Aborts unless h's buddy state is consistent: lists, counts, merged
// buddies, released bits only on free pages, the parked run.
void CheckHeap(NodeHeap* h);

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_BUDDY_H_
