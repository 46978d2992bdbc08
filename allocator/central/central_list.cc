#include "allocator/central/central_list.h"

#include <errno.h>

#include "allocator/central/span_list.h"
#include "allocator/os/check.h"
#include "allocator/os/spinlock.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/page_heap.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::central {

namespace internal {
constinit CentralList g_lists[os::kMaxNodes][kNumClasses];
}  // namespace internal

namespace {

using namespace internal;  // NOLINT: this file implements them.
using page_heap::ChunkInfo;
using page_heap::kPageShift;
using page_heap::PageIndex;

struct SpanTags {
  uint32_t tag[kNumClasses];
};

// Recycled Span records, per class (their bitmaps' sizes differ); guarded
// by g_span_lock.
constinit os::SpinLock g_span_lock;
Span* g_free_spans[kNumClasses] = {};

// The span tag of each class (central_list.h) without the node, which
// Grow() adds: the class, and from SetTagPayloads() on, the payload.
// Written once during initialisation, before any span exists; read under
// the list locks.
constexpr SpanTags MakeDefaultTags() {
  SpanTags t{};
  for (int c = 0; c < kNumClasses; ++c) t.tag[c] = static_cast<uint32_t>(c);
  return t;
}
constinit SpanTags g_tags = MakeDefaultTags();

int OrderOfSpan(int cls) {
  return __builtin_ctz(Class(cls).span_bytes) - kPageShift;
}

// A record for a span of class `cls`, its bitmap all clear.
Span* NewSpanRecord(int cls) {
  const uint32_t words = BitmapWords(cls);
  Span* s = nullptr;
  {
    os::SpinLockHolder h(&g_span_lock);
    if (g_free_spans[cls] != nullptr) {
      s = g_free_spans[cls];
      g_free_spans[cls] = s->next;
    }
  }
  if (s == nullptr) {
    s = static_cast<Span*>(
        page_heap::MetaAlloc(sizeof(Span) + words * sizeof(uint64_t), 64));
    if (s == nullptr) return nullptr;
  }
  *s = Span{};
  for (uint32_t w = 0; w < words; ++w) SpanBits(s)[w] = 0;
  return s;
}

void DeleteSpanRecord(Span* s, int cls) {
  os::SpinLockHolder h(&g_span_lock);
  s->next = g_free_spans[cls];
  g_free_spans[cls] = s;
}

uint32_t SpanSlot(uintptr_t start) {
  return PageIndex(start) >> page_heap::kSpanSlotShift;
}

// Carves a new span for (node, cls).  Called with l->lock held.
Span* Grow(CentralList* l, int node, int cls) {
  Span* s = NewSpanRecord(cls);
  if (s == nullptr) return nullptr;
  bool zeroed;
  const uintptr_t start = page_heap::AllocSpan(node, OrderOfSpan(cls), &zeroed);
  if (start == 0) {
    DeleteSpanRecord(s, cls);
    return nullptr;
  }
  ChunkInfo* chunk = page_heap::LookupChunk(start);
  const SizeClassInfo& c = Class(cls);
  s->start = start;
  s->chunk = chunk;
  s->capacity = c.limit / c.size;
  s->cls = static_cast<uint8_t>(cls);
  chunk->span_meta[SpanSlot(start)] = s;
  // Published to free() through the objects handed out (see pagemap.h).
  CIDMALLOC_ASSERT(chunk->node == node);
  page_heap::SetSpanTags(start, c.span_bytes,
                         g_tags.tag[cls] |
                             static_cast<uint32_t>(node) << kTagNodeShift);
  Link(l, s);
  ++l->spans;
  l->free_objects += s->capacity;
  l->total_objects += s->capacity;
  return s;
}

}  // namespace

namespace internal {

void Release(CentralList* l, Span* s) {
  const SizeClassInfo& c = Class(s->cls);
  if (s->place == Place::kPartial) Unlink(l, s, Place::kFull);
  if (s->queued) Dequeue(l, s);
  --l->spans;
  l->free_objects -= s->capacity;
  l->total_objects -= s->capacity;
  page_heap::SetSpanTags(s->start, c.span_bytes, 0);
  s->chunk->span_meta[SpanSlot(s->start)] = nullptr;
  page_heap::FreeSpan(s->chunk, s->start, OrderOfSpan(s->cls));
  DeleteSpanRecord(s, s->cls);
}

}  // namespace internal

void SetTagPayloads(const uint32_t (&payload)[kNumClasses]) {
  for (int c = 1; c < kNumClasses; ++c) {
    CIDMALLOC_CHECK(payload[c] <= kMaxTagPayload,
                    "span tag payload above 18 bits");
    g_tags.tag[c] = static_cast<uint32_t>(c) | payload[c] << kTagPayloadShift;
  }
}

uint32_t RemoveBatch(int node, int cls, void** out, uint32_t n) {
  CentralList* l = &g_lists[node][cls];
  const uint32_t size = Class(cls).size;
  uint32_t got = 0;
  os::SpinLockHolder h(&l->lock);
  ++l->removals;
  // The most recently flushed objects first, without touching them.
  while (got < n && l->transfer_count > 0) {
    out[got++] = l->transfer[--l->transfer_count];
  }
  while (got < n) {
    Span* s = l->partial;
    if (s == nullptr) {
      s = Grow(l, node, cls);
      if (s == nullptr) break;  // errno is ENOMEM.
    }
    // Returned objects first, in ascending order, from the bitmap alone.
    uint64_t* bits = SpanBits(s);
    while (got < n && s->free_bits > 0) {
      while (bits[s->first_word] == 0) ++s->first_word;
      uint64_t w = bits[s->first_word];
      const uintptr_t base = s->start + uintptr_t{s->first_word} * 64 * size;
      uint32_t took = 0;
      while (w != 0 && got < n) {
        out[got++] = reinterpret_cast<void*>(
            base + uintptr_t(__builtin_ctzll(w)) * size);
        w &= w - 1;
        ++took;
      }
      bits[s->first_word] = w;
      s->free_bits -= took;
      s->in_use += took;
    }
    while (got < n && s->carved < s->capacity) {
      out[got++] = reinterpret_cast<void*>(s->start + uintptr_t{s->carved} * size);
      ++s->carved;
      ++s->in_use;
    }
    if (s->free_bits == 0 && s->carved == s->capacity) {
      Unlink(l, s, Place::kFull);
    }
  }
  l->free_objects -= got;  // Counts the transfer cache's objects too.
  return got;
}

namespace {

// Returns object p of class cls to its span, under l->lock (l the list of
// the span's node).  Aborts on a double free it can prove.
void ReturnToSpan(CentralList* l, int cls, ChunkInfo* chunk, uintptr_t p) {
  const uintptr_t start = p & ~uintptr_t{Class(cls).span_bytes - 1};
  Span* s = static_cast<Span*>(chunk->span_meta[SpanSlot(start)]);
  if (s == nullptr || s->cls != cls || s->in_use == 0) {
    l->lock.Unlock();
    os::FatalMisuse("free(): double free or corruption (span already free)",
                    reinterpret_cast<void*>(p));
  }
  const uint32_t index = ObjectIndex(p - start, cls);
  const uint32_t word = index / 64;
  const uint64_t bit = uint64_t{1} << (index % 64);
  if (index >= s->carved || (SpanBits(s)[word] & bit) != 0) {
    l->lock.Unlock();
    os::FatalMisuse(index >= s->carved
                        ? "free(): invalid pointer (an object never handed out)"
                        : "free(): double free (the object is free in its span)",
                    reinterpret_cast<void*>(p));
  }
  // Relaxed: a purge reads the bitmap without the lock (span_list.h).
  __atomic_store_n(&SpanBits(s)[word], SpanBits(s)[word] | bit,
                   __ATOMIC_RELAXED);
  ++s->free_bits;
  if (word < s->first_word) s->first_word = word;
  --s->in_use;
  ++l->free_objects;
  s->returned = true;
  if (!s->queued) Enqueue(l, s);
  if (s->place == Place::kPurging) return;  // The purge puts it back.
  if (s->place == Place::kFull) Link(l, s);
  // Keep one empty span per list to absorb alloc/free ping-pong.
  if (s->in_use == 0 && (s->prev != nullptr || s->next != nullptr)) {
    Release(l, s);
  }
}

// The node of all of objs[0..n), or -1 if they are not on one node.  The
// span tag carries the node (Grow), so this needs no chunk lookup.
int NodeOfAll(void* const* objs, uint32_t n) {
  if (os::NumNodes() == 1) return 0;
  int node = -1;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t tag =
        page_heap::LookupSpanTag(reinterpret_cast<uintptr_t>(objs[i]));
    CIDMALLOC_CHECK(tag != 0, "object outside the heap");
    if (node >= 0 && TagNode(tag) != node) return -1;
    node = TagNode(tag);
  }
  return node;
}

// Puts objs[0..n) in the transfer cache of (node, cls) if they fit (at most
// kTransferBatches batches).  Takes the list's lock.
bool TryTransferIn(int node, int cls, void* const* objs, uint32_t n) {
  const uint32_t limit = kTransferBatches * Class(cls).batch;
  if (n > limit) return false;
  CentralList* l = &g_lists[node][cls];
  os::SpinLockHolder h(&l->lock);
  if (l->transfer == nullptr) {
    l->transfer = static_cast<void**>(
        page_heap::MetaAlloc(kTransferSlots * sizeof(void*), 64));
    if (l->transfer == nullptr) return false;
  }
  if (l->transfer_count + n > limit) return false;
  for (uint32_t i = 0; i < n; ++i) l->transfer[l->transfer_count + i] = objs[i];
  l->transfer_count += n;
  l->free_objects += n;
  return true;
}

// Empties the transfer cache of l into the spans, under l->lock.
void FlushTransferLocked(CentralList* l, int cls) {
  while (l->transfer_count > 0) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(l->transfer[--l->transfer_count]);
    --l->free_objects;  // ReturnToSpan counts it again.
    ReturnToSpan(l, cls, page_heap::LookupChunk(p), p);
  }
}

}  // namespace

void InsertBatch(int cls, void* const* objs, uint32_t n, Via via) {
  if (n == 0) return;
  if (via == Via::kTransferCache) {
    const int node = NodeOfAll(objs, n);
    if (node >= 0 && TryTransferIn(node, cls, objs, n)) return;
  }
  CentralList* held = nullptr;
  for (uint32_t i = 0; i < n; ++i) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(objs[i]);
    ChunkInfo* chunk = page_heap::LookupChunk(p);
    CIDMALLOC_CHECK(chunk != nullptr, "object outside the heap");
    CentralList* l = &g_lists[chunk->node][cls];
    if (l != held) {
      if (held != nullptr) held->lock.Unlock();
      l->lock.Lock();
      held = l;
    }
    ReturnToSpan(l, cls, chunk, p);
  }
  if (held != nullptr) held->lock.Unlock();
}

namespace {

// Which lists ReleaseLists releases.
enum class Lists : uint8_t {
  kAll,   // malloc_trim.
  kIdle,  // those no refill took objects from since the last kIdle call.
};

// Empties the transfer cache of each list `which` picks into the spans,
// gives every span with no object in use back to the page heap and the
// free pages of its sparse spans to the OS.
void ReleaseLists(Lists which) {
  for (int node = 0; node < os::NumNodes(); ++node) {
    for (int cls = 1; cls < kNumClasses; ++cls) {
      CentralList* l = &g_lists[node][cls];
      {
        os::SpinLockHolder h(&l->lock);
        if (which == Lists::kIdle && l->removals != l->removals_seen) {
          l->removals_seen = l->removals;
          continue;
        }
        FlushTransferLocked(l, cls);
        for (Span* s = l->partial; s != nullptr;) {
          Span* next = s->next;
          if (s->in_use == 0) Release(l, s);
          s = next;
        }
      }
      PurgeQueue(l, which == Lists::kAll ? Settled::kNotRequired
                                         : Settled::kRequired);
    }
  }
}

}  // namespace

void ReleaseEmptySpans() { ReleaseLists(Lists::kAll); }
void ReleaseIdleLists() { ReleaseLists(Lists::kIdle); }

void GetClassStats(int node, int cls, ClassStats* out) {
  CentralList* l = &g_lists[node][cls];
  os::SpinLockHolder h(&l->lock);
  out->spans = l->spans;
  out->free_objects = l->free_objects;
  out->total_objects = l->total_objects;
}

void ForkPrepare() {
  for (auto& node : g_lists) {
    for (CentralList& l : node) l.lock.Lock();
  }
  g_span_lock.Lock();
}
void ForkParent() {
  g_span_lock.Unlock();
  for (auto& node : g_lists) {
    for (CentralList& l : node) l.lock.Unlock();
  }
}
void ForkChild() {
  g_span_lock.ResetAfterFork();
  for (auto& node : g_lists) {
    for (CentralList& l : node) l.lock.ResetAfterFork();
  }
  FinishPurgesAfterFork();
}

}  // namespace cidmalloc::central
