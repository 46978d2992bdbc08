// allocator/page_heap/huge.cc: allocations with a mapping of their own
// (more than a chunk, or aligned beyond one).
//
// Each is mmap'ed, rounded to whole chunks so that no other allocation
// shares its pagemap entries, and bound to its node.  A freed one goes to
// its node's cache of mappings for reuse, within the release threshold
// (huge_cache.h), or is unmapped.
// realloc resizes a mapping with mremap (ResizeHuge), moving its pages
// instead of copying them.
//
// Transparent huge pages (CIDMALLOC_HUGE_PAGES): a mapping that realloc
// grows, or that realloc moves a growing buffer into, is advised
// MADV_HUGEPAGE: one fault per 2 MiB instead of 512 (realloc_growth: 555 k
// faults -> 6 k, half the time, +3 MB peak RSS).  A buffer grown by
// realloc is being filled; a fresh malloc may be used sparsely, where a
// huge page would make up to 2 MiB resident for a few bytes.  Advising
// every mapping at creation also made the fragmentation workload 1.35x
// slower here (each 2 MiB fault of fresh guest memory costs the VM ~3 ms)
// and 1.7 % larger, for no gain (docs/benchmarks/tuning_log.md).  The
// advice covers the chunks the requested size fills; a last chunk it fills
// only in part gets MADV_NOHUGEPAGE, so that it stays in 4 KiB pages: as a
// huge page the whole 2 MiB became resident on the first touch of its
// part (50 buffers grown to 3 MB kept 209 MB resident, glibc 148 MB).
// That splits the mapping into two VMAs, which mremap cannot grow as one,
// so ResizeHuge advises the tail MADV_HUGEPAGE again first, which merges
// them, and splits them anew after.
//
// malloc_usable_size of such a block is its requested size rounded up to
// the kernel's page, as glibc's for its mmapped chunks, not the mapping:
// the mapping's slack lets realloc grow into it without a system call,
// but a program that sizes its buffers by the usable size (redis's
// used_memory) would count up to 2 MiB more per block.
#include <errno.h>

#include "allocator/os/check.h"
#include "allocator/os/os.h"
#include "allocator/page_heap/buddy.h"
#include "allocator/page_heap/huge_cache.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/node_heap.h"
#include "allocator/page_heap/page_heap.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::page_heap {

size_t UnmapRecord(ChunkInfo* c) {
  const size_t bytes =
      c->kind == ChunkKind::kHuge ? c->huge_bytes : kChunkSize;
  SetChunks(c->base, bytes, nullptr);
  os::Unmap(reinterpret_cast<void*>(c->base), bytes);
  DeleteChunkInfo(c);
  return bytes;
}

namespace {

// A cached mapping of at least map_bytes, aligned to map_align, made the
// live block of a `bytes` allocation; nullptr if the node's cache has none.
void* ReuseCached(NodeHeap* h, size_t bytes, size_t map_bytes,
                  size_t map_align) {
  ChunkInfo* c;
  {
    os::SpinLockHolder hold(&h->lock);
    if (h->cache_bytes == 0) return nullptr;
    c = CacheTake(h, map_bytes, map_align);
  }
  if (c == nullptr) return nullptr;
  // Ours now: what it has beyond map_bytes goes back to the OS, its
  // pagemap entries first.
  if (c->huge_bytes > map_bytes) {
    const size_t tail = c->huge_bytes - map_bytes;
    SetChunks(c->base + map_bytes, tail, nullptr);
    os::Unmap(reinterpret_cast<void*>(c->base + map_bytes), tail);
    c->huge_bytes = map_bytes;
    os::SpinLockHolder hold(&h->lock);
    h->huge_bytes -= tail;
    h->mapped_bytes -= tail;
  }
  c->huge_requested = bytes;
  if (c->huge_advised > map_bytes) c->huge_advised = map_bytes;
  return reinterpret_cast<void*>(c->base);
}

}  // namespace

void* AllocHuge(int node, size_t bytes, size_t align, bool* zeroed) {
  const size_t map_align = align > kChunkSize ? align : kChunkSize;
  if (bytes > (size_t{1} << 46)) {
    errno = ENOMEM;
    return nullptr;
  }
  const size_t map_bytes = (bytes + kChunkSize - 1) & ~(kChunkSize - 1);
  NodeHeap* h = &g_heaps[node][0];
  if (void* reused = ReuseCached(h, bytes, map_bytes, map_align)) {
    *zeroed = false;
    return reused;
  }
  void* mem = AllocOrDropAndRetry(
      [&] { return os::MapAligned(map_bytes, map_align); });
  if (mem == nullptr) return nullptr;
  ChunkInfo* info = NewChunkInfo();
  if (info == nullptr) {
    os::Unmap(mem, map_bytes);
    errno = ENOMEM;
    return nullptr;
  }
  info->base = reinterpret_cast<uintptr_t>(mem);
  info->kind = ChunkKind::kHuge;
  info->node = static_cast<uint8_t>(node);
  info->arena = 0;
  info->huge_bytes = map_bytes;
  info->huge_requested = bytes;
  info->huge_advised = 0;
  info->huge_state = HugeState::kLive;
  info->cache_newer = info->cache_older = nullptr;
  bool bound = true;
  if (os::NumNodes() > 1) {
    bound = os::BindToNode(mem, map_bytes, node, g_config->numa_policy);
  }
  if (!SetChunks(info->base, map_bytes, info)) {
    SetChunks(info->base, map_bytes, nullptr);
    os::Unmap(mem, map_bytes);
    DeleteChunkInfo(info);
    errno = ENOMEM;
    return nullptr;
  }
  {
    os::SpinLockHolder hold(&h->lock);
    h->huge_bytes += map_bytes;
    h->mapped_bytes += map_bytes;
    if (!bound) ++h->bind_failures;
  }
  *zeroed = true;
  return mem;
}

void FreeHuge(ChunkInfo* c, uintptr_t p) {
  if (p != c->base) {
    os::FatalMisuse("free(): invalid pointer", reinterpret_cast<void*>(p));
  }
  NodeHeap* h = HeapOf(c);
  ChunkInfo* evicted;
  {
    os::SpinLockHolder hold(&h->lock);
    if (c->huge_state == HugeState::kCached) {
      h->lock.Unlock();
      os::FatalMisuse("free(): double free (the block's mapping is cached)",
                      reinterpret_cast<void*>(p));
    }
    evicted = CachePut(h, c);
  }
  UnmapDetached(evicted);
}

void AdviseGrowing(ChunkInfo* c) {
  if (c->kind != ChunkKind::kHuge || !g_config->huge_pages) return;
  void* const base = reinterpret_cast<void*>(c->base);
  // All of it first: one VMA again if it was split.
  if (!os::AdviseHugePages(base, c->huge_bytes)) return;
  c->huge_advised = c->huge_bytes;
  // The chunks the requested size fills (it is over a chunk) keep the
  // advice; a last chunk it fills only in part gets none (see the top of
  // this file).
  const size_t full = c->huge_requested & ~(kChunkSize - 1);
  if (full == c->huge_bytes) return;
  // The VMA gets its anon_vma (the kernel's record of its anonymous pages)
  // at its first write fault.  Split before that, each half got one of its
  // own when first written, and the two could never merge again: the
  // mremap after JoinAdvice failed with EFAULT.  So write the first byte
  // first, as it is: the caller owns the block (realloc), and it is being
  // filled (the head chunk is in use, or about to be copied into).
  volatile char* first = static_cast<volatile char*>(base);
  *first = *first;
  if (os::AdviseNoHugePages(reinterpret_cast<void*>(c->base + full),
                            c->huge_bytes - full)) {
    c->huge_advised = full;
  }
}

namespace {

// Makes the mapping one VMA again before mremap grows or moves it: its
// tail advised as its head, which lets the kernel merge them.  Returns
// false if the kernel refused (mremap would then fail with EFAULT).
bool JoinAdvice(ChunkInfo* c) {
  if (c->huge_advised == 0 || c->huge_advised == c->huge_bytes) return true;
  if (!os::AdviseHugePages(reinterpret_cast<void*>(c->base + c->huge_advised),
                           c->huge_bytes - c->huge_advised)) {
    return false;
  }
  c->huge_advised = c->huge_bytes;
  return true;
}

// `bytes` rounded up to the kernel's page.
size_t KernelPageRoundUp(size_t bytes) {
  const size_t page = os::KernelPageSize();
  return (bytes + page - 1) & ~(page - 1);
}

// What a mapping of `mapping` bytes at p holds past `bytes` is no longer
// the program's once realloc shrinks it to `bytes` (realloc keeps only the
// first `bytes`): its pages go back to the OS, as glibc's shrunk mmapped
// chunks end at the page.  A huge page there, faulted while the chunk was
// advised, would keep all 2 MiB (50 buffers grown to 12 MB and cut to 7
// MB: 414 MB resident, glibc 343 MB).
void ReleasePastSize(uintptr_t p, size_t bytes, size_t mapping) {
  const size_t keep = KernelPageRoundUp(bytes);
  if (keep < mapping) {
    os::ReleasePages(reinterpret_cast<void*>(p + keep), mapping - keep,
                     g_config->release_method);
  }
}

}  // namespace

size_t HugeUsableSize(const ChunkInfo* c, uintptr_t p) {
  // Relaxed: a pointer the caller owns was made live before it got it; a
  // cached mapping's (a freed pointer) gives 0, as for any invalid one.
  if (__atomic_load_n(&c->huge_state, __ATOMIC_RELAXED) != HugeState::kLive) {
    return 0;
  }
  if (p != c->base) return 0;
  return KernelPageRoundUp(c->huge_requested);
}

void* ResizeHuge(ChunkInfo* c, uintptr_t p, size_t bytes) {
  if (c->kind != ChunkKind::kHuge || p != c->base || bytes <= kChunkSize ||
      bytes > (size_t{1} << 46)) {
    return nullptr;
  }
  const size_t old_bytes = c->huge_bytes;
  const size_t new_bytes = (bytes + kChunkSize - 1) & ~(kChunkSize - 1);
  void* const old = reinterpret_cast<void*>(p);
  if (new_bytes == old_bytes) {
    if (bytes < c->huge_requested) ReleasePastSize(p, bytes, new_bytes);
    c->huge_requested = bytes;
    // Grown into the slack so that it fills a chunk more: advised too.
    const size_t full = bytes & ~(kChunkSize - 1);
    if (c->huge_advised != 0 && full > c->huge_advised) AdviseGrowing(c);
    return old;
  }
  uintptr_t base = 0;
  if (new_bytes > old_bytes && !JoinAdvice(c)) return nullptr;
  if (new_bytes < old_bytes) {
    // Shrink where it is; the tail's pagemap entries go first.
    SetChunks(p + new_bytes, old_bytes - new_bytes, nullptr);
    if (os::Remap(old, old_bytes, new_bytes, os::RemapKind::kInPlace,
                  nullptr) == nullptr) {
      SetChunks(p + new_bytes, old_bytes - new_bytes, c);
      return nullptr;
    }
    ReleasePastSize(p, bytes, new_bytes);
    base = p;
  } else if (os::Remap(old, old_bytes, new_bytes, os::RemapKind::kInPlace,
                       nullptr) != nullptr) {
    // Grown in place: publish the new chunks.
    if (!SetChunks(p + old_bytes, new_bytes - old_bytes, c)) {
      SetChunks(p + old_bytes, new_bytes - old_bytes, nullptr);
      os::Remap(old, new_bytes, old_bytes, os::RemapKind::kInPlace, nullptr);
      return nullptr;
    }
    base = p;
  } else if (errno != ENOMEM) {
    // Not merely blocked by what lies after it: the mapping is no longer
    // one VMA (the program changed the protection or advice of part of
    // it: EFAULT) or is locked beyond the limit (EAGAIN).  A move would
    // fail the same way, and on older kernels (6.1's and 6.6's mremap
    // unmap the destination before they check the source; 6.18's does not)
    // only after unmapping the destination, which another thread may have
    // mapped again by the time the cleanup below unmaps it.  The caller
    // copies.
    return nullptr;
  } else {
    // Move the pages onto a chunk-aligned reservation: no copy, no faults.
    // (On those kernels a move can still fail after the destination is
    // unmapped, for want of memory or of mappings; the cleanup below then
    // unmaps a range that may be another thread's by then.  Rare, and left.)
    void* dest = os::MapAligned(new_bytes, kChunkSize);
    if (dest == nullptr) return nullptr;
    const uintptr_t d = reinterpret_cast<uintptr_t>(dest);
    if (!SetChunks(d, new_bytes, c)) {
      SetChunks(d, new_bytes, nullptr);
      os::Unmap(dest, new_bytes);
      return nullptr;
    }
    // The old range's entries go before the move: once mremap has moved
    // the pages, the kernel may hand that range to another thread's mmap at
    // once, whose entries clearing it afterwards would erase (its free()
    // then aborted as an invalid pointer).  Nobody else looks p up: the
    // caller owns it.
    SetChunks(p, old_bytes, nullptr);
    if (os::Remap(old, old_bytes, new_bytes, os::RemapKind::kMoveTo, dest) ==
        nullptr) {
      SetChunks(p, old_bytes, c);  // Entries that existed: no allocation.
      SetChunks(d, new_bytes, nullptr);
      os::Unmap(dest, new_bytes);
      return nullptr;
    }
    base = d;
  }
  bool bound = true;
  if (os::NumNodes() > 1) {
    bound = os::BindToNode(reinterpret_cast<void*>(base), new_bytes, c->node,
                           g_config->numa_policy);
  }
  NodeHeap* h = HeapOf(c);
  {
    os::SpinLockHolder hold(&h->lock);
    if (!bound) ++h->bind_failures;
    h->huge_bytes += new_bytes - old_bytes;  // Modular: shrinking works too.
    h->mapped_bytes += new_bytes - old_bytes;
  }
  c->base = base;
  c->huge_bytes = new_bytes;
  c->huge_requested = bytes;
  // Grown: advised, a new split.  Shrunk: a split where the new size
  // falls, if it was advised.
  if (new_bytes > old_bytes || c->huge_advised != 0) AdviseGrowing(c);
  return reinterpret_cast<void*>(base);
}

}  // namespace cidmalloc::page_heap
