#include "allocator/page_heap/page_heap.h"

#include <errno.h>

#include "allocator/os/check.h"
#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/bitmap.h"
#include "allocator/page_heap/buddy.h"
#include "allocator/page_heap/huge_cache.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/node_heap.h"

#define CIDMALLOC_PAGE_HEAP_NOINLINE __attribute__((noinline))

namespace cidmalloc::page_heap {

constinit NodeHeap g_heaps[os::kMaxNodes][kArenasPerNode];
const os::Config* g_config = nullptr;

namespace {

// Mappings taken off a node's huge cache under its lock, unmapped when this
// goes out of scope: declared before the lock's holder, it runs after the
// lock is let go.
struct UnmapAtExit {
  ChunkInfo* list = nullptr;
  ~UnmapAtExit() {
    if (list != nullptr) UnmapDetached(list);
  }
};

// The committed free pages the automatic release leaves a heap: arena 0
// (a single-threaded program's only one, with the spans and the cached
// mappings) the whole CIDMALLOC_RELEASE_BYTES, each other arena a
// kArenasPerNode-th of it, so that a node keeps at most 1.75x the
// threshold.
size_t KeepPages(const NodeHeap* h) {
  const size_t keep = g_config->release_threshold >> kPageShift;
  return ArenaOf(h) == 0 ? keep : keep / kArenasPerNode;
}
// Calls f(h) for every heap of the nodes in use, by node, then arena (the
// lock order).
template <class F>
void ForEachHeapInUse(F f) {
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (NodeHeap& h : g_heaps[node]) f(&h);
  }
}

uintptr_t AllocPages(NodeHeap* h, const PageRequest& r, bool* zeroed,
                     ChunkInfo** chunk_out) {
  os::SpinLockHolder hold(&h->lock);
  const uintptr_t p = TakePages(h, r, Reserve::kMayGrow, zeroed, chunk_out);
  if (p == 0) errno = ENOMEM;
  return p;
}

// The pages of r for a thread of arena `arena` of `node`: from that heap's
// free blocks; else from another arena of the node whose lock is free at
// that moment (its free blocks; arena 0 may also grow for it); else from
// its own heap, which grows.  An arena other than 0
// thus reserves chunks only after its thread found arena 0 busy, and the
// free blocks of an idle arena are reused before more is reserved.  The
// price is glibc's: threads that do meet keep their free memory apart
// (realloc_growth with 2 and 3 threads peaks 1.07x and 1.11x higher).
// Waiting for the other arenas' locks instead kept that peak, but arena 1
// then rarely grew and two threads' 512 KiB pairs stayed at 637 ns
// (docs/benchmarks/tuning_log.md).
uintptr_t AllocFromArenas(int node, int arena, const PageRequest& r,
                          bool* zeroed, ChunkInfo** chunk_out) {
  NodeHeap* const heaps = g_heaps[node];
  NodeHeap* const own = &heaps[arena];
  {
    os::SpinLockHolder hold(&own->lock);
    if (const uintptr_t p = TakePages(own, r, Reserve::kFreeBlocksOnly,
                                      zeroed, chunk_out)) {
      return p;
    }
  }
  for (int i = 0; i < kArenasPerNode; ++i) {
    NodeHeap* const h = &heaps[i];
    if (h == own || !h->lock.TryLock()) continue;
    const uintptr_t p = TakePages(
        h, r, i == 0 ? Reserve::kMayGrow : Reserve::kFreeBlocksOnly, zeroed,
        chunk_out);
    h->lock.Unlock();
    if (p != 0) return p;
  }
  // If the OS refuses a chunk, the mappings the heaps keep free may be
  // what stands in the way (an address-space limit).
  return AllocOrDropAndRetry(
      [&] { return AllocPages(own, r, zeroed, chunk_out); });
}

// Returns free blocks of order >= min_order to the OS until the node keeps
// at most keep_pages committed free pages.  Called with h->lock held.
size_t ReleaseLocked(NodeHeap* h, size_t keep_pages, int min_order) {
  size_t released = 0;
  for (int k = kMaxOrder; k >= min_order; --k) {
    const uint32_t first = BlockBit(k, 0), blocks = BlocksOfOrder(k);
    for (ChunkInfo* c = h->order_head[k]; c != nullptr; c = c->order_next[k]) {
      // The free blocks of order k, a word of free_bits at a time.
      uint32_t take;
      for (uint32_t b = first; b < first + blocks; b += take) {
        for (uint64_t word = BitsAt(c->free_bits, b, first + blocks, &take);
             word != 0; word &= word - 1) {
          if (CommittedFreePages(h) <= keep_pages) {
            return released;
          }
          const uint32_t i = b + __builtin_ctzll(word) - first;
          const uint32_t page = i << k, n = 1u << k;
          const uint32_t already = CountReleased(c, page, n);
          if (already == n) continue;
          if (!os::ReleasePages(
                  reinterpret_cast<void*>(c->base +
                                          (uintptr_t{page} << kPageShift)),
                  size_t{n} << kPageShift, g_config->release_method)) {
            continue;
          }
          ChangeBits(c->released, page, n, BitOp::kSet);
          h->released_free_pages += n - already;
          h->decay.Released(n - already);
          released += size_t{n - already} << kPageShift;
        }
      }
    }
  }
  return released;
}

// Whether a release pass has nothing to do, by the first test of
// MaybeReleaseSlow: every free takes it, inline.
bool NothingToRelease(const NodeHeap* h, size_t keep, size_t committed) {
  return committed <= keep || committed <= h->release_floor + keep / 2;
}

// Automatic release past the threshold: first the cached mappings that the
// threshold no longer leaves room for (huge_cache.h), detached for the
// caller to unmap once the lock is let go; then the committed free pages
// that have been free for the release delay (all of them with a delay of
// 0) go back, down to half the threshold: the largest free blocks first
// (ReleaseLocked goes down the orders), so that a pass makes few madvise
// calls and leaves small free runs, the likeliest to be reused, resident
// where it can, but blocks of every order where it must.  It once stopped
// at 128 KiB blocks: a heap whose free memory was all 64 KiB holes (spans
// of two classes interleaved, one of them freed) kept 192 MiB committed
// past a 32 MiB threshold for good.  A pass that cannot get down to its
// target (pages released already, or a refused madvise) records where it
// stopped, and the next pass waits until half a threshold more is free:
// without that, every free of a span would rescan every chunk for
// nothing.  The clock is read only past the threshold.
[[nodiscard]] CIDMALLOC_PAGE_HEAP_NOINLINE ChunkInfo* MaybeReleaseSlow(
    NodeHeap* h) {
  ChunkInfo* const evicted =
      h->cache_bytes != 0 ? CacheEvict(h, CacheLimit(h)) : nullptr;
  const size_t keep = KeepPages(h);
  const size_t committed = CommittedFreePages(h);
  if (NothingToRelease(h, keep, committed)) return evicted;
  size_t idle = committed;
  const uint32_t delay_ms = g_config->release_delay_ms;
  const uint64_t now_ms = delay_ms != 0 ? os::MonotonicMs() : 0;
  if (now_ms != 0) {  // 0: no delay, or no clock.
    idle = h->decay.Idle(now_ms, delay_ms, committed);
    if (idle <= keep) return evicted;
  }
  const size_t target = committed - (idle - keep / 2);
  // The parked run (up to a chunk) is committed but no free block: merged
  // first, it can go back too.
  Unpark(h);
  ReleaseLocked(h, target, 0);
  const size_t after = CommittedFreePages(h);
  h->release_floor = after > target ? after : 0;
  return evicted;
}

// MaybeReleaseSlow's common case inline: no cached mapping and nothing
// past the threshold (a call and a release pass's set-up were a sixth of a
// 72 KiB pair).
[[nodiscard]] inline ChunkInfo* MaybeRelease(NodeHeap* h) {
  if (h->cache_bytes == 0 &&
      NothingToRelease(h, KeepPages(h), CommittedFreePages(h))) {
    return nullptr;
  }
  return MaybeReleaseSlow(h);
}

// The smallest k with 2^k >= pages (pages >= 1): a count of leading zeros
// (the loop it replaces took 24 instructions for a 72 KiB run).
int OrderFor(size_t pages) {
  return pages <= 1 ? 0 : 64 - __builtin_clzll(pages - 1);
}

}  // namespace

size_t CommittedFreeBytes(const NodeHeap* h) {
  return CommittedFreePages(h) << kPageShift;
}

void Init(const os::Config* config) { g_config = config; }

bool ReleaseSpanPages(uintptr_t p, size_t size) {
  return os::ReleasePages(reinterpret_cast<void*>(p), size,
                          g_config->release_method);
}

uintptr_t AllocSpan(int node, int order, bool* zeroed) {
  ChunkInfo* c;
  const uint32_t pages = 1u << order;  // Aligned to its size.
  return AllocFromArenas(node, 0, PageRequest{pages, pages, order}, zeroed,
                         &c);
}

void FreeSpan(ChunkInfo* c, uintptr_t start, int order) {
  NodeHeap* h = HeapOf(c);
  UnmapAtExit evicted;
  os::SpinLockHolder hold(&h->lock);
  FreeRange(h, c, PageIndex(start), 1u << order);
  evicted.list = MaybeRelease(h);
}

void* AllocLarge(int node, int arena, size_t bytes, size_t align,
                 bool* zeroed) {
  // A zero-byte request (memalign(1 << 17, 0)) still gets a block of its
  // own: a 0-page run would be freed back at once and handed out twice.
  if (bytes == 0) bytes = 1;
  if (bytes <= kChunkSize && align <= kChunkSize) {
    const auto pages = static_cast<uint32_t>(PagesFor(bytes));
    const auto align_pages =
        static_cast<uint32_t>(align > kPageSize ? align >> kPageShift : 1);
    const PageRequest r{pages, align_pages,
                        OrderFor(pages > align_pages ? pages : align_pages)};
    ChunkInfo* c;
    const uintptr_t p = AllocFromArenas(
        node, static_cast<int>(static_cast<unsigned>(arena) % kArenasPerNode),
        r, zeroed, &c);
    if (p == 0) return nullptr;
    // Published to free() through the returned pointer (see chunk.h);
    // after the heap lock is let go.  Release: pairs with the acquire load
    // in LargeUsableSize().
    __atomic_store_n(&c->run_pages[PageIndex(p)],
                     static_cast<uint16_t>(pages), __ATOMIC_RELEASE);
    return reinterpret_cast<void*>(p);
  }
  return AllocHuge(node, bytes, align, zeroed);
}

void FreeLarge(ChunkInfo* c, uintptr_t p) {
  if (c->kind == ChunkKind::kHuge) return FreeHuge(c, p);
  NodeHeap* h = HeapOf(c);
  UnmapAtExit evicted;
  os::SpinLockHolder hold(&h->lock);
  const uint32_t page = PageIndex(p);
  const uint32_t n = c->run_pages[page];
  if ((p & (kPageSize - 1)) != 0 || n == 0) {
    h->lock.Unlock();
    os::FatalMisuse("free(): invalid pointer or double free",
                    reinterpret_cast<void*>(p));
  }
  c->run_pages[page] = 0;
  ParkRun(h, c, page, n);
  evicted.list = MaybeRelease(h);
}

bool ResizeRun(ChunkInfo* c, uintptr_t p, size_t bytes) {
  if (c->kind != ChunkKind::kHeap || bytes == 0 || bytes > kChunkSize ||
      (p & (kPageSize - 1)) != 0) {
    return false;
  }
  const uint32_t page = PageIndex(p);
  const auto want = static_cast<uint32_t>(PagesFor(bytes));
  NodeHeap* h = HeapOf(c);
  UnmapAtExit evicted;
  os::SpinLockHolder hold(&h->lock);
  const uint32_t n = c->run_pages[page];
  if (n == 0) return false;
  if (want < n) {
    FreeRange(h, c, page + want, n - want);
  } else if (want > n) {
    if (page + want > kPagesPerChunk) return false;
    if (!TakeRange(h, c, page + n, want - n)) return false;
  }
  // Read by LargeUsableSize and FreeLarge of the owner only (see chunk.h).
  // Release: pairs with the acquire load in LargeUsableSize(), which reads
  // without the heap lock.
  __atomic_store_n(&c->run_pages[page], static_cast<uint16_t>(want),
                   __ATOMIC_RELEASE);
  if (want < n) evicted.list = MaybeRelease(h);
  return true;
}

size_t LargeUsableSize(const ChunkInfo* c, uintptr_t p) {
  if (c->kind == ChunkKind::kHuge) return HugeUsableSize(c, p);
  return size_t{HeapRunPages(c, p)} << kPageShift;
}

size_t ReleaseFreeMemory(size_t keep_bytes) {
  size_t released = 0;
  ForEachHeapInUse([&](NodeHeap* h) {
    // Arena 0 keeps keep_bytes; the others return all they can.
    const size_t keep = ArenaOf(h) == 0 ? keep_bytes : 0;
    ChunkInfo* evicted;
    {
      os::SpinLockHolder hold(&h->lock);
      Unpark(h);
      released += ReleaseLocked(h, keep >> kPageShift, 0);
      // The cached mappings keep what the buddy heap left of keep_bytes.
      const size_t kept = CommittedFreeBytes(h);
      evicted = CacheEvict(h, keep > kept ? keep - kept : 0);
    }
    released += UnmapDetached(evicted);
  });
  return released;
}

size_t DropFreeMappings() {
  size_t bytes = 0;
  ForEachHeapInUse([&](NodeHeap* h) {
    ChunkInfo* cached;
    ChunkInfo* chunks;
    {
      os::SpinLockHolder hold(&h->lock);
      cached = CacheEvict(h, 0);  // Only arena 0 caches mappings.
      chunks = DetachFreeChunks(h);
    }
    bytes += UnmapDetached(cached) + UnmapDetached(chunks);
  });
  return bytes;
}

void RunAutomaticRelease(LockWait wait) {
  ForEachHeapInUse([wait](NodeHeap* h) {
    UnmapAtExit evicted;  // After the unlock.
    if (wait == LockWait::kSkipBusy) {
      if (!h->lock.TryLock()) return;
    } else {
      h->lock.Lock();
    }
    evicted.list = MaybeRelease(h);
    h->lock.Unlock();
  });
}

void GetNodeStats(int node, NodeStats* out) {
  *out = NodeStats{};
  for (NodeHeap& h : g_heaps[node]) {
    os::SpinLockHolder hold(&h.lock);
    out->mapped_bytes += h.mapped_bytes;
    out->free_bytes += (size_t{h.free_pages} + h.parked_pages) << kPageShift;
    out->free_bytes += h.cache_bytes;
    out->released_bytes += h.released_free_pages << kPageShift;
    out->huge_bytes += h.huge_bytes;
    out->bind_failures += h.bind_failures;
  }
}

void CheckInvariants() {
  for (int index = 0; index < os::kMaxNodes * kArenasPerNode; ++index) {
    NodeHeap* h = &g_heaps[0][0] + index;
    os::SpinLockHolder hold(&h->lock);
    CheckHeap(h);
    CheckCache(h, NodeOf(h));
  }
}

// Lock order: node heaps (by node, then arena), then the pagemap, then the
// meta arena.  Only the nodes in use: the handlers are registered after
// the topology is known (api/alloc.cc), and the heaps of the other nodes
// stay untouched.
void ForkPrepare() {
  ForEachHeapInUse([](NodeHeap* h) { h->lock.Lock(); });
  PagemapForkPrepare();
  MetaForkPrepare();
}
void ForkParent() {
  MetaForkParent();
  PagemapForkParent();
  ForEachHeapInUse([](NodeHeap* h) { h->lock.Unlock(); });
}
void ForkChild() {
  MetaForkChild();
  PagemapForkChild();
  ForEachHeapInUse([](NodeHeap* h) { h->lock.ResetAfterFork(); });
}

}  // namespace cidmalloc::page_heap
