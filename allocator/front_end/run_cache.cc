// allocator/front_end/run_cache.cc: the run stacks' slow paths, drains and
// statistics (run_cache.h).
#include "allocator/front_end/run_cache.h"

#include "allocator/front_end/slab_store.h"
#include "allocator/os/check.h"
#include "allocator/os/os.h"
#include "allocator/page_heap/page_heap.h"
#include "allocator/page_heap/pagemap.h"

namespace cidmalloc::front_end {

uintptr_t g_run_secret = 0;

using namespace internal;  // NOLINT: the store whose run stacks these are.

namespace {

// A run off the cache, back to its heap as free() would give it.
void FreeRun(void* run) {
  static_cast<RunHeader*>(run)->mark = 0;
  const uintptr_t p = reinterpret_cast<uintptr_t>(run);
  page_heap::FreeLarge(page_heap::LookupChunk(p), p);
}

}  // namespace

void TakeRunMiss(void* run) { FreeRun(run); }

void CachedRunFreed(void* run) {
  os::FatalMisuse("free(): double free (a cached page run)", run);
}

bool CacheRunSlow(void* run, int node) {
  // A published slab refused the run (full, or another node): no retry.
  // Else CurrentSlab creates the ID's slab, or is nullptr while a drain
  // holds it.
  if (Published(rseq::CurrentId()) == nullptr && CurrentSlab() != nullptr &&
      rseq::Push(g_slabs, kLayout.run_offset, run, node)) {
    return true;
  }
  static_cast<RunHeader*>(run)->mark = 0;
  return false;
}

void ReturnRuns() {
  while (void* run = rseq::Pop(g_slabs, kLayout.run_offset)) FreeRun(run);
}

namespace internal {

void InitRuns() { g_run_secret = os::RandomSecret(0); }

void DrainRunsHeld(void* slab) {
  rseq::Stack* s = StackOf(slab, kLayout.run_offset);
  void* run;
  while (s->PopHeld(&run)) FreeRun(run);
}

uint64_t CachedRunBytes(void* slab) {
  // Relaxed: a statistic.  The top run only (kRunCapacity is 1); its
  // length from the page heap's books, not from the run's header, which a
  // program may own again by now.
  static_assert(kRunCapacity == 1);
  const rseq::Stack* s = StackOf(slab, kLayout.run_offset);
  const uint64_t top = __atomic_load_n(&s->top, __ATOMIC_RELAXED);
  const uintptr_t p = reinterpret_cast<uintptr_t>(rseq::Stack::ItemOf(top));
  if (p == 0) return 0;
  page_heap::ChunkInfo* chunk = page_heap::LookupChunk(p);
  return chunk != nullptr && chunk->kind == page_heap::ChunkKind::kHeap
             ? page_heap::LargeUsableSize(chunk, p)
             : 0;
}

const char* CheckRunsHeld(void* slab) {
  return StackOf(slab, kLayout.run_offset)
      ->CheckHeld(kRunCapacity, [](void* run) -> const char* {
        const uintptr_t p = reinterpret_cast<uintptr_t>(run);
        page_heap::ChunkInfo* c = page_heap::LookupChunk(p);
        if (c == nullptr || c->kind != page_heap::ChunkKind::kHeap) {
          return "front end: a cached run outside the page heap";
        }
        const RunHeader* h = static_cast<const RunHeader*>(run);
        if (page_heap::LargeUsableSize(c, p) !=
                size_t{h->pages} << page_heap::kPageShift ||
            h->pages == 0 || h->pages > kMaxCachedRunPages ||
            h->node != c->node || !IsCachedRun(run)) {
          return "front end: a cached run that is no marked live run of "
                 "its length and node";
        }
        return nullptr;
      });
}

}  // namespace internal

}  // namespace cidmalloc::front_end
