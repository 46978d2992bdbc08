// allocator/page_heap/page_heap.h: layer 3, the per-node page heap.
//
// Each node reserves address space in 2 MiB-aligned chunks (reservations
// grow from 1 to 32 chunks), binds them to the node (CIDMALLOC_NUMA_POLICY)
// and hands out power-of-two, naturally aligned blocks of 8 KiB pages with
// a buddy allocator; a run of any length is a block with its tail given
// back.  Allocations larger than a chunk get a mapping of their own, kept
// for reuse once freed while the node's free memory stays within the
// threshold below (huge_cache.h).  Free memory past CIDMALLOC_RELEASE_BYTES
// per node (in its arena 0; a kArenasPerNode-th of it in each other arena),
// and all of it on malloc_trim, goes back to the OS with madvise (munmap for
// cached mappings).
//
// Each node has a few heaps (arenas, node_heap.h): arena 0 serves the
// small-object spans and the mappings of their own, and page runs go to the
// arena of the calling thread's ID, so that threads taking large blocks at
// once do not share a lock.
//
// Locking: one spin lock per heap guards that heap's buddy state, lists and
// counters; no other lock is taken while holding it except the meta arena's
// and the pagemap's (lock order: node heap -> pagemap -> meta arena).
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGE_HEAP_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGE_HEAP_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/os/config.h"
#include "allocator/page_heap/chunk.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::page_heap {

// Reads the policy and threshold from `config` (kept by pointer).
void Init(const os::Config* config);

// A naturally aligned block of 2^order pages on `node`, for a small-object
// span.  Returns its address, or 0 with errno ENOMEM.  *zeroed tells whether
// every page is known to read as zero.
uintptr_t AllocSpan(int node, int order, bool* zeroed);
void FreeSpan(ChunkInfo* chunk, uintptr_t start, int order);
// Returns [p, p+size), kernel pages inside a span its owner holds no live
// object in, to the OS with the configured advice (CIDMALLOC_RELEASE_
// METHOD) while the span stays allocated.  Returns false if the kernel
// refused.  The heap's counters do not change: the span's pages still
// count as in use.
bool ReleaseSpanPages(uintptr_t p, size_t size);

// Allocations above the largest size class: a page run (up to a chunk),
// from the node's heap `arena` (taken modulo kArenasPerNode, chunk.h),
// or a mapping of their own.  `align` is a power of two.  nullptr with
// ENOMEM.
void* AllocLarge(int node, int arena, size_t bytes, size_t align,
                 bool* zeroed);
// Frees a large allocation.  Aborts with a message if `p` is not the start
// of a live one (invalid pointer or double free).
void FreeLarge(ChunkInfo* chunk, uintptr_t p);
// Resizes the page run that starts at p to hold `bytes` (<= a chunk) where
// it is: shrinking frees its tail; growing takes the pages after it if they
// are free.  Returns false (nothing changed) if it cannot.  The caller owns
// p (realloc).
bool ResizeRun(ChunkInfo* chunk, uintptr_t p, size_t bytes);
// Resizes the mapping of its own that starts at p (chunk->kind kHuge) to
// hold `bytes` (> a chunk) without copying: mremap, in place if the
// address space after it is free, else moved onto a fresh chunk-aligned
// reservation.  Returns the (possibly new) address, or nullptr if the
// caller must allocate and copy.  The caller owns p (realloc).
void* ResizeHuge(ChunkInfo* chunk, uintptr_t p, size_t bytes);
// The mapping of its own that starts at p (chunk->kind kHuge) is a buffer
// realloc grows: asks for transparent huge pages on the chunks its
// requested size fills, and for none on a last chunk it fills in part
// (CIDMALLOC_HUGE_PAGES), before the caller copies into it.  ResizeHuge
// does this itself when it resizes a mapping.
void AdviseGrowing(ChunkInfo* chunk);
// Usable bytes of the large allocation starting at p, or 0 if p is not the
// start of a live large allocation: a page run's pages; a mapping's
// requested size rounded up to the kernel's page (huge.cc).
size_t LargeUsableSize(const ChunkInfo* chunk, uintptr_t p);
// The pages of the live page run starting at p in `chunk`, or 0 if p is no
// such start (or the chunk is a huge mapping): LargeUsableSize's page-run
// case, inline for free()'s run-stack path.  The caller owns p.
inline uint32_t HeapRunPages(const ChunkInfo* chunk, uintptr_t p) {
  if (chunk->kind != ChunkKind::kHeap || (p & (kPageSize - 1)) != 0) return 0;
  // Acquire, without the heap lock: pairs with the release stores in
  // AllocLarge() and ResizeRun() (see chunk.h).
  return __atomic_load_n(&chunk->run_pages[PageIndex(p)], __ATOMIC_ACQUIRE);
}

// Returns free memory of every node to the OS, keeping `keep_bytes` per
// node.  Returns the bytes released.
size_t ReleaseFreeMemory(size_t keep_bytes);

// The automatic release (the threshold and the delay) of every heap of
// every node, as a free of a span or large block runs it on its own heap:
// the background thread's tick (api/background.h), so that memory that
// went idle goes back on time in a process that frees nothing more, and
// the slow paths' idle scan (front_end.h, MaybeDrainIdle), so that pages
// freed into one arena go back while only other arenas see frees.  kSkipBusy
// passes over a heap whose lock is taken (a slow path does not wait).
enum class LockWait : uint8_t { kWait, kSkipBusy };
void RunAutomaticRelease(LockWait wait = LockWait::kWait);

struct NodeStats {
  size_t mapped_bytes;    // Chunks reserved plus huge mappings.
  size_t free_bytes;      // Free pages in the buddy heap, and the
                          // mappings its huge cache keeps.
  size_t released_bytes;  // Of those, returned to the OS.
  size_t huge_bytes;      // Live huge mappings.
  size_t bind_failures;   // mbind calls the kernel refused.
};
void GetNodeStats(int node, NodeStats* out);

// Checks the buddy invariants of every node (debug builds and tests).
void CheckInvariants();

void ForkPrepare();
void ForkParent();
void ForkChild();

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGE_HEAP_H_
