#include "allocator/page_heap/page_heap.h"

#include <errno.h>

#include "allocator/os/check.h"
#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/bitmap.h"
#include "allocator/page_heap/huge_cache.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/node_heap.h"

namespace cidmalloc::page_heap {

constinit NodeHeap g_heaps[os::kMaxNodes][kArenasPerNode];
const os::Config* g_config = nullptr;

namespace {

// Mappings taken off a node's huge cache under its lock, unmapped when this
// goes out of scope: declared before the lock's holder, it runs after the
// lock is let go.
struct UnmapAtExit {
  ChunkInfo* list = nullptr;
  ~UnmapAtExit() { UnmapDetached(list); }
};

constexpr uint32_t kMaxReserveChunks = 32;

// Where a heap is in g_heaps.
int NodeOf(const NodeHeap* h) {
  return static_cast<int>(h - &g_heaps[0][0]) / kArenasPerNode;
}
int ArenaOf(const NodeHeap* h) {
  return static_cast<int>(h - &g_heaps[0][0]) % kArenasPerNode;
}
// The committed free pages the automatic release leaves a heap: arena 0
// (a single-threaded program's only one, with the spans and the cached
// mappings) the whole CIDMALLOC_RELEASE_BYTES, each other arena a
// kArenasPerNode-th of it, so that a node keeps at most 1.75x the
// threshold.
size_t KeepPages(const NodeHeap* h) {
  const size_t keep = g_config->release_threshold >> kPageShift;
  return ArenaOf(h) == 0 ? keep : keep / kArenasPerNode;
}
// Automatic release only returns blocks of at least this order (128 KiB),
// so it stays cheap and leaves small free runs, likely reused, resident.
constexpr int kAutoReleaseMinOrder = 4;

uint32_t CountReleased(const ChunkInfo* c, uint32_t page, uint32_t n) {
  return CountBits(c->released, page, n);
}
uint32_t BlocksOfOrder(int k) { return kPagesPerChunk >> k; }

size_t CommittedFreePages(const NodeHeap* h) {
  return h->free_pages - h->released_free_pages;
}

// After pages were taken: the committed free pages may now be under the
// floor of the last automatic release, and the release delay starts again
// for the pages taken.
void NotePagesTaken(NodeHeap* h) {
  const size_t committed = CommittedFreePages(h);
  if (committed < h->release_floor) h->release_floor = committed;
  h->decay.Note(committed);
}

// ---- Per-order chunk lists ------------------------------------------------
void ListInsert(NodeHeap* h, ChunkInfo* c, int k) {
  if (c->listed_orders & (1u << k)) return;
  c->listed_orders |= static_cast<uint16_t>(1u << k);
  c->order_prev[k] = nullptr;
  c->order_next[k] = h->order_head[k];
  if (h->order_head[k] != nullptr) h->order_head[k]->order_prev[k] = c;
  h->order_head[k] = c;
}
void ListRemove(NodeHeap* h, ChunkInfo* c, int k) {
  if (!(c->listed_orders & (1u << k))) return;
  c->listed_orders &= static_cast<uint16_t>(~(1u << k));
  if (c->order_prev[k] != nullptr) {
    c->order_prev[k]->order_next[k] = c->order_next[k];
  } else {
    h->order_head[k] = c->order_next[k];
  }
  if (c->order_next[k] != nullptr) {
    c->order_next[k]->order_prev[k] = c->order_prev[k];
  }
  c->order_next[k] = c->order_prev[k] = nullptr;
}
void MarkFree(NodeHeap* h, ChunkInfo* c, int k, uint32_t i) {
  SetBit(c->free_bits, BlockBit(k, i));
  ++c->free_blocks[k];
  ListInsert(h, c, k);
}
void MarkUsed(NodeHeap* h, ChunkInfo* c, int k, uint32_t i) {
  ClearBit(c->free_bits, BlockBit(k, i));
  if (--c->free_blocks[k] == 0) ListRemove(h, c, k);
}

// ---- Growth ---------------------------------------------------------------
// Reserves more chunks for heap h.  Called with h->lock held.
bool Grow(NodeHeap* h) {
  const int node = NodeOf(h);
  uint32_t n = h->next_reserve_chunks == 0 ? 1 : h->next_reserve_chunks;
  char* mem = static_cast<char*>(os::MapAligned(n * kChunkSize, kChunkSize));
  if (mem == nullptr && n > 1) {
    n = 1;  // Tight address space (ulimit -v): try the minimum.
    mem = static_cast<char*>(os::MapAligned(kChunkSize, kChunkSize));
  }
  if (mem == nullptr) return false;
  if (os::NumNodes() > 1 &&
      !os::BindToNode(mem, n * kChunkSize, node, g_config->numa_policy)) {
    ++h->bind_failures;
  }
  for (uint32_t i = 0; i < n; ++i) {
    ChunkInfo* c = NewChunkInfo();
    const uintptr_t base = reinterpret_cast<uintptr_t>(mem) + i * kChunkSize;
    if (c != nullptr) {
      // Before SetChunks publishes the record (its release stores): a
      // lookup that finds it, even for a pointer nobody owns yet (an
      // invalid free into this chunk), sees its base, kind and node.
      c->base = base;
      c->kind = ChunkKind::kHeap;
      c->node = static_cast<uint8_t>(node);
      c->arena = static_cast<uint8_t>(ArenaOf(h));
      for (uint64_t& w : c->released) w = ~uint64_t{0};  // Untouched: zero.
    }
    if (c == nullptr || !EnsureSpanTagLeaf(base) ||
        !SetChunks(base, kChunkSize, c)) {
      // Give back the chunks not yet handed to the heap.
      if (c != nullptr) DeleteChunkInfo(c);
      os::Unmap(reinterpret_cast<void*>(base), (n - i) * kChunkSize);
      errno = ENOMEM;
      return i > 0;
    }
    MarkFree(h, c, kMaxOrder, 0);
    h->mapped_bytes += kChunkSize;
    h->free_pages += kPagesPerChunk;
    h->released_free_pages += kPagesPerChunk;
  }
  if (n == h->next_reserve_chunks || h->next_reserve_chunks == 0) {
    h->next_reserve_chunks = n * 2 > kMaxReserveChunks ? kMaxReserveChunks
                                                        : n * 2;
  }
  return true;
}

// ---- Buddy allocation -----------------------------------------------------
// Whether a heap with no free block large enough may reserve more chunks.
enum class Reserve : uint8_t { kMayGrow, kFreeBlocksOnly };

// Takes a free block of order k; returns its chunk and first page.
bool TakeBlock(NodeHeap* h, int k, Reserve reserve, ChunkInfo** chunk,
               uint32_t* page) {
  int j = k;
  while (j <= kMaxOrder && h->order_head[j] == nullptr) ++j;
  if (j > kMaxOrder) {
    if (reserve == Reserve::kFreeBlocksOnly || !Grow(h)) return false;
    j = kMaxOrder;
  }
  ChunkInfo* c = h->order_head[j];
  uint32_t i = static_cast<uint32_t>(
      FindFirst(c->free_bits, BlockBit(j, 0), BlocksOfOrder(j)) -
      static_cast<int>(BlockBit(j, 0)));
  MarkUsed(h, c, j, i);
  while (j > k) {  // Split, keeping the lower half.
    --j;
    i *= 2;
    MarkFree(h, c, j, i + 1);
  }
  *chunk = c;
  *page = i << k;
  return true;
}

void FreeBlock(NodeHeap* h, ChunkInfo* c, uint32_t page, int k) {
  uint32_t i = page >> k;
  while (k < kMaxOrder && TestBit(c->free_bits, BlockBit(k, i ^ 1))) {
    MarkUsed(h, c, k, i ^ 1);  // Merge with the free buddy.
    i >>= 1;
    ++k;
  }
  MarkFree(h, c, k, i);
}

// Frees pages [page, page + n) of c, as naturally aligned blocks.
void FreeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n) {
  h->free_pages += n;
  h->released_free_pages += CountReleased(c, page, n);
  while (n > 0) {
    int k = page == 0 ? kMaxOrder : __builtin_ctz(page);
    while ((1u << k) > n) --k;
    FreeBlock(h, c, page, k);
    page += 1u << k;
    n -= 1u << k;
  }
}

// The order of the free block of c that contains page p, or -1 if p is in
// use.  Free blocks are maximal and disjoint: at most one order matches.
int FreeOrderAt(const ChunkInfo* c, uint32_t p) {
  for (int k = 0; k <= kMaxOrder; ++k) {
    if (TestBit(c->free_bits, BlockBit(k, p >> k))) return k;
  }
  return -1;
}

// Takes pages [page, page + n) of c if every one is free: each free block
// that overlaps the range is taken whole and its parts outside the range
// are freed again (their buddies lie inside the taken block, so they do not
// merge into the range).  Called with h->lock held.
bool TakeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n) {
  const uint32_t end = page + n;
  for (uint32_t p = page; p < end;) {
    const int k = FreeOrderAt(c, p);
    if (k < 0) return false;
    p = ((p >> k) + 1) << k;
  }
  for (uint32_t p = page; p < end;) {
    const int k = FreeOrderAt(c, p);
    const uint32_t b = (p >> k) << k, e = b + (1u << k);
    MarkUsed(h, c, k, b >> k);
    h->free_pages -= 1u << k;
    h->released_free_pages -= CountReleased(c, b, 1u << k);
    if (b < page) FreeRange(h, c, b, page - b);
    if (e > end) FreeRange(h, c, end, e - end);
    p = e;
  }
  ChangeBits(c->released, page, n, BitOp::kClear);
  NotePagesTaken(h);
  return true;
}

// Allocates n pages at an alignment of 2^order pages (n <= 2^order) from
// h, whose lock the caller holds; 0 if it has no free block and may not
// (or cannot) grow.
uintptr_t TakePages(NodeHeap* h, uint32_t n, int order, Reserve reserve,
                    bool* zeroed, ChunkInfo** chunk_out) {
  ChunkInfo* c;
  uint32_t page;
  if (!TakeBlock(h, order, reserve, &c, &page)) return 0;
  const uint32_t block = 1u << order;
  h->free_pages -= block;
  h->released_free_pages -= CountReleased(c, page, block);
  // MADV_DONTNEED'd and never-touched pages read as zero; MADV_FREE'd ones
  // may keep their old contents until the kernel reclaims them.
  *zeroed = CountReleased(c, page, n) == n &&
            g_config->release_method == os::ReleaseMethod::kDontNeed;
  ChangeBits(c->released, page, n, BitOp::kClear);
  if (n < block) FreeRange(h, c, page + n, block - n);
  NotePagesTaken(h);
  *chunk_out = c;
  return c->base + (uintptr_t{page} << kPageShift);
}

uintptr_t AllocPages(NodeHeap* h, uint32_t n, int order, bool* zeroed,
                     ChunkInfo** chunk_out) {
  os::SpinLockHolder hold(&h->lock);
  const uintptr_t p = TakePages(h, n, order, Reserve::kMayGrow, zeroed,
                                chunk_out);
  if (p == 0) errno = ENOMEM;
  return p;
}

// n pages at an alignment of 2^order pages for a thread of arena `arena`
// of `node`: from that heap's free blocks; else from another arena of the
// node whose lock is free at that moment (its free blocks; arena 0 may also
// grow for it); else from its own heap, which grows.  An arena other than 0
// thus reserves chunks only after its thread found arena 0 busy, and the
// free blocks of an idle arena are reused before more is reserved.  The
// price is glibc's: threads that do meet keep their free memory apart
// (realloc_growth with 2 and 3 threads peaks 1.07x and 1.11x higher).
// Waiting for the other arenas' locks instead kept that peak, but arena 1
// then rarely grew and two threads' 512 KiB pairs stayed at 637 ns
// (docs/benchmarks/tuning_log.md).
uintptr_t AllocFromArenas(int node, int arena, uint32_t n, int order,
                          bool* zeroed, ChunkInfo** chunk_out) {
  NodeHeap* const heaps = g_heaps[node];
  NodeHeap* const own = &heaps[arena];
  {
    os::SpinLockHolder hold(&own->lock);
    if (const uintptr_t p = TakePages(own, n, order, Reserve::kFreeBlocksOnly,
                                      zeroed, chunk_out)) {
      return p;
    }
  }
  for (int i = 0; i < kArenasPerNode; ++i) {
    NodeHeap* const h = &heaps[i];
    if (h == own || !h->lock.TryLock()) continue;
    const uintptr_t p = TakePages(
        h, n, order, i == 0 ? Reserve::kMayGrow : Reserve::kFreeBlocksOnly,
        zeroed, chunk_out);
    h->lock.Unlock();
    if (p != 0) return p;
  }
  return AllocPages(own, n, order, zeroed, chunk_out);
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

// Automatic release past the threshold: first the cached mappings that the
// threshold no longer leaves room for (huge_cache.h), detached for the
// caller to unmap once the lock is let go; then the committed free pages
// that have been free for the release delay (all of them with a delay of
// 0) go back, down to half the threshold.  A pass that cannot get down to
// its target (what is left is in blocks below kAutoReleaseMinOrder, which
// it leaves) records where it stopped, and the next pass waits until half
// a threshold more is free: without that, every free of a span would
// rescan every chunk for nothing.  The clock is read only past the
// threshold.
[[nodiscard]] ChunkInfo* MaybeRelease(NodeHeap* h) {
  ChunkInfo* const evicted =
      h->cache_bytes != 0 ? CacheEvict(h, CacheLimit(h)) : nullptr;
  const size_t keep = KeepPages(h);
  const size_t committed = CommittedFreePages(h);
  if (committed <= keep || committed <= h->release_floor + keep / 2) {
    return evicted;
  }
  size_t idle = committed;
  const uint32_t delay_ms = g_config->release_delay_ms;
  const uint64_t now_ms = delay_ms != 0 ? os::MonotonicMs() : 0;
  if (now_ms != 0) {  // 0: no delay, or no clock.
    idle = h->decay.Idle(now_ms, delay_ms, committed);
    if (idle <= keep) return evicted;
  }
  const size_t target = committed - (idle - keep / 2);
  ReleaseLocked(h, target, kAutoReleaseMinOrder);
  const size_t after = CommittedFreePages(h);
  h->release_floor = after > target ? after : 0;
  return evicted;
}

int OrderFor(size_t pages) {
  int k = 0;
  while ((size_t{1} << k) < pages) ++k;
  return k;
}

}  // namespace

size_t CommittedFreeBytes(const NodeHeap* h) {
  return CommittedFreePages(h) << kPageShift;
}

void Init(const os::Config* config) { g_config = config; }

uintptr_t AllocSpan(int node, int order, bool* zeroed) {
  ChunkInfo* c;
  return AllocFromArenas(node, 0, 1u << order, order, zeroed, &c);
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
    const size_t pages = (bytes + kPageSize - 1) >> kPageShift;
    const size_t align_pages = align > kPageSize ? align >> kPageShift : 1;
    const int order = OrderFor(pages > align_pages ? pages : align_pages);
    ChunkInfo* c;
    const uintptr_t p = AllocFromArenas(
        node, static_cast<int>(static_cast<unsigned>(arena) % kArenasPerNode),
        static_cast<uint32_t>(pages), order, zeroed, &c);
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
  FreeRange(h, c, page, n);
  evicted.list = MaybeRelease(h);
}

bool ResizeRun(ChunkInfo* c, uintptr_t p, size_t bytes) {
  if (c->kind != ChunkKind::kHeap || bytes == 0 || bytes > kChunkSize ||
      (p & (kPageSize - 1)) != 0) {
    return false;
  }
  const uint32_t page = PageIndex(p);
  const uint32_t want = static_cast<uint32_t>((bytes + kPageSize - 1) >> kPageShift);
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
  if ((p & (kPageSize - 1)) != 0) return 0;
  // Acquire, without the heap lock: pairs with the release stores in
  // AllocLarge() and ResizeRun() (the caller owns p: see chunk.h).
  const uint16_t n =
      __atomic_load_n(&c->run_pages[PageIndex(p)], __ATOMIC_ACQUIRE);
  return size_t{n} << kPageShift;
}

size_t ReleaseFreeMemory(size_t keep_bytes) {
  size_t released = 0;
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (NodeHeap& heap : g_heaps[node]) {
      NodeHeap* h = &heap;
      // Arena 0 keeps keep_bytes; the others return all they can.
      const size_t keep = ArenaOf(h) == 0 ? keep_bytes : 0;
      ChunkInfo* evicted;
      {
        os::SpinLockHolder hold(&h->lock);
        released += ReleaseLocked(h, keep >> kPageShift, 0);
        // The cached mappings keep what the buddy heap left of keep_bytes.
        const size_t kept = CommittedFreeBytes(h);
        evicted = CacheEvict(h, keep > kept ? keep - kept : 0);
      }
      released += UnmapDetached(evicted);
    }
  }
  return released;
}

void RunAutomaticRelease() {
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (NodeHeap& h : g_heaps[node]) {
      UnmapAtExit evicted;
      os::SpinLockHolder hold(&h.lock);
      evicted.list = MaybeRelease(&h);
    }
  }
}

void GetNodeStats(int node, NodeStats* out) {
  *out = NodeStats{};
  for (NodeHeap& h : g_heaps[node]) {
    os::SpinLockHolder hold(&h.lock);
    out->mapped_bytes += h.mapped_bytes;
    out->free_bytes += (h.free_pages << kPageShift) + h.cache_bytes;
    out->released_bytes += h.released_free_pages << kPageShift;
    out->huge_bytes += h.huge_bytes;
    out->bind_failures += h.bind_failures;
  }
}

namespace {

// Only free pages are marked released: taking pages clears their bits (a
// page handed out as released would be promised to read as zero).
void CheckReleasedAreFree(const ChunkInfo* c) {
  uint64_t free_pages[kPagesPerChunk / 64] = {};
  for (int k = 0; k <= kMaxOrder; ++k) {
    for (uint32_t i = 0; i < BlocksOfOrder(k); ++i) {
      if (TestBit(c->free_bits, BlockBit(k, i))) {
        ChangeBits(free_pages, i << k, 1u << k, BitOp::kSet);
      }
    }
  }
  for (uint32_t w = 0; w < kPagesPerChunk / 64; ++w) {
    CIDMALLOC_CHECK((c->released[w] & ~free_pages[w]) == 0,
                    "a page in use is marked released");
  }
}

}  // namespace

void CheckInvariants() {
  for (int index = 0; index < os::kMaxNodes * kArenasPerNode; ++index) {
    NodeHeap* h = &g_heaps[0][0] + index;
    const int node = NodeOf(h);
    os::SpinLockHolder hold(&h->lock);
    size_t free_pages = 0, released = 0;
    for (int k = 0; k <= kMaxOrder; ++k) {
      for (ChunkInfo* c = h->order_head[k]; c != nullptr;
           c = c->order_next[k]) {
        CIDMALLOC_CHECK(c->node == node && c->arena == ArenaOf(h) &&
                            c->kind == ChunkKind::kHeap,
                        "chunk on the wrong heap's list");
        uint32_t blocks = 0;
        // Once per chunk: at the lowest order whose list it is on.
        if ((c->listed_orders & ((1u << k) - 1)) == 0) {
          CheckReleasedAreFree(c);
        }
        for (uint32_t i = 0; i < BlocksOfOrder(k); ++i) {
          if (!TestBit(c->free_bits, BlockBit(k, i))) continue;
          ++blocks;
          // A free block's buddy is never also free at the same order.
          CIDMALLOC_CHECK(k == kMaxOrder ||
                              !TestBit(c->free_bits, BlockBit(k, i ^ 1)),
                          "unmerged free buddies");
          free_pages += 1u << k;
          released += CountReleased(c, i << k, 1u << k);
        }
        CIDMALLOC_CHECK(blocks != 0, "listed chunk without a free block");
        CIDMALLOC_CHECK(blocks == c->free_blocks[k], "free block count");
      }
    }
    CIDMALLOC_CHECK(free_pages == h->free_pages, "free page count");
    CIDMALLOC_CHECK(released == h->released_free_pages,
                    "released page count");
    CheckCache(h, node);
  }
}

// Lock order: node heaps (by node, then arena), then the pagemap, then the
// meta arena.  Only the nodes in use: the handlers are registered after
// the topology is known (api/alloc.cc), and the heaps of the other nodes
// stay untouched.
void ForkPrepare() {
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (NodeHeap& h : g_heaps[node]) h.lock.Lock();
  }
  PagemapForkPrepare();
  MetaForkPrepare();
}
void ForkParent() {
  MetaForkParent();
  PagemapForkParent();
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (NodeHeap& h : g_heaps[node]) h.lock.Unlock();
  }
}
void ForkChild() {
  MetaForkChild();
  PagemapForkChild();
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (NodeHeap& h : g_heaps[node]) h.lock.ResetAfterFork();
  }
}

}  // namespace cidmalloc::page_heap
