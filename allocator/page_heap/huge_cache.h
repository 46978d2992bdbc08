// allocator/page_heap/huge_cache.h: freed mappings of their own, kept for
// reuse (internal to layer 3).
//
// An allocation larger than a chunk gets a mapping of its own (huge.cc).
// Unmapped at every free, a program that allocates, fills and frees a
// buffer of a few MiB in a loop paid an mmap, a munmap and a page fault per
// page each time: 3 MiB cost 0.76 ms against 12-21 us under glibc,
// mimalloc and tcmalloc, which all keep such blocks (glibc by raising its
// mmap threshold to the size freed).  A freed mapping now stays, committed,
// in its node's cache, and the next allocation on the node that fits takes
// the smallest that does, the tail it does not need unmapped.
//
// The cache is free memory of its node, bounded by the same threshold as
// the buddy heap's (CIDMALLOC_RELEASE_BYTES): the bytes it holds plus the
// buddy heap's committed free pages stay within it, so a mapping larger
// than the threshold is never kept, and a node whose buddy heap already
// keeps the threshold's worth of free pages keeps no mapping at all.
// Beyond that the oldest go at once, without the release delay (a
// mapping's pages are all in use until it is freed, so there is no idle
// time to wait for).  malloc_trim unmaps them all, and so does a mapping
// the OS refuses (DropFreeMappings, node_heap.h: under an address-space
// limit the cached mappings may be what stands in the way), before the
// allocation is tried once more.
//
// Locking: every function here runs under the lock of the node's arena-0
// heap; the mappings they take off the cache are handed back to the caller
// as a list (through cache_older) to unmap after letting go of the lock
// (UnmapDetached).
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_HUGE_CACHE_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_HUGE_CACHE_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/node_heap.h"

namespace cidmalloc::page_heap {

// Puts the freed mapping `c` in its node's cache, then detaches what the
// threshold no longer allows, oldest first; `c` alone, and the cache left
// as it was, when `c` is larger than all the threshold leaves the cache.
// Returns the detached list.
ChunkInfo* CachePut(NodeHeap* h, ChunkInfo* c);

// Takes the smallest cached mapping of at least `bytes` whose base is
// aligned to `align`, or nullptr.  Its accounting moves from the cache to
// the live huge bytes; the caller trims the tail it does not need.
ChunkInfo* CacheTake(NodeHeap* h, size_t bytes, size_t align);

// Detaches the oldest mappings until the cache holds at most `keep` bytes.
ChunkInfo* CacheEvict(NodeHeap* h, size_t keep);

// The bytes the threshold leaves to the cache: the threshold less the
// buddy heap's committed free bytes.
size_t CacheLimit(const NodeHeap* h);

// Unmaps every record of a detached list (CacheEvict's, or heap chunks
// from DetachFreeChunks: UnmapRecord); returns their bytes.  Without the
// heap lock.
size_t UnmapDetached(ChunkInfo* list);

// Checks the cache's list and byte count (page_heap::CheckInvariants).
void CheckCache(const NodeHeap* h, int node);

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_HUGE_CACHE_H_
