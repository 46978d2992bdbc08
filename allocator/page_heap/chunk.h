// allocator/page_heap/chunk.h: address-space units and their metadata.
//
// Memory comes in 2 MiB chunks (aligned, so huge-page friendly), each owned
// by one node.  Every chunk has a ChunkInfo, found from any address in O(1)
// through the pagemap.  A chunk is either part of a node's page heap (pages
// handed out as power-of-two buddy blocks) or part of one huge mapping.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_CHUNK_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_CHUNK_H_

#include <stddef.h>
#include <stdint.h>

namespace cidmalloc::page_heap {

inline constexpr int kPageShift = 13;
inline constexpr size_t kPageSize = size_t{1} << kPageShift;  // 8 KiB
// The pages `bytes` bytes take, rounded up.
inline constexpr size_t PagesFor(size_t bytes) {
  return (bytes + kPageSize - 1) >> kPageShift;
}
inline constexpr int kChunkShift = 21;
inline constexpr size_t kChunkSize = size_t{1} << kChunkShift;  // 2 MiB
inline constexpr uint32_t kPagesPerChunk = 1u << (kChunkShift - kPageShift);
inline constexpr int kMaxOrder = kChunkShift - kPageShift;  // 8: a chunk
// Small-object spans are at least 64 KiB (8 pages) and aligned to their
// size, so each starts on a distinct multiple of 8 pages.
inline constexpr int kSpanSlotShift = 3;
inline constexpr uint32_t kSpanSlots = kPagesPerChunk >> kSpanSlotShift;

// Each node's pages come from kArenasPerNode heaps, each with its own
// chunks and lock.  Mappings of their own belong to arena 0; small-object
// spans are taken for arena 0 and page runs (AllocLarge up to a chunk) for
// the arena of the calling thread's ID (api layer: ID % kArenasPerNode, so
// that with compact cids the first four threads each have one), as glibc
// gives each thread an arena: two threads that take 128 KiB-2 MiB blocks at
// once no longer meet on one lock and on one chunk's metadata.  An arena
// out of free blocks takes them from another whose lock is free
// (page_heap.cc, AllocFromArenas).  A block goes back to the heap it came
// from (ChunkInfo::arena), whichever thread frees it.
inline constexpr int kArenasPerNode = 4;

enum class ChunkKind : uint8_t { kHeap = 1, kHuge = 2 };
// A kHuge mapping is the live block of one allocation, or freed and kept in
// its node's cache of mappings for reuse (huge_cache.h).
enum class HugeState : uint8_t { kLive = 0, kCached = 1 };

// ChunkInfo::fit_bucket of a chunk freed into since a search last
// measured its longest stretch of free pages (run_fit.h).
inline constexpr uint16_t kUnknownRun = 0xffff;

// Bit index of block `i` of order `k` in ChunkInfo::free_bits.
constexpr uint32_t BlockBit(int k, uint32_t i) {
  return (2 * kPagesPerChunk - (2 * kPagesPerChunk >> k)) + i;
}

struct ChunkInfo {
  // --- Set before SetChunks publishes the record in the pagemap (its
  // release stores pair with LookupChunk's acquire loads), by AllocHuge and
  // by Grow (under the heap lock), then immutable (a kHuge base: see
  // huge_bytes). ---
  uintptr_t base;     // Chunk start (kHeap) or mapping start (kHuge).
  ChunkKind kind;
  uint8_t node;
  uint8_t arena;  // Of the node's heaps (node_heap.h); 0 for kHuge.
  // --- kHuge: the mapping's length and the requested size; changed (with
  // base) only by the thread that owns the allocation: ResizeHuge in
  // realloc, and AllocHuge when it trims a cached mapping it reuses; read
  // by the huge cache under the heap lock while the mapping is cached. ---
  size_t huge_bytes;
  size_t huge_requested;
  // Bytes from `base` advised MADV_HUGEPAGE (AdviseGrowing), 0 if none;
  // when it is less than huge_bytes, the rest is advised MADV_NOHUGEPAGE,
  // a second VMA.  Same writers as huge_bytes.
  size_t huge_advised;
  // --- kHuge: written under the heap lock by the cache (huge_cache.cc);
  // huge_state is also read without it (relaxed) by HugeUsableSize, for a
  // pointer the caller owns unless the program misuses it. ---
  HugeState huge_state;
  ChunkInfo* cache_newer;  // The node's cache list, newest first.
  ChunkInfo* cache_older;

  // --- kHeap buddy state: guarded by the lock of the heap (`node`,
  // `arena`). ---
  // Bit BlockBit(k, i) set: block i of order k (pages [i<<k, (i+1)<<k)) is
  // free and not part of a larger free block.
  uint64_t free_bits[(2 * kPagesPerChunk) / 64];
  // Bit p set: page p's memory was returned to the OS (reads as zero).
  uint64_t released[kPagesPerChunk / 64];
  // The node's list of chunks that have a free block of order k.
  ChunkInfo* order_next[kMaxOrder + 1];
  ChunkInfo* order_prev[kMaxOrder + 1];
  uint16_t listed_orders;  // Bit k: on the node's order-k list.
  // How many blocks of order k are free (bits set at order k): the chunk
  // leaves the order-k list when it drops to 0, without a scan of the bits.
  uint16_t free_blocks[kMaxOrder + 1];
  // The heap's index of chunks by their longest stretch of free pages
  // (run_fit.h): fit_bucket is the list the chunk is on, its recorded
  // stretch (1 to kPagesPerChunk, an upper bound), kUnknownRun for the
  // list of chunks to measure again, 0 for none (no free pages when last
  // measured, or never freed into).
  ChunkInfo* fit_next;
  ChunkInfo* fit_prev;
  uint16_t fit_bucket;

  // --- Large allocations: written when a run is allocated (AllocLarge,
  // after the page heap lock is let go), resized (ResizeRun, under the
  // lock) or freed (FreeLarge, under the lock).  Read under the lock by
  // FreeLarge and ResizeRun, and without it by LargeUsableSize (realloc(),
  // malloc_usable_size()), always for a pointer the program owns, whose
  // hand-over orders the read after the write; the allocation's and the
  // resize's release stores pair with LargeUsableSize's acquire load all
  // the same. ---
  // At a run's first page: its length in pages (0 elsewhere).
  uint16_t run_pages[kPagesPerChunk];

  // --- Small-object spans (owned by the central layer): written under the
  // central list lock of the span's (node, class) when a span is carved or
  // returned.  (Which class a page belongs to is in the span map,
  // pagemap.h.)  The central layer's record of the span starting at slot s
  // (page s<<3).
  void* span_meta[kSpanSlots];
};

inline uint32_t PageIndex(uintptr_t p) {
  return static_cast<uint32_t>((p >> kPageShift) & (kPagesPerChunk - 1));
}

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_CHUNK_H_
