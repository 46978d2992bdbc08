// tests/rseq_cs/fast_path_probe.cc: the per-ID fast paths of rseq/rseq.h as
// standalone functions, for fast_path_budget_test.sh to disassemble.
//
// Each probe_* function is exactly one inline operation of rseq/rseq.h,
// compiled like any caller would compile it.  Each lives in a section of its
// own, so this program can tell which rseq_cs descriptor belongs to which
// probe.  Run with no arguments, it prints one line per probe:
//
//   <probe> <start_ip> <post_commit_ip> <abort_ip>
//
// with addresses relative to the program's load base, i.e. the addresses
// `objdump -d` shows for this (position-independent) file.
#include <link.h>
#include <stdint.h>
#include <stdio.h>

#include "rseq/rseq.h"
#include "tests/rseq_cs/descriptor.h"

#define PROBE(name) \
  extern "C" __attribute__((noinline, used, section("sec_" #name)))

// The instructions of these functions are what the budget test counts.
PROBE(probe_pop) void* probe_pop(void* const* table, uintptr_t offset) {
  return cidmalloc::rseq::Pop(table, offset);
}

PROBE(probe_push)
bool probe_push(void* const* table, uintptr_t offset, void* item) {
  return cidmalloc::rseq::Push(table, offset, item);
}

// The allocator's inline sections: the ID's low 16 bits index a table of
// kWideTableIds entries, with no bound check (rseq.h, PopUnchecked).
PROBE(probe_pop_wide) void* probe_pop_wide(void* const* table, uintptr_t offset) {
  void* item;
  return cidmalloc::rseq::PopUnchecked(table, offset, &item) ? item : nullptr;
}

PROBE(probe_push_wide)
bool probe_push_wide(void* const* table, uintptr_t offset, void* item) {
  return cidmalloc::rseq::PushUnchecked(table, offset, item);
}

// The allocator's inline fast paths' sections in cid mode: the wide ones
// with mm_cid read at its place in the area (IdBound::kWideMmCid).
PROBE(probe_pop_mm_cid)
void* probe_pop_mm_cid(void* const* table, uintptr_t offset) {
  void* item;
  return cidmalloc::rseq::PopUnchecked<cidmalloc::rseq::IdKind::kRaw,
                                       cidmalloc::rseq::IdBound::kWideMmCid>(
             table, offset, &item)
             ? item
             : nullptr;
}

PROBE(probe_push_mm_cid)
bool probe_push_mm_cid(void* const* table, uintptr_t offset, void* item) {
  return cidmalloc::rseq::PushUnchecked<cidmalloc::rseq::IdKind::kRaw,
                                        cidmalloc::rseq::IdBound::kWideMmCid>(
      table, offset, item);
}

// The node-qualified inline sections (multi-node cid mode): no restart
// loop, the bounds checked; the push insists on a node.
PROBE(probe_pop_qualified)
void* probe_pop_qualified(void* const* table, uintptr_t offset) {
  void* item;
  return cidmalloc::rseq::PopQualifiedOnce(table, offset, &item) ? item
                                                                 : nullptr;
}

PROBE(probe_push_qualified)
bool probe_push_qualified(void* const* table, uintptr_t offset, void* item,
                          int node) {
  return cidmalloc::rseq::PushQualifiedOnce(table, offset, item, node);
}

PROBE(probe_counter_add) void probe_counter_add(uintptr_t base, int64_t delta) {
  cidmalloc::rseq::CounterAdd(base, delta);
}

using cidmalloc_rseq_cs_test::Descriptor;

// Bounds of the descriptor section and of each probe's section, provided
// by the linker.
extern "C" {
extern const Descriptor __start___rseq_cs[]
    __attribute__((weak, visibility("hidden")));
extern const Descriptor __stop___rseq_cs[]
    __attribute__((weak, visibility("hidden")));
#define PROBE_BOUNDS(name)                         \
  extern const char __start_sec_##name[]           \
      __attribute__((weak, visibility("hidden"))); \
  extern const char __stop_sec_##name[]            \
      __attribute__((weak, visibility("hidden")));
PROBE_BOUNDS(probe_pop)
PROBE_BOUNDS(probe_push)
PROBE_BOUNDS(probe_counter_add)
PROBE_BOUNDS(probe_pop_wide)
PROBE_BOUNDS(probe_push_wide)
PROBE_BOUNDS(probe_pop_mm_cid)
PROBE_BOUNDS(probe_push_mm_cid)
PROBE_BOUNDS(probe_pop_qualified)
PROBE_BOUNDS(probe_push_qualified)
}

namespace {

// The load base of the object that holds `addr` (this executable).
uintptr_t LoadBaseOf(const void* addr) {
  struct Query {
    uintptr_t addr;
    uintptr_t base;
    bool found;
  } q{reinterpret_cast<uintptr_t>(addr), 0, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        Query* q = static_cast<Query*>(arg);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (q->addr >= lo && q->addr < lo + ph.p_memsz) {
            q->base = info->dlpi_addr;
            q->found = true;
            return 1;
          }
        }
        return 0;
      },
      &q);
  return q.found ? q.base : 0;
}

// Prints the descriptors whose critical section starts inside [lo, hi).
int PrintProbe(const char* name, const char* lo, const char* hi,
               uintptr_t base) {
  int found = 0;
  if (lo == nullptr || hi == nullptr) return 0;
  for (const Descriptor* d = __start___rseq_cs; d < __stop___rseq_cs; ++d) {
    const uintptr_t start = d->start_ip;
    if (start < reinterpret_cast<uintptr_t>(lo) ||
        start >= reinterpret_cast<uintptr_t>(hi)) {
      continue;
    }
    printf("%s 0x%lx 0x%lx 0x%lx\n", name,
           static_cast<unsigned long>(start - base),
           static_cast<unsigned long>(start + d->post_commit_offset - base),
           static_cast<unsigned long>(d->abort_ip - base));
    ++found;
  }
  return found;
}

}  // namespace

int main() {
  if (__start___rseq_cs == nullptr) {
    fprintf(stderr, "fast_path_probe: no __rseq_cs section\n");
    return 1;
  }
  const uintptr_t base = LoadBaseOf(__start___rseq_cs);
  int missing = 0;
  missing += PrintProbe("probe_pop", __start_sec_probe_pop,
                        __stop_sec_probe_pop, base) == 0;
  missing += PrintProbe("probe_push", __start_sec_probe_push,
                        __stop_sec_probe_push, base) == 0;
  missing += PrintProbe("probe_counter_add", __start_sec_probe_counter_add,
                        __stop_sec_probe_counter_add, base) == 0;
  missing += PrintProbe("probe_pop_wide", __start_sec_probe_pop_wide,
                        __stop_sec_probe_pop_wide, base) == 0;
  missing += PrintProbe("probe_push_wide", __start_sec_probe_push_wide,
                        __stop_sec_probe_push_wide, base) == 0;
  missing += PrintProbe("probe_pop_mm_cid", __start_sec_probe_pop_mm_cid,
                        __stop_sec_probe_pop_mm_cid, base) == 0;
  missing += PrintProbe("probe_push_mm_cid", __start_sec_probe_push_mm_cid,
                        __stop_sec_probe_push_mm_cid, base) == 0;
  missing += PrintProbe("probe_pop_qualified",
                        __start_sec_probe_pop_qualified,
                        __stop_sec_probe_pop_qualified, base) == 0;
  missing += PrintProbe("probe_push_qualified",
                        __start_sec_probe_push_qualified,
                        __stop_sec_probe_push_qualified, base) == 0;
  if (missing != 0) {
    fprintf(stderr, "fast_path_probe: %d probe(s) without a descriptor\n",
            missing);
    return 1;
  }
  return 0;
}
