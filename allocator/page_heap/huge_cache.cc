// allocator/page_heap/huge_cache.cc: freed mappings of their own, kept for
// reuse (huge_cache.h).
#include "allocator/page_heap/huge_cache.h"

#include "allocator/os/check.h"

namespace cidmalloc::page_heap {

namespace {

void Unlink(NodeHeap* h, ChunkInfo* c) {
  if (c->cache_newer != nullptr) {
    c->cache_newer->cache_older = c->cache_older;
  } else {
    h->cache_newest = c->cache_older;
  }
  if (c->cache_older != nullptr) {
    c->cache_older->cache_newer = c->cache_newer;
  } else {
    h->cache_oldest = c->cache_newer;
  }
  c->cache_newer = c->cache_older = nullptr;
  h->cache_bytes -= c->huge_bytes;
}

}  // namespace

size_t CacheLimit(const NodeHeap* h) {
  const size_t threshold = g_config->release_threshold;
  const size_t buddy = CommittedFreeBytes(h);
  return buddy < threshold ? threshold - buddy : 0;
}

ChunkInfo* CachePut(NodeHeap* h, ChunkInfo* c) {
  h->huge_bytes -= c->huge_bytes;
  __atomic_store_n(&c->huge_state, HugeState::kCached, __ATOMIC_RELAXED);
  const size_t limit = CacheLimit(h);
  if (c->huge_bytes > limit) {
    // Larger than all the cache may hold: it goes, not the older mappings
    // that fit (evicting oldest first would have emptied the cache before
    // reaching it).  What the limit no longer allows of them goes too.
    h->mapped_bytes -= c->huge_bytes;
    c->cache_newer = nullptr;
    c->cache_older = CacheEvict(h, limit);
    return c;
  }
  c->cache_newer = nullptr;
  c->cache_older = h->cache_newest;
  if (h->cache_newest != nullptr) h->cache_newest->cache_newer = c;
  h->cache_newest = c;
  if (h->cache_oldest == nullptr) h->cache_oldest = c;
  h->cache_bytes += c->huge_bytes;
  return CacheEvict(h, limit);
}

ChunkInfo* CacheTake(NodeHeap* h, size_t bytes, size_t align) {
  ChunkInfo* best = nullptr;
  for (ChunkInfo* c = h->cache_newest; c != nullptr; c = c->cache_older) {
    if (c->huge_bytes < bytes || (c->base & (align - 1)) != 0) continue;
    if (best == nullptr || c->huge_bytes < best->huge_bytes) {
      best = c;
      if (c->huge_bytes == bytes) break;
    }
  }
  if (best == nullptr) return nullptr;
  Unlink(h, best);
  __atomic_store_n(&best->huge_state, HugeState::kLive, __ATOMIC_RELAXED);
  h->huge_bytes += best->huge_bytes;
  return best;
}

ChunkInfo* CacheEvict(NodeHeap* h, size_t keep) {
  ChunkInfo* detached = nullptr;
  while (h->cache_bytes > keep) {
    ChunkInfo* c = h->cache_oldest;
    Unlink(h, c);
    h->mapped_bytes -= c->huge_bytes;
    c->cache_older = detached;
    detached = c;
  }
  return detached;
}

size_t UnmapDetached(ChunkInfo* list) {
  size_t bytes = 0;
  while (list != nullptr) {
    ChunkInfo* next = list->cache_older;
    bytes += UnmapRecord(list);
    list = next;
  }
  return bytes;
}

void CheckCache(const NodeHeap* h, int node) {
  size_t bytes = 0;
  const ChunkInfo* newer = nullptr;
  for (const ChunkInfo* c = h->cache_newest; c != nullptr;
       c = c->cache_older) {
    CIDMALLOC_CHECK(c->kind == ChunkKind::kHuge && c->node == node &&
                        c->huge_state == HugeState::kCached,
                    "a live or foreign mapping in a node's huge cache");
    CIDMALLOC_CHECK(c->cache_newer == newer, "huge cache list links");
    bytes += c->huge_bytes;
    newer = c;
  }
  CIDMALLOC_CHECK(newer == h->cache_oldest, "huge cache list tail");
  CIDMALLOC_CHECK(bytes == h->cache_bytes, "huge cache byte count");
}

}  // namespace cidmalloc::page_heap
