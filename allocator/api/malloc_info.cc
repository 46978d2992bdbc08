// allocator/api/malloc_info.cc: glibc's malloc_info(3), cidmalloc's figures
// in glibc's XML.
//
// A program that calls malloc_info under a preloaded cidmalloc would
// otherwise run glibc's, which describes glibc's own arenas: empty, since
// nothing allocates from them.  Tools that read the output (debug
// endpoints, memory dashboards) look for glibc's element names, so these
// are kept and filled with what they mean here:
//
//   <heap nr="N">           a NUMA node's heap (glibc: an arena);
//   <size from to total count>  the free objects of one size class on the
//                           node, in its spans and transfer caches (glibc:
//                           free chunks of those sizes in the arena's bins);
//   <total type="fast">     (all heaps) the class objects in the per-ID
//                           caches, which no node's figure includes (glibc:
//                           fastbin chunks); 0 in a heap;
//   <total type="rest">     the free class objects, and the free pages of
//                           the page heap and its cache of mappings;
//   <total type="mmap">     live mappings of their own (blocks above 2 MiB),
//                           as a size only: their count is not kept (0);
//   <system type="current"> bytes mapped: heap chunks and those mappings;
//   <system type="max">     the same: no peak is kept;
//   <aspace ...>            the same.
//
// The text is formatted into fixed buffers (RawBuffer) and then written
// with fwrite: the stream is the caller's, and its own buffer may come
// from malloc, which is safe since no allocator lock is held by then.
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>

#include "allocator/api/stats_internal.h"
#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "allocator/os/topology.h"
#include "allocator/page_heap/page_heap.h"
#include "rseq/raw_io.h"

namespace {

using cidmalloc::RawBuffer;

// Writes `b` to `fp`; false when the stream refuses it.
bool Put(const RawBuffer& b, FILE* fp) {
  return fwrite(b.data(), 1, b.size(), fp) == b.size();
}

void Total(RawBuffer& b, const char* type, uint64_t count, uint64_t size) {
  b.Str("<total type=\"").Str(type).Str("\" count=\"").Udec(count);
  b.Str("\" size=\"").Udec(size).Str("\"/>\n");
}

// The <system> and <aspace> elements, of a heap or of the whole.
void Footprint(RawBuffer& b, uint64_t mapped) {
  b.Str("<system type=\"current\" size=\"").Udec(mapped).Str("\"/>\n");
  b.Str("<system type=\"max\" size=\"").Udec(mapped).Str("\"/>\n");
  b.Str("<aspace type=\"total\" size=\"").Udec(mapped).Str("\"/>\n");
  b.Str("<aspace type=\"mprotect\" size=\"").Udec(mapped).Str("\"/>\n");
}

// What one node's heap element reports, and adds to the totals.
struct HeapFigures {
  uint64_t free_objects = 0;  // Free class objects (count).
  uint64_t free_bytes = 0;    // Their bytes plus the page heap's free pages.
  uint64_t huge_bytes = 0;
  uint64_t mapped = 0;
};

// Writes <heap nr="node"> ... </heap>; false when the stream fails.
bool WriteHeap(int node, FILE* fp, HeapFigures* out) {
  namespace central = cidmalloc::central;
  {
    RawBuffer b;
    b.Str("<heap nr=\"").Udec(static_cast<uint64_t>(node)).Str("\">\n");
    b.Str("<sizes>\n");
    if (!Put(b, fp)) return false;
  }
  uint64_t from = 1;
  for (int cls = 1; cls < central::kNumClasses; ++cls) {
    const uint64_t size = central::Class(cls).size;
    central::ClassStats cs;
    central::GetClassStats(node, cls, &cs);
    if (cs.free_objects != 0) {
      RawBuffer b;
      b.Str("  <size from=\"").Udec(from).Str("\" to=\"").Udec(size);
      b.Str("\" total=\"").Udec(cs.free_objects * size);
      b.Str("\" count=\"").Udec(cs.free_objects).Str("\"/>\n");
      if (!Put(b, fp)) return false;
      out->free_objects += cs.free_objects;
      out->free_bytes += cs.free_objects * size;
    }
    from = size + 1;
  }
  cidmalloc::page_heap::NodeStats ns;
  cidmalloc::page_heap::GetNodeStats(node, &ns);
  out->free_bytes += ns.free_bytes;
  out->huge_bytes = ns.huge_bytes;
  out->mapped = ns.mapped_bytes;
  RawBuffer totals;
  totals.Str("</sizes>\n");
  Total(totals, "fast", 0, 0);
  Total(totals, "rest", out->free_objects, out->free_bytes);
  RawBuffer footprint;  // A buffer of its own: 512 bytes hold either.
  Footprint(footprint, out->mapped);
  footprint.Str("</heap>\n");
  return Put(totals, fp) && Put(footprint, fp);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int malloc_info(
    int options, FILE* fp) {
  if (options != 0) {  // glibc: no option is defined.
    errno = EINVAL;
    return -1;
  }
  cidmalloc::api::Config();  // Initialises if nothing has yet.
  {
    RawBuffer b;
    b.Str("<malloc version=\"1\">\n");
    if (!Put(b, fp)) return -1;
  }
  HeapFigures all;
  for (int node = 0; node < cidmalloc::os::NumNodes(); ++node) {
    HeapFigures heap;
    if (!WriteHeap(node, fp, &heap)) return -1;
    all.free_objects += heap.free_objects;
    all.free_bytes += heap.free_bytes;
    all.huge_bytes += heap.huge_bytes;
    all.mapped += heap.mapped;
  }
  uint64_t cached_objects = 0, cached_bytes = 0;
  for (int cls = 1; cls < cidmalloc::central::kNumClasses; ++cls) {
    const uint64_t n = cidmalloc::front_end::CachedObjects(cls);
    cached_objects += n;
    cached_bytes += n * cidmalloc::central::Class(cls).size;
  }
  RawBuffer totals;
  Total(totals, "fast", cached_objects, cached_bytes);
  Total(totals, "rest", all.free_objects, all.free_bytes);
  Total(totals, "mmap", 0, all.huge_bytes);
  RawBuffer footprint;
  Footprint(footprint, all.mapped);
  footprint.Str("</malloc>\n");
  return Put(totals, fp) && Put(footprint, fp) ? 0 : -1;
}
