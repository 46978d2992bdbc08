// allocator/page_heap/node_heap.h: the page heap's per-node state, shared by
// its two halves: page_heap.cc (chunks, the buddy allocator, page runs,
// release) and huge.cc (allocations with a mapping of their own).  Internal
// to the page heap; other layers use page_heap.h.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_NODE_HEAP_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_NODE_HEAP_H_

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "allocator/os/config.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/release_decay.h"
#include "rseq/state.h"

namespace cidmalloc::page_heap {

struct alignas(64) NodeHeap {
  os::SpinLock lock;
  // Everything below is guarded by `lock`.
  ChunkInfo* order_head[kMaxOrder + 1] = {};
  // The index of chunks by longest stretch of free pages (run_fit.h):
  // fit_head[L] lists the chunks whose recorded stretch is L pages, bit L
  // of fit_nonempty is set while that list is not empty, fit_unknown lists
  // the chunks to measure again.
  ChunkInfo* fit_unknown = nullptr;
  ChunkInfo* fit_head[kPagesPerChunk + 1] = {};
  uint64_t fit_nonempty[kPagesPerChunk / 64 + 1] = {};
  // The page run freed last, kept whole (not merged into the buddy heap)
  // for an allocation of the same length (buddy.h, ParkRun); parked_pages
  // is 0 when there is none.  Its pages are not free blocks (free_pages
  // leaves them out) but count as committed free memory
  // (CommittedFreePages) and in the stats' free bytes.
  ChunkInfo* parked_chunk = nullptr;
  uint32_t parked_page = 0;
  uint32_t parked_pages = 0;
  size_t mapped_bytes = 0;         // Chunks plus huge mappings.
  size_t huge_bytes = 0;           // Live huge mappings.
  size_t free_pages = 0;           // Free pages in this node's chunks.
  size_t released_free_pages = 0;  // Free pages whose memory the OS has.
  // Committed free pages (free_pages - released_free_pages) that the last
  // automatic release left; the next waits for half a threshold more
  // (page_heap.cc, MaybeRelease).
  size_t release_floor = 0;
  // How long the committed free pages have been free, for the release
  // delay (page_heap.cc, MaybeRelease).
  ReleaseDecay decay;
  size_t bind_failures = 0;
  uint32_t next_reserve_chunks = 0;
  // Freed mappings of their own kept for reuse (huge_cache.h): a list,
  // newest first, and their bytes, which count as the node's free memory.
  ChunkInfo* cache_newest = nullptr;
  ChunkInfo* cache_oldest = nullptr;
  size_t cache_bytes = 0;
};

extern NodeHeap g_heaps[os::kMaxNodes][kArenasPerNode] CIDMALLOC_HIDDEN;
inline NodeHeap* HeapOf(const ChunkInfo* c) {
  return &g_heaps[c->node][c->arena];
}
// Set once by Init(), during initialisation; read-only afterwards.
extern const os::Config* g_config CIDMALLOC_HIDDEN;

// Committed free pages of the buddy heap, in bytes.  Under h->lock.
size_t CommittedFreeBytes(const NodeHeap* h);

// huge.cc (they take the heap lock themselves).
void* AllocHuge(int node, size_t bytes, size_t align, bool* zeroed);
void FreeHuge(ChunkInfo* c, uintptr_t p);
size_t HugeUsableSize(const ChunkInfo* c, uintptr_t p);
// Unmaps every node's cached mappings and every heap's wholly free chunks;
// returns their bytes.  Called when the OS refuses a mapping (address
// space under `ulimit -v`, or the commit limit): what the heaps keep
// mapped but free may be what stands in the way.  Takes each heap's lock
// in turn: the caller holds no heap lock.
size_t DropFreeMappings();
// Runs attempt(), an allocation from the OS (null or 0 when refused); if
// it failed and DropFreeMappings gave anything back, runs it once more.
// errno is as on entry when an attempt succeeds.
template <class Attempt>
auto AllocOrDropAndRetry(Attempt attempt) -> decltype(attempt()) {
  const int saved = errno;
  auto result = attempt();
  if (result || DropFreeMappings() == 0) return result;  // errno: ENOMEM.
  result = attempt();
  if (result) errno = saved;
  return result;
}
// Unmaps a record no longer reachable (a mapping taken off the cache or
// never published, or a heap chunk DetachFreeChunks took): its pagemap
// entries, the memory, the record.  Returns the bytes.  Without the heap
// lock.
size_t UnmapRecord(ChunkInfo* c);

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_NODE_HEAP_H_
