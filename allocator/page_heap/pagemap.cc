#include "allocator/page_heap/pagemap.h"

#include "allocator/os/check.h"
#include "allocator/os/spinlock.h"
#include "allocator/page_heap/meta_arena.h"

namespace cidmalloc::page_heap {

constinit std::atomic<PagemapLeaf*> g_pagemap_root[1u << kRootBits];
constinit std::atomic<SpanTagLeaf*> g_span_tag_root[1u << kSpanRootBits];
constinit SpanTagLeaf g_primary_span_tags;  // .bss, 1 MiB.
constinit SpanTagHint g_span_tag_hint;

namespace {
// Serialises leaf creation (both maps) and pagemap entry updates.
constinit os::SpinLock g_pagemap_lock;
}  // namespace

bool SetChunks(uintptr_t start, size_t bytes, ChunkInfo* info) {
  os::SpinLockHolder h(&g_pagemap_lock);
  const uintptr_t first = start >> kChunkShift;
  const uintptr_t last = (start + bytes - 1) >> kChunkShift;
  for (uintptr_t c = first; c <= last; ++c) {
    std::atomic<PagemapLeaf*>& slot = g_pagemap_root[c >> kLeafBits];
    PagemapLeaf* leaf = slot.load(std::memory_order_relaxed);
    if (leaf == nullptr) {
      if (info == nullptr) continue;
      leaf = static_cast<PagemapLeaf*>(MetaAlloc(sizeof(PagemapLeaf), 4096));
      if (leaf == nullptr) return false;
      // Release: the zeroed leaf is visible before the pointer to it; pairs
      // with the acquire load in LookupChunk().
      slot.store(leaf, std::memory_order_release);
    }
    // Release: what the caller wrote to *info is visible to lookups that
    // find it; pairs with the acquire load in LookupChunk().  (All of it
    // for a huge mapping; Grow sets base, kind and node after this, under
    // its heap lock, before any page of the chunk is handed out.)
    leaf->entry[c & ((1u << kLeafBits) - 1)].store(info,
                                                   std::memory_order_release);
  }
  return true;
}

bool EnsureSpanTagLeaf(uintptr_t chunk_base) {
  os::SpinLockHolder h(&g_pagemap_lock);
  std::atomic<SpanTagLeaf*>& slot = g_span_tag_root[chunk_base >> kSpanLeafShift];
  if (slot.load(std::memory_order_relaxed) != nullptr) return true;
  // The first region gets the static leaf (the primary one), any other a
  // zeroed one from the metadata arena.
  const bool primary = g_span_tag_hint.neg_base.load(
                           std::memory_order_relaxed) == uintptr_t{1} << 63;
  auto* leaf = primary ? &g_primary_span_tags
                       : static_cast<SpanTagLeaf*>(
                             MetaAlloc(sizeof(SpanTagLeaf), 4096));
  if (leaf == nullptr) return false;
  // Release: the zeroed leaf is visible before the pointer to it; pairs
  // with the acquire load in LookupSpanTag().
  slot.store(leaf, std::memory_order_release);
  if (primary) {
    // Relaxed: see LookupSpanTag().  A reader that loads the old base
    // takes the root, and finds the same leaf there.  One that pairs the
    // old base's window (2^63 up) with tags set later takes a garbage
    // pointer there for an object, and its free faults (the pointer is
    // non-canonical) instead of reporting an invalid pointer.
    g_span_tag_hint.neg_base.store(
        0 - (chunk_base & ~((uintptr_t{1} << kSpanLeafShift) - 1)),
        std::memory_order_relaxed);
  }
  return true;
}

void SetSpanTags(uintptr_t start, size_t bytes, uint32_t tag) {
  SpanTagLeaf* leaf =
      g_span_tag_root[start >> kSpanLeafShift].load(std::memory_order_relaxed);
  CIDMALLOC_CHECK(leaf != nullptr, "span map leaf missing");
  const uint32_t mask = (1u << kSpanLeafBits) - 1;
  const uint32_t first = (start >> kSpanTagShift) & mask;
  const uint32_t slots = static_cast<uint32_t>(bytes >> kSpanTagShift);
  for (uint32_t i = first; i < first + slots; ++i) {
    // Relaxed: published to free() through the objects the span hands out
    // (see LookupSpanTag()).
    leaf->tag[i].store(tag, std::memory_order_relaxed);
  }
}

void PagemapForkPrepare() { g_pagemap_lock.Lock(); }
void PagemapForkParent() { g_pagemap_lock.Unlock(); }
void PagemapForkChild() { g_pagemap_lock.ResetAfterFork(); }

}  // namespace cidmalloc::page_heap
