// allocator/api/class_stats.cc: the size-class table of the public stats
// API (cidmalloc.h: cidmalloc_get_class_stats, cidmalloc_print_class_stats;
// printed at exit under CIDMALLOC_STATS=2).  Where each class's objects
// are: the central lists count their spans' capacity and free objects (the
// transfer caches' included), the front end counts the objects in its
// stacks, and the program holds the rest.  Nothing here allocates.
#include <string.h>

#include "allocator/api/cidmalloc.h"
#include "allocator/api/stats_internal.h"
#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "allocator/front_end/front_end.h"
#include "allocator/os/topology.h"
#include "rseq/raw_io.h"

namespace cidmalloc::api {
namespace {

// The class's figures on every node.
cidmalloc_class_stats ClassFigures(int cls) {
  const central::SizeClassInfo& info = central::Class(cls);
  cidmalloc_class_stats s{};
  s.size = info.size;
  for (int node = 0; node < os::NumNodes(); ++node) {
    central::ClassStats cs;
    central::GetClassStats(node, cls, &cs);
    s.spans += cs.spans;
    s.objects += cs.total_objects;
    s.free_objects += cs.free_objects;
  }
  s.span_bytes = s.spans * info.span_bytes;
  s.cached_objects = front_end::CachedObjects(cls);
  // Read one after the other while threads move objects: clamp, so the
  // three parts still add up to objects.
  if (s.free_objects > s.objects) s.free_objects = s.objects;
  const uint64_t held = s.objects - s.free_objects;
  if (s.cached_objects > held) s.cached_objects = held;
  s.in_use_objects = held - s.cached_objects;
  return s;
}

}  // namespace
}  // namespace cidmalloc::api

extern "C" __attribute__((visibility("default"))) unsigned
cidmalloc_num_classes(void) {
  return static_cast<unsigned>(cidmalloc::central::kNumClasses);
}

extern "C" __attribute__((visibility("default"))) size_t
cidmalloc_get_class_stats(unsigned cls, struct cidmalloc_class_stats* out,
                          size_t size) {
  const unsigned classes =
      static_cast<unsigned>(cidmalloc::central::kNumClasses);
  if (cls == 0 || cls >= classes) return 0;
  cidmalloc::api::Config();  // Initialises if nothing has yet.
  const cidmalloc_class_stats s =
      cidmalloc::api::ClassFigures(static_cast<int>(cls));
  const size_t filled = size < sizeof(s) ? size : sizeof(s);
  memcpy(out, &s, filled);
  if (size > filled) {
    memset(reinterpret_cast<char*>(out) + filled, 0, size - filled);
  }
  return filled;
}

extern "C" __attribute__((visibility("default"))) void
cidmalloc_print_class_stats(int fd) {
  using cidmalloc::RawBuffer;
  cidmalloc::api::Config();
  {
    RawBuffer b;
    b.Str("cidmalloc: class   size  spans  span KiB   objects    in use"
          "    cached      free\n");
    b.WriteTo(fd);
  }
  uint64_t spans = 0, span_bytes = 0;
  uint64_t in_use_bytes = 0, cached_bytes = 0, free_bytes = 0;
  for (int cls = 1; cls < cidmalloc::central::kNumClasses; ++cls) {
    const cidmalloc_class_stats s = cidmalloc::api::ClassFigures(cls);
    if (s.spans == 0) continue;
    RawBuffer b;
    b.Str("cidmalloc: ");
    b.Udec(static_cast<uint64_t>(cls), 5);
    b.Udec(s.size, 7);
    b.Udec(s.spans, 7);
    b.Udec(s.span_bytes / 1024, 10);
    b.Udec(s.objects, 10);
    b.Udec(s.in_use_objects, 10);
    b.Udec(s.cached_objects, 10);
    b.Udec(s.free_objects, 10);
    b.Ch('\n');
    b.WriteTo(fd);
    spans += s.spans;
    span_bytes += s.span_bytes;
    in_use_bytes += s.in_use_objects * s.size;
    cached_bytes += s.cached_objects * s.size;
    free_bytes += s.free_objects * s.size;
  }
  RawBuffer b;
  b.Str("cidmalloc: classes: ").Udec(spans).Str(" spans of ");
  b.Udec(span_bytes / 1024).Str(" KiB: ");
  b.Udec(in_use_bytes / 1024).Str(" KiB in use, ");
  b.Udec(cached_bytes / 1024).Str(" KiB cached, ");
  b.Udec(free_bytes / 1024).Str(" KiB free, ");
  b.Udec((span_bytes - in_use_bytes - cached_bytes - free_bytes) / 1024);
  b.Str(" KiB span tails\n");
  b.WriteTo(fd);
}
