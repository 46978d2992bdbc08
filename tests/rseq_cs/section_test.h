// tests/rseq_cs/section_test.h: what the section test's sources share
// (section_test.cc, section_code_test.cc, section_ops_test.cc): the
// descriptor type (from descriptor.h), the linker-provided bounds of the
// sections, the probes (one per kind of critical section, defined in
// section_test.cc), the descriptors as linked, and the executable segments
// of the object that holds them.
#ifndef CIDMALLOC_TESTS_RSEQ_CS_SECTION_TEST_H_
#define CIDMALLOC_TESTS_RSEQ_CS_SECTION_TEST_H_

#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <string>
#include <vector>

#include "rseq/abi.h"
#include "rseq/rseq.h"
#include "tests/rseq_cs/descriptor.h"

#if !CIDMALLOC_RSEQ_SECTIONS
#error "the rseq_cs descriptors exist on x86-64 and AArch64 only"
#endif

namespace cidmalloc_section_test {

using cidmalloc_rseq_cs_test::Descriptor;

}  // namespace cidmalloc_section_test

// ---- Linker-provided bounds -------------------------------------------------
// Weak: null (instead of a link error) if a section is missing.  Hidden: they
// are this executable's own sections.
#define CS_BOUNDS(type, section)                                               \
  extern type __start_##section[] __attribute__((weak, visibility("hidden"))); \
  extern type __stop_##section[] __attribute__((weak, visibility("hidden")));
extern "C" {
CS_BOUNDS(const cidmalloc_section_test::Descriptor, __rseq_cs)
CS_BOUNDS(const cidmalloc_section_test::Descriptor* const,
          __rseq_cs_ptr_array)
CS_BOUNDS(const char, __rseq_failure)
CS_BOUNDS(const char, sec_cs_counter_add)
CS_BOUNDS(const char, sec_cs_pop)
CS_BOUNDS(const char, sec_cs_push)
CS_BOUNDS(const char, sec_cs_pop_wide)
CS_BOUNDS(const char, sec_cs_push_wide)
CS_BOUNDS(const char, sec_cs_pop_mm_cid)
CS_BOUNDS(const char, sec_cs_push_mm_cid)
CS_BOUNDS(const char, sec_cs_pop_qualified_once)
CS_BOUNDS(const char, sec_cs_push_qualified_once)
CS_BOUNDS(const char, sec_cs_pop_batch)
CS_BOUNDS(const char, sec_cs_push_batch)
CS_BOUNDS(const char, sec_cs_cpu_node)
}

// ---- One probe per kind of critical section -------------------------------
// Each in a section of its own (sec_cs_*, the bounds above); defined and
// described in section_test.cc.
namespace probes {

bool CounterAdd(uintptr_t base, int64_t delta);
bool Pop(void* const* table, uintptr_t offset, void** item);
bool Push(void* const* table, uintptr_t offset, void* item);
bool PopWide(void* const* table, uintptr_t offset, void** item);
bool PushWide(void* const* table, uintptr_t offset, void* item);
bool PopMmCid(void* const* table, uintptr_t offset, void** item);
bool PushMmCid(void* const* table, uintptr_t offset, void* item);
bool PopQualifiedOnce(void* const* table, uintptr_t offset, void** item);
bool PushQualifiedOnce(void* const* table, uintptr_t offset, void* item,
                       int32_t node);
uint32_t PopBatch(void* const* table, uintptr_t offset, void** out,
                  uint32_t want);
uint32_t PushBatch(void* const* table, uintptr_t offset, void* const* in,
                   uint32_t want);
void CpuNode(int32_t* cpu, int32_t* node);

}  // namespace probes

namespace cidmalloc_section_test {

// How a kind's critical section ends.
enum class Ending {
  kCommitStore,  // a store (or add) to memory: the commit.
  kAreaLoad,     // CpuNode: no commit, the last %fs-relative load.
};

struct Kind {
  const char* name;
  const char* lo;
  const char* hi;
  Ending ending;
};

inline std::vector<Kind> Kinds() {
  return {
      {"counter_add", __start_sec_cs_counter_add, __stop_sec_cs_counter_add,
       Ending::kCommitStore},
      {"pop", __start_sec_cs_pop, __stop_sec_cs_pop, Ending::kCommitStore},
      {"push", __start_sec_cs_push, __stop_sec_cs_push, Ending::kCommitStore},
      {"pop_wide", __start_sec_cs_pop_wide, __stop_sec_cs_pop_wide,
       Ending::kCommitStore},
      {"push_wide", __start_sec_cs_push_wide, __stop_sec_cs_push_wide,
       Ending::kCommitStore},
      {"pop_mm_cid", __start_sec_cs_pop_mm_cid, __stop_sec_cs_pop_mm_cid,
       Ending::kCommitStore},
      {"push_mm_cid", __start_sec_cs_push_mm_cid, __stop_sec_cs_push_mm_cid,
       Ending::kCommitStore},
      {"pop_qualified_once", __start_sec_cs_pop_qualified_once,
       __stop_sec_cs_pop_qualified_once, Ending::kCommitStore},
      {"push_qualified_once", __start_sec_cs_push_qualified_once,
       __stop_sec_cs_push_qualified_once, Ending::kCommitStore},
      {"pop_batch", __start_sec_cs_pop_batch, __stop_sec_cs_pop_batch,
       Ending::kCommitStore},
      {"push_batch", __start_sec_cs_push_batch, __stop_sec_cs_push_batch,
       Ending::kCommitStore},
      {"cpu_node", __start_sec_cs_cpu_node, __stop_sec_cs_cpu_node,
       Ending::kAreaLoad},
  };
}

// The descriptors, as the linker laid them out.
inline std::vector<const Descriptor*> AllDescriptors() {
  std::vector<const Descriptor*> v;
  for (const Descriptor* d = __start___rseq_cs; d < __stop___rseq_cs; ++d) {
    v.push_back(d);
  }
  return v;
}

inline uint64_t EndIp(const Descriptor* d) {
  return d->start_ip + d->post_commit_offset;
}

inline std::string Describe(const Descriptor* d) {
  char buf[160];
  snprintf(buf, sizeof buf,
           "descriptor #%td at %p {start 0x%llx, len %llu, abort 0x%llx}",
           d - __start___rseq_cs, static_cast<const void*>(d),
           static_cast<unsigned long long>(d->start_ip),
           static_cast<unsigned long long>(d->post_commit_offset),
           static_cast<unsigned long long>(d->abort_ip));
  return buf;
}

inline bool InRange(uint64_t ip, const char* lo, const char* hi) {
  return lo != nullptr && ip >= reinterpret_cast<uintptr_t>(lo) &&
         ip < reinterpret_cast<uintptr_t>(hi);
}

// ---- Executable segments of the object that holds __rseq_cs ----------------
struct Range {
  uintptr_t lo, hi;  // [lo, hi)
};

struct Segments {
  bool found = false;           // an object holds the descriptors
  std::string object;           // its name ("" for the main program)
  std::vector<Range> exec;      // its PT_LOAD segments with PF_X
  std::vector<Range> all_load;  // all its PT_LOAD segments
};

inline Segments SegmentsOfDescriptors() {
  Segments s;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        Segments* s = static_cast<Segments*>(arg);
        const uintptr_t anchor = reinterpret_cast<uintptr_t>(__start___rseq_cs);
        std::vector<Range> exec, all;
        bool holds = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const Range r{info->dlpi_addr + ph.p_vaddr,
                        info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
          all.push_back(r);
          if (ph.p_flags & PF_X) exec.push_back(r);
          if (anchor >= r.lo && anchor < r.hi) holds = true;
        }
        if (!holds) return 0;
        s->found = true;
        s->object = info->dlpi_name != nullptr ? info->dlpi_name : "";
        s->exec = exec;
        s->all_load = all;
        return 1;
      },
      &s);
  return s;
}

// The index of the executable segment holding ip, or -1.
inline int ExecSegmentOf(const Segments& s, uint64_t ip) {
  for (size_t i = 0; i < s.exec.size(); ++i) {
    if (ip >= s.exec[i].lo && ip < s.exec[i].hi) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace cidmalloc_section_test

#endif  // CIDMALLOC_TESTS_RSEQ_CS_SECTION_TEST_H_
