// allocator/page_heap/pagemap.h: the two lock-free maps from an address to
// its metadata.
//
// The pagemap: address -> ChunkInfo.  A two-level radix tree over the 2^26
// chunks of a 47-bit address space (48 on AArch64); lookups are two
// dependent loads.
// Entries are written under the pagemap lock and published with release
// stores; lookups use acquire loads (plain moves on x86-64), so a reader
// that holds a pointer the allocator returned sees the ChunkInfo fully
// initialised.
//
// The span map: address -> the 32-bit tag of the small-object span that
// holds it, 0 if none.  It is free()'s fast path.  Small-object spans are
// at least 64 KiB and aligned to their size (chunk.h), so one tag per
// 64 KiB slot suffices.  A leaf covers 16 GiB (262,144 slots, 1 MiB of
// tags, written only where spans are); the root is 64 KiB of
// zero-initialised .bss.  The leaf of the first chunk the heap maps is also
// the "primary" leaf, a static array: a pointer in its 16 GiB finds its
// tag with one load whose address depends on the pointer (after the
// region's base, loaded independently, and a predicted comparison), where
// the root would add a second dependent load (and the pagemap two: leaf,
// ChunkInfo).  Other pointers go through the root.  The page heap creates
// a chunk's leaf when it maps the chunk, so setting a tag never allocates.
// The value is opaque here: the central layer, which owns the spans,
// defines it.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGEMAP_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGEMAP_H_

#include <stdint.h>

#include <atomic>

#include "allocator/page_heap/chunk.h"
#include "rseq/state.h"

namespace cidmalloc::page_heap {

// User addresses: 47 bits on x86-64 (4-level page tables; 5-level ones
// give more only to an mmap hint above them, which the allocator never
// passes), 48 on AArch64 (its user half, also where the kernel supports
// 52 bits, which again takes a hint).
#if defined(__aarch64__)
inline constexpr int kAddressBits = 48;
#else
inline constexpr int kAddressBits = 47;
#endif
inline constexpr int kLeafBits = 13;
inline constexpr int kRootBits = kAddressBits - kChunkShift - kLeafBits;

// Entries and root slots: release stores under the pagemap lock
// (SetChunks; a root slot is set once, to a zeroed leaf), acquire loads in
// LookupChunk() without it.
struct PagemapLeaf {
  std::atomic<ChunkInfo*> entry[1u << kLeafBits];
};
extern std::atomic<PagemapLeaf*> g_pagemap_root[1u << kRootBits]
    CIDMALLOC_HIDDEN;

// The ChunkInfo covering `p`, or nullptr if the allocator never mapped it.
inline ChunkInfo* LookupChunk(uintptr_t p) {
  if (CIDMALLOC_UNLIKELY(p >> kAddressBits)) return nullptr;
  const uintptr_t chunk = p >> kChunkShift;
  // Acquire (both loads): pairs with the release stores in SetChunks().
  PagemapLeaf* leaf =
      g_pagemap_root[chunk >> kLeafBits].load(std::memory_order_acquire);
  if (CIDMALLOC_UNLIKELY(leaf == nullptr)) return nullptr;
  return leaf->entry[chunk & ((1u << kLeafBits) - 1)].load(
      std::memory_order_acquire);
}

// Maps every chunk of [start, start + bytes) to `info` (nullptr unmaps).
// Returns false if a leaf could not be allocated.
bool SetChunks(uintptr_t start, size_t bytes, ChunkInfo* info);

// ---- The span map ----------------------------------------------------------
inline constexpr int kSpanTagShift = kPageShift + kSpanSlotShift;  // 64 KiB
inline constexpr int kSpanLeafShift = 34;                          // 16 GiB
inline constexpr int kSpanRootBits = kAddressBits - kSpanLeafShift;
inline constexpr int kSpanLeafBits = kSpanLeafShift - kSpanTagShift;

// Tags: relaxed stores by SetSpanTags under the central list lock of the
// span's (node, class), relaxed loads in LookupSpanTag() (see there).  Root
// slots: set once, under the pagemap lock, with a release store of a
// zeroed leaf (EnsureSpanTagLeaf); acquire loads in LookupSpanTag(), a
// relaxed one in SetSpanTags (the span's chunk, whose leaf was set up when
// it was mapped, came to its caller through the heap lock).
struct SpanTagLeaf {
  std::atomic<uint32_t> tag[1u << kSpanLeafBits];
};
extern std::atomic<SpanTagLeaf*> g_span_tag_root[1u << kSpanRootBits]
    CIDMALLOC_HIDDEN;

// The primary leaf: a 1 MiB array in .bss (untouched pages cost nothing),
// which free() addresses RIP-relative, and `base`, the first address of
// its 16 GiB region: the region of the first chunk the heap maps.  Until
// then base is 2^63 (non-canonical), and the leaf is all zero, so that a
// garbage pointer in that window finds tag 0.  `base` is written once,
// under the pagemap lock; the leaf's tags as in any leaf (SpanTagLeaf).
extern SpanTagLeaf g_primary_span_tags CIDMALLOC_HIDDEN;
struct SpanTagHint {
  // 0 - base: the lookup adds it to the pointer, where `p - base` cost a
  // register copy of p on the way to the tag (x86's sub overwrites its
  // destination, and free keeps p).  Initially base = 2^63 (0 - 2^63 is
  // 2^63 again).
  std::atomic<uintptr_t> neg_base{uintptr_t{1} << 63};
};
extern SpanTagHint g_span_tag_hint CIDMALLOC_HIDDEN;

// The tag of the span holding `p`; 0 if `p` is in no small-object span
// (a large allocation, a free span, or memory the allocator never mapped).
// Relaxed: a caller that owns an object of the span got the pointer through
// some synchronisation that happens after the span's tag was set.
// In the primary region: add, shift, one unsigned comparison, and the tag
// load (two loads: the base and the tag; the leaf's address is a constant).
inline uint32_t LookupSpanTag(uintptr_t p) {
  // Relaxed: the base publishes nothing.  The primary leaf is static, and
  // its tags are published through the objects (above); a reader that
  // still sees 2^63 takes the root below, which has the leaf too.
  const uintptr_t slot =
      (p + g_span_tag_hint.neg_base.load(std::memory_order_relaxed)) >>
      kSpanTagShift;
  if (CIDMALLOC_LIKELY(slot < (uintptr_t{1} << kSpanLeafBits))) {
    return g_primary_span_tags.tag[slot].load(std::memory_order_relaxed);
  }
  if (CIDMALLOC_UNLIKELY(p >> kAddressBits)) return 0;
  // Acquire: pairs with the release store in EnsureSpanTagLeaf().
  SpanTagLeaf* leaf =
      g_span_tag_root[p >> kSpanLeafShift].load(std::memory_order_acquire);
  if (CIDMALLOC_UNLIKELY(leaf == nullptr)) return 0;
  return leaf->tag[(p >> kSpanTagShift) & ((1u << kSpanLeafBits) - 1)].load(
      std::memory_order_relaxed);
}

// Creates the span-map leaf covering the chunk at `chunk_base` if there is
// none.  False (errno ENOMEM) if it could not be allocated.
bool EnsureSpanTagLeaf(uintptr_t chunk_base);

// Sets the tag of every 64 KiB slot of [start, start + bytes), a span
// inside one chunk whose leaf exists.  Called by the span's owner only.
void SetSpanTags(uintptr_t start, size_t bytes, uint32_t tag);

void PagemapForkPrepare();
void PagemapForkParent();
void PagemapForkChild();

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_PAGEMAP_H_
