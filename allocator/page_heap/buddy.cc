// allocator/page_heap/buddy.cc: the buddy allocator of one heap (buddy.h).
#include "allocator/page_heap/buddy.h"

#include <errno.h>

#include "allocator/os/check.h"
#include "allocator/os/os.h"
#include "allocator/page_heap/bitmap.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/pagemap.h"
#include "allocator/page_heap/run_fit.h"

namespace cidmalloc::page_heap {

uint32_t CountReleased(const ChunkInfo* c, uint32_t page, uint32_t n) {
  return CountBits(c->released, page, n);
}

namespace {

constexpr uint32_t kMaxReserveChunks = 32;

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
  FitForget(h, c);
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
  const int saved = errno;
  char* mem = static_cast<char*>(os::MapAligned(n * kChunkSize, kChunkSize));
  if (mem == nullptr && n > 1) {
    n = 1;  // Tight address space (ulimit -v): try the minimum.
    mem = static_cast<char*>(os::MapAligned(kChunkSize, kChunkSize));
    if (mem != nullptr) errno = saved;  // The first attempt's ENOMEM.
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
// The lowest order from k up with a free block in h; kMaxOrder + 1 if none.
int LowestFreeOrder(const NodeHeap* h, int k) {
  while (k <= kMaxOrder && h->order_head[k] == nullptr) ++k;
  return k;
}

// Takes a free block of order k; returns its chunk and first page.
bool TakeBlock(NodeHeap* h, int k, Reserve reserve, ChunkInfo** chunk,
               uint32_t* page) {
  int j = LowestFreeOrder(h, k);
  if (j > k && h->parked_pages != 0) {  // A split: the parked run first.
    Unpark(h);
    j = LowestFreeOrder(h, k);
  }
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

// Only free pages are marked released: taking pages clears their bits (a
// page handed out as released would be promised to read as zero).
void CheckReleasedAreFree(const ChunkInfo* c) {
  uint64_t free_pages[kPagesPerChunk / 64];
  FreePageMap(c, free_pages);
  for (uint32_t w = 0; w < kPagesPerChunk / 64; ++w) {
    CIDMALLOC_CHECK((c->released[w] & ~free_pages[w]) == 0,
                    "a page in use is marked released");
  }
}

}  // namespace

void FreePageMap(const ChunkInfo* c, uint64_t* map) {
  // Order 0's bits are the pages' own (BlockBit(0, i) == i).
  for (uint32_t w = 0; w < kPagesPerChunk / 64; ++w) map[w] = c->free_bits[w];
  for (int k = 1; k <= kMaxOrder; ++k) {
    if (c->free_blocks[k] == 0) continue;
    const uint32_t first = BlockBit(k, 0), end = first + BlocksOfOrder(k);
    uint32_t take;
    for (uint32_t b = first; b < end; b += take) {
      for (uint64_t word = BitsAt(c->free_bits, b, end, &take); word != 0;
           word &= word - 1) {
        const uint32_t i = b + __builtin_ctzll(word) - first;
        ChangeBits(map, i << k, 1u << k, BitOp::kSet);
      }
    }
  }
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

// ---- The parked run --------------------------------------------------------
// A malloc and free of one large size in a loop split a block and merged
// it back every time (a 72 KiB run: 18 changes of order, 60-70 ns a pair).
// The run freed last is parked instead, whole, and the next allocation of
// the same length and alignment takes it back.  Any other need of the
// heap's pages that would split a block (or grow the heap), growth in place
// in its chunk, and malloc_trim merge it first, so that the buddy heap
// places blocks nearly as it would without it (an allocation that finds a
// free block of its order leaves it parked): merged only when the heap ran
// out of blocks, parking made realloc_growth reserve and touch more (41.0
// -> 43.0 MiB peak).  An automatic release pass merges it too (it is
// committed memory like any free block).  Runs of up to a chunk are parked
// (kMaxParkedPages): before the front end's run stacks took the runs of up
// to 16 pages, 16 pages had left realloc_growth's peak unchanged, 32 pages
// made it 44.8 MiB, 64 and 256 pages 42.8; with them, a chunk left it at
// 42.9-43.0 MiB and took 512 KiB pairs from 71 to 35 ns
// (docs/benchmarks/tuning_log.md).
void Unpark(NodeHeap* h) {
  if (h->parked_pages == 0) return;
  FreeRange(h, h->parked_chunk, h->parked_page, h->parked_pages);
  h->parked_pages = 0;
  h->parked_chunk = nullptr;
}

ChunkInfo* DetachFreeChunks(NodeHeap* h) {
  Unpark(h);
  ChunkInfo* detached = nullptr;
  // A free block of the top order is a whole chunk.  Its span tags are 0
  // (every span was returned), its pages belong to nobody, and no lookup of
  // a pointer the program owns leads to it.
  while (ChunkInfo* c = h->order_head[kMaxOrder]) {
    const uint32_t released = CountReleased(c, 0, kPagesPerChunk);
    MarkUsed(h, c, kMaxOrder, 0);
    FitRemove(h, c);
    h->free_pages -= kPagesPerChunk;
    h->released_free_pages -= released;
    h->decay.Released(kPagesPerChunk - released);  // Committed ones leave.
    h->mapped_bytes -= kChunkSize;
    c->cache_older = detached;
    detached = c;
  }
  const size_t committed = CommittedFreePages(h);
  if (h->release_floor > committed) h->release_floor = committed;
  return detached;
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
// merge into the range).  The parked run's pages are not free blocks: if it
// lies in c, it is merged first.
bool TakeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n) {
  if (h->parked_chunk == c) Unpark(h);
  return TakeFreeRange(h, c, page, n);
}

bool TakeFreeRange(NodeHeap* h, ChunkInfo* c, uint32_t page, uint32_t n) {
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

uintptr_t TakeBlockPages(NodeHeap* h, const PageRequest& r, Reserve reserve,
                         bool* zeroed, ChunkInfo** chunk_out) {
  const uint32_t n = r.pages;
  const uint32_t block = 1u << r.order;
  const bool release_zeroes =
      g_config->release_method == os::ReleaseMethod::kDontNeed;
  ChunkInfo* c;
  uint32_t page;
  // MADV_DONTNEED'd and never-touched pages read as zero; MADV_FREE'd ones
  // may keep their old contents until the kernel reclaims them.
  if (n < block && FindRun(h, r, &c, &page)) {  // The parked run stays.
    *zeroed = release_zeroes && CountReleased(c, page, n) == n;
    CIDMALLOC_CHECK(TakeFreeRange(h, c, page, n),
                    "a fitting run was not free");
    *chunk_out = c;
    return c->base + (uintptr_t{page} << kPageShift);
  }
  if (!TakeBlock(h, r.order, reserve, &c, &page)) return 0;
  h->free_pages -= block;
  h->released_free_pages -= CountReleased(c, page, block);
  *zeroed = release_zeroes && CountReleased(c, page, n) == n;
  ChangeBits(c->released, page, n, BitOp::kClear);
  if (n < block) FreeRange(h, c, page + n, block - n);
  NotePagesTaken(h);
  *chunk_out = c;
  return c->base + (uintptr_t{page} << kPageShift);
}

void CheckHeap(NodeHeap* h) {
  const int node = NodeOf(h);
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
  CheckFit(h);
  if (h->parked_pages != 0) {
    const ChunkInfo* c = h->parked_chunk;
    CIDMALLOC_CHECK(c->node == node && c->arena == ArenaOf(h) &&
                        h->parked_pages <= kMaxParkedPages &&
                        c->run_pages[h->parked_page] == 0 &&
                        FreeOrderAt(c, h->parked_page) < 0 &&
                        FreeOrderAt(c, h->parked_page + h->parked_pages - 1) <
                            0,
                    "the parked run is not a freed run of this heap");
  }
  CIDMALLOC_CHECK(released == h->released_free_pages,
                  "released page count");
}

}  // namespace cidmalloc::page_heap
