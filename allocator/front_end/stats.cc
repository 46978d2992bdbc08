// allocator/front_end/stats.cc: the front end's statistics: slabs, the
// pages they touched, the objects their caches hold (front_end.h, Stats and
// CachedObjects).  Read under g_lock, which only slab creation and the
// drains take: the fast paths never wait for a reader.  The stacks' counts
// are relaxed loads of their top words (rseq::Stack::Count), so a figure
// taken while other threads allocate is a recent one, not a snapshot.
#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "allocator/front_end/slab_store.h"
#include "allocator/os/spinlock.h"
#include "rseq/rseq.h"

namespace cidmalloc::front_end {

namespace {

using central::Class;
using central::kNumClasses;
using namespace internal;  // NOLINT: this file reads the store.

// What Stats::ids_seen counts of `id`: its cid (a node-qualified ID's
// cid part) or cpu in an rseq mode, the soft ID itself in none mode;
// kMaxIds for a soft ID in an rseq mode (not counted).  With node-qualified
// IDs a cid has one slab per node it ran on, so ids_seen can be below the
// slabs.
uint32_t RawIdOf(uint32_t id) {
  const rseq::ProcessState& p = rseq::Process();
  if (p.mode == rseq::Mode::kNone) return id;
  if (id >= p.num_rseq_ids) return kMaxIds;
  if (p.id_kind == rseq::IdKind::kNodeQualified) return id % p.cid_stride;
  return id;
}

// The 4 KiB pages of `slab` that may have been written: its header, its
// remote and run stacks, and the stack of each class ever granted a
// capacity (a stack is written only once it has one): marked in
// used_classes by the grant, or, where the thread moved to this ID between
// reading its ID and the grant, seen as a capacity now.
uint64_t TouchedBytes(void* slab) {
  constexpr uint32_t kPage = 4096;
  constexpr uint32_t kMaxPages = kLayout.bytes / kPage + 2;
  bool touched[kMaxPages] = {};
  const uintptr_t base = reinterpret_cast<uintptr_t>(slab);
  auto mark = [&](uint32_t offset, uint64_t bytes) {
    const uintptr_t first = (base + offset) / kPage - base / kPage;
    const uintptr_t last = (base + offset + bytes - 1) / kPage - base / kPage;
    for (uintptr_t p = first; p <= last; ++p) touched[p] = true;
  };
  mark(0, kHeaderBytes);
  mark(kLayout.remote_offset, sizeof(rseq::Stack));
  mark(kLayout.run_offset, sizeof(rseq::Stack));
  const SlabHeader* hdr = HeaderOf(slab);
  for (int c = 1; c < kNumClasses; ++c) {
    const rseq::Stack* s = StackOf(slab, kLayout.offset[c]);
    if ((hdr->used_classes[c / 64].load(std::memory_order_relaxed) >>
             (c % 64) & 1) != 0 ||
        __atomic_load_n(&s->capacity, __ATOMIC_RELAXED) != 0) {
      mark(kLayout.offset[c], sizeof(rseq::Stack));
    }
  }
  uint64_t pages = 0;
  for (bool t : touched) pages += t;
  return pages * kPage;
}

}  // namespace

void GetStats(Stats* out) {
  os::SpinLockHolder h(&g_lock);
  out->slabs = g_num_slabs;
  out->ids_seen = 0;
  out->max_id = g_max_id;
  out->slab_bytes = 0;
  out->cached_bytes = 0;
  out->idle_drains = g_idle_drains;
  uint64_t seen[(kMaxIds + 63) / 64] = {};  // Raw IDs counted (RawIdOf).
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    void* slab = g_store[id];  // Never cleared: every ID that had a slab.
    if (slab == nullptr) continue;
    if (const uint32_t raw = RawIdOf(id); raw < kMaxIds) {
      const uint64_t bit = uint64_t{1} << (raw % 64);
      out->ids_seen += (seen[raw / 64] & bit) == 0;
      seen[raw / 64] |= bit;
    }
    out->slab_bytes += TouchedBytes(slab);
    for (int c = 1; c < kNumClasses; ++c) {
      out->cached_bytes +=
          uint64_t{StackOf(slab, kLayout.offset[c])->Count()} *
          Class(c).size;
    }
    out->cached_bytes += CachedRunBytes(slab);
  }
}

uint64_t CachedObjects(int cls) {
  if (cls <= 0 || cls >= kNumClasses) return 0;
  os::SpinLockHolder h(&g_lock);
  uint64_t n = 0;
  for (uint32_t id = 0; id < kMaxIds; ++id) {
    void* slab = g_store[id];
    if (slab != nullptr) n += StackOf(slab, kLayout.offset[cls])->Count();
  }
  return n;
}

}  // namespace cidmalloc::front_end
