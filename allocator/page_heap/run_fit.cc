// allocator/page_heap/run_fit.cc: the index of a heap's chunks by their
// longest stretch of free pages, and the search for a run (run_fit.h).
#include "allocator/page_heap/run_fit.h"

#include "allocator/os/check.h"
#include "allocator/page_heap/bitmap.h"
#include "allocator/page_heap/buddy.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::page_heap {

namespace {

// The first page of the shortest stretch of free pages of c that holds r's
// pages at their alignment (where they would start in it), or -1; *longest
// is c's longest stretch, aligned or not.
int BestFitIn(const ChunkInfo* c, const PageRequest& r, uint32_t* longest) {
  uint64_t map[kPagesPerChunk / 64];
  FreePageMap(c, map);
  int best = -1;
  uint32_t best_length = kPagesPerChunk + 1;
  *longest = 0;
  for (uint32_t p = 0; p < kPagesPerChunk;) {
    const int start = FindFirst(map, p, kPagesPerChunk - p);
    if (start < 0) break;
    const int clear = FindFirstClear(map, static_cast<uint32_t>(start),
                                     kPagesPerChunk - start);
    const uint32_t s = static_cast<uint32_t>(start);
    const uint32_t e = clear < 0 ? kPagesPerChunk : static_cast<uint32_t>(clear);
    if (e - s > *longest) *longest = e - s;
    const uint32_t at = (s + r.align_pages - 1) & ~(r.align_pages - 1);
    if (at + r.pages <= e && e - s < best_length) {
      best = static_cast<int>(at);
      best_length = e - s;
    }
    p = e;
  }
  return best;
}

uint32_t LongestStretch(const ChunkInfo* c) {
  uint32_t longest;
  BestFitIn(c, PageRequest{kPagesPerChunk, 1, kMaxOrder}, &longest);
  return longest;
}

ChunkInfo** ListOf(NodeHeap* h, uint16_t bucket) {
  return bucket == kUnknownRun ? &h->fit_unknown : &h->fit_head[bucket];
}

// The first list at or above `from` pages that is not empty, or 0.
uint32_t FirstListFrom(const NodeHeap* h, uint32_t from) {
  const int b = FindFirst(h->fit_nonempty, from, kPagesPerChunk + 1 - from);
  return b < 0 ? 0 : static_cast<uint32_t>(b);
}

// c is a live chunk of h: the pagemap still leads to it (a chunk that left
// the heap, DetachFreeChunks, is unmapped and its record recycled).
bool InHeap(const NodeHeap* h, const ChunkInfo* c) {
  return c->kind == ChunkKind::kHeap && HeapOf(c) == h &&
         LookupChunk(c->base) == c;
}

}  // namespace

void FitMove(NodeHeap* h, ChunkInfo* c, uint16_t bucket) {
  if (c->fit_bucket != 0) {  // Off its list.
    ChunkInfo** head = ListOf(h, c->fit_bucket);
    if (c->fit_prev != nullptr) {
      c->fit_prev->fit_next = c->fit_next;
    } else {
      *head = c->fit_next;
      if (*head == nullptr && c->fit_bucket != kUnknownRun) {
        ClearBit(h->fit_nonempty, c->fit_bucket);
      }
    }
    if (c->fit_next != nullptr) c->fit_next->fit_prev = c->fit_prev;
  }
  c->fit_next = c->fit_prev = nullptr;
  c->fit_bucket = bucket;
  if (bucket == 0) return;  // No free pages: on no list.
  ChunkInfo** head = ListOf(h, bucket);
  c->fit_next = *head;
  if (*head != nullptr) (*head)->fit_prev = c;
  *head = c;
  if (bucket != kUnknownRun) SetBit(h->fit_nonempty, bucket);
}

void FitRemove(NodeHeap* h, ChunkInfo* c) { FitMove(h, c, 0); }

bool FindRun(NodeHeap* h, const PageRequest& r, ChunkInfo** chunk,
             uint32_t* page) {
  // Chunks freed into since the last search: measure them again.
  while (ChunkInfo* c = h->fit_unknown) {
    FitMove(h, c, static_cast<uint16_t>(LongestStretch(c)));
  }
  // The shortest lists that may hold r first.  A chunk there is measured
  // again (its list is an upper bound, and the alignment may not fit):
  // taken if it holds r, else moved to the list of what it holds now.
  for (uint32_t b = FirstListFrom(h, r.pages); b != 0;
       b = b < kPagesPerChunk ? FirstListFrom(h, b + 1) : 0) {
    for (ChunkInfo* c = h->fit_head[b]; c != nullptr;) {
      ChunkInfo* const next = c->fit_next;
      uint32_t longest;
      const int p = BestFitIn(c, r, &longest);
      if (longest != b) FitMove(h, c, static_cast<uint16_t>(longest));
      if (p >= 0) {
        *chunk = c;
        *page = static_cast<uint32_t>(p);
        return true;
      }
      c = next;
    }
  }
  return false;
}

void CheckFit(NodeHeap* h) {
  // Each list: its chunks name it, its links hold, its bit is right.
  for (uint32_t b = 1; b <= kPagesPerChunk; ++b) {
    CIDMALLOC_CHECK(TestBit(h->fit_nonempty, b) == (h->fit_head[b] != nullptr),
                    "run index: a list's bit is wrong");
    for (ChunkInfo* c = h->fit_head[b]; c != nullptr; c = c->fit_next) {
      CIDMALLOC_CHECK(c->fit_bucket == b && InHeap(h, c) &&
                          (c->fit_next == nullptr || c->fit_next->fit_prev == c),
                      "run index: a chunk on the wrong list");
      CIDMALLOC_CHECK(LongestStretch(c) <= b,
                      "run index: a chunk holds a longer stretch than its list");
    }
  }
  CIDMALLOC_CHECK(!TestBit(h->fit_nonempty, 0), "run index: list 0 marked");
  for (ChunkInfo* c = h->fit_unknown; c != nullptr; c = c->fit_next) {
    CIDMALLOC_CHECK(c->fit_bucket == kUnknownRun && InHeap(h, c),
                    "run index: a chunk on the wrong list");
  }
  // Every chunk with a free block is on the index, else no search finds it.
  for (int k = 0; k <= kMaxOrder; ++k) {
    for (ChunkInfo* c = h->order_head[k]; c != nullptr; c = c->order_next[k]) {
      CIDMALLOC_CHECK(c->fit_bucket != 0,
                      "run index: a chunk with free pages is not on it");
    }
  }
}

}  // namespace cidmalloc::page_heap
