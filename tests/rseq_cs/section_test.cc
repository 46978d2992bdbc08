// tests/rseq_cs/section_test.cc: the rseq_cs descriptors as linked.
//
// Every critical section of rseq/cs_ops.h leaves three things in the
// binary: a 32-byte struct rseq_cs in section __rseq_cs, a pointer to it in
// __rseq_cs_ptr_array, and a signed abort stub in __rseq_failure.  This test
// walks what the linker produced (between its __start_/__stop_ symbols) and
// checks what the kernel and the rseq layer rely on: the ABI fields, the
// signature before each abort IP, that the IPs point into executable code of
// this binary, that the abort IP is outside the section, the pointer array,
// and, without a disassembler, that each section starts by reading the rseq
// area (after at most loading the field's offset) and ends with the commit
// store.
//
// Each kind of operation is used in a probe function of its own section
// (sec_cs_*), so the test knows which descriptors belong to which kind.  The
// test is linked statically: the descriptors of //rseq's own slow paths are
// in this executable too and are checked as well.
//
// The checks are in three sources: this one (the probes, the descriptors
// and the pointer array), section_code_test.cc (the first and last
// instruction of every section) and section_ops_test.cc (the sections run);
// section_test.h holds what they share.
#include "tests/rseq_cs/section_test.h"

#include <gtest/gtest.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <vector>

// ---- One probe per kind of critical section -------------------------------
#define CS_PROBE(name) __attribute__((noinline, used, section(#name)))

namespace probes {

// The probes call the always_inline sections of rseq/cs_ops.h directly:
// they land in the probe at every optimisation level (rseq.h's wrappers
// are plain `inline` and stay out of line at -O0).
namespace cs = ::cidmalloc::rseq::cs;

CS_PROBE(sec_cs_counter_add)
bool CounterAdd(uintptr_t base, int64_t delta) {
  return cs::CounterAdd(base, delta);
}

CS_PROBE(sec_cs_pop)
bool Pop(void* const* table, uintptr_t offset, void** item) {
  return cs::Pop(table, offset, item);
}

CS_PROBE(sec_cs_push)
bool Push(void* const* table, uintptr_t offset, void* item) {
  return cs::Push(table, offset, item);
}

// The allocator's wide sections (the ID's low 16 bits, no bound check).
CS_PROBE(sec_cs_pop_wide)
bool PopWide(void* const* table, uintptr_t offset, void** item) {
  return cs::Pop<::cidmalloc::rseq::IdKind::kRaw, ::cidmalloc::rseq::IdBound::kWideTable>(
      table, offset, item);
}

CS_PROBE(sec_cs_push_wide)
bool PushWide(void* const* table, uintptr_t offset, void* item) {
  return cs::Push<::cidmalloc::rseq::IdKind::kRaw, ::cidmalloc::rseq::IdBound::kWideTable>(
      table, offset, item);
}

// The allocator's inline fast paths' sections (cid mode: mm_cid at its
// place in the area, addressed from the area offset).
CS_PROBE(sec_cs_pop_mm_cid)
bool PopMmCid(void* const* table, uintptr_t offset, void** item) {
  return cs::PopOnce<::cidmalloc::rseq::IdKind::kRaw>(table, offset, item);
}

CS_PROBE(sec_cs_push_mm_cid)
bool PushMmCid(void* const* table, uintptr_t offset, void* item) {
  return cs::PushOnce<::cidmalloc::rseq::IdKind::kRaw>(table, offset, item);
}

// The allocator's inline sections with node-qualified IDs (no restart
// loop; the push insists on a node).
CS_PROBE(sec_cs_pop_qualified_once)
bool PopQualifiedOnce(void* const* table, uintptr_t offset, void** item) {
  return cs::PopOnce<::cidmalloc::rseq::IdKind::kNodeQualified>(table, offset,
                                                                   item);
}

CS_PROBE(sec_cs_push_qualified_once)
bool PushQualifiedOnce(void* const* table, uintptr_t offset, void* item,
                       int32_t node) {
  return cs::PushOnce<::cidmalloc::rseq::IdKind::kNodeQualified>(
      table, offset, item, node);
}

CS_PROBE(sec_cs_pop_batch)
uint32_t PopBatch(void* const* table, uintptr_t offset, void** out,
                  uint32_t want) {
  return cs::PopBatch(table, offset, out, want);
}

CS_PROBE(sec_cs_push_batch)
uint32_t PushBatch(void* const* table, uintptr_t offset, void* const* in,
                   uint32_t want) {
  return cs::PushBatch(table, offset, in, want);
}

CS_PROBE(sec_cs_cpu_node)
void CpuNode(int32_t* cpu, int32_t* node) { cs::CpuNode(cpu, node); }

}  // namespace probes

namespace {

using namespace cidmalloc_section_test;  // NOLINT

// ---- Tests: the descriptors and the pointer array -------------------------

TEST(RseqCsSection, ExistsAlignedAndHoldsOneDescriptorPerKind) {
  ASSERT_NE(__start___rseq_cs, nullptr) << "no __rseq_cs section linked";
  ASSERT_NE(__stop___rseq_cs, nullptr);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(__start___rseq_cs);
  const uintptr_t hi = reinterpret_cast<uintptr_t>(__stop___rseq_cs);
  EXPECT_EQ(lo % CIDMALLOC_RSEQ_CS_ALIGN, 0u);
  // No padding or foreign data between descriptors.
  EXPECT_EQ((hi - lo) % sizeof(Descriptor), 0u);
  const size_t n = (hi - lo) / sizeof(Descriptor);
  // One per probe at least, plus those of //rseq's slow paths.
  EXPECT_GE(n, Kinds().size());
  RecordProperty("descriptors", static_cast<int>(n));
}

TEST(RseqCsSection, EveryKindHasItsDescriptor) {
  for (const Kind& k : Kinds()) {
    ASSERT_NE(k.lo, nullptr) << "probe section of " << k.name << " missing";
    int n = 0;
    for (const Descriptor* d : AllDescriptors()) {
      if (InRange(d->start_ip, k.lo, k.hi)) {
        ++n;
        // The whole section, including the commit, lies in the probe.
        EXPECT_TRUE(InRange(EndIp(d) - 1, k.lo, k.hi)) << Describe(d);
        // The abort stub is out of line, in __rseq_failure.
        EXPECT_FALSE(InRange(d->abort_ip, k.lo, k.hi)) << Describe(d);
      }
    }
    EXPECT_GE(n, 1) << "no critical section in the " << k.name << " probe";
  }
}

TEST(RseqCsSection, DescriptorFields) {
  for (const Descriptor* d : AllDescriptors()) {
    SCOPED_TRACE(Describe(d));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % CIDMALLOC_RSEQ_CS_ALIGN, 0u);
    EXPECT_EQ(d->version, 0u);
    EXPECT_EQ(d->flags, 0u);
    EXPECT_NE(d->start_ip, 0u);
    EXPECT_GT(d->post_commit_offset, 0u);
    EXPECT_GT(EndIp(d), d->start_ip);  // no wrap-around
    EXPECT_NE(d->abort_ip, 0u);
    EXPECT_FALSE(d->abort_ip >= d->start_ip && d->abort_ip < EndIp(d))
        << "abort IP inside its own critical section";
  }
}

TEST(RseqCsSection, IpsAreInExecutableSegmentsOfThisBinary) {
  ASSERT_NE(__start___rseq_cs, nullptr);
  const Segments s = SegmentsOfDescriptors();
  ASSERT_TRUE(s.found) << "no loaded object holds __rseq_cs";
  ASSERT_FALSE(s.exec.empty());
  for (const Descriptor* d : AllDescriptors()) {
    SCOPED_TRACE(Describe(d));
    const int first = ExecSegmentOf(s, d->start_ip);
    const int last = ExecSegmentOf(s, EndIp(d) - 1);
    EXPECT_GE(first, 0) << "start_ip not in an executable segment";
    EXPECT_EQ(last, first) << "the section is not inside one segment";
    EXPECT_GE(ExecSegmentOf(s, d->abort_ip), 0)
        << "abort_ip not in an executable segment";
    EXPECT_GE(ExecSegmentOf(s, d->abort_ip - 4), 0)
        << "the signature is not in an executable segment";
  }
  // The abort stubs have their own section.
  ASSERT_NE(__start___rseq_failure, nullptr);
  for (const Descriptor* d : AllDescriptors()) {
    EXPECT_TRUE(
        InRange(d->abort_ip, __start___rseq_failure, __stop___rseq_failure))
        << Describe(d);
  }
}

TEST(RseqCsSection, SignatureBeforeEveryAbortIp) {
  const Segments s = SegmentsOfDescriptors();
  for (const Descriptor* d : AllDescriptors()) {
    SCOPED_TRACE(Describe(d));
    // Read only what is known to be mapped.
    ASSERT_GE(ExecSegmentOf(s, d->abort_ip - 4), 0);
    uint32_t sig;
    memcpy(&sig, reinterpret_cast<const void*>(d->abort_ip - 4), sizeof sig);
    EXPECT_EQ(sig, static_cast<uint32_t>(CIDMALLOC_RSEQ_SIG))
        << std::hex << "found 0x" << sig;
  }
}

TEST(RseqCsSection, SectionsAndAbortStubsAreDistinct) {
  std::vector<const Descriptor*> v = AllDescriptors();
  std::sort(v.begin(), v.end(), [](const Descriptor* a, const Descriptor* b) {
    return a->start_ip < b->start_ip;
  });
  for (size_t i = 1; i < v.size(); ++i) {
    EXPECT_LE(EndIp(v[i - 1]), v[i]->start_ip)
        << "overlapping critical sections:\n  " << Describe(v[i - 1]) << "\n  "
        << Describe(v[i]);
  }
  std::map<uint64_t, const Descriptor*> aborts;
  for (const Descriptor* d : v) {
    auto [it, inserted] = aborts.emplace(d->abort_ip, d);
    EXPECT_TRUE(inserted) << "shared abort IP:\n  " << Describe(it->second)
                          << "\n  " << Describe(d);
    // No abort IP lies in any critical section.
    for (const Descriptor* other : v) {
      EXPECT_FALSE(d->abort_ip >= other->start_ip && d->abort_ip < EndIp(other))
          << Describe(d) << " aborts into " << Describe(other);
    }
  }
}

TEST(RseqCsPtrArray, OnePointerPerDescriptor) {
  ASSERT_NE(__start___rseq_cs_ptr_array, nullptr)
      << "no __rseq_cs_ptr_array section linked";
  // An array of pointers: each entry naturally aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(__start___rseq_cs_ptr_array) %
                alignof(const Descriptor*),
            0u);
  const size_t n = static_cast<size_t>(__stop___rseq_cs - __start___rseq_cs);
  std::vector<int> pointers_to(n, 0);
  for (const Descriptor* const* p = __start___rseq_cs_ptr_array;
       p < __stop___rseq_cs_ptr_array; ++p) {
    const Descriptor* d = *p;
    const uintptr_t off = reinterpret_cast<uintptr_t>(d) -
                          reinterpret_cast<uintptr_t>(__start___rseq_cs);
    ASSERT_TRUE(d >= __start___rseq_cs && d < __stop___rseq_cs)
        << "entry #" << (p - __start___rseq_cs_ptr_array) << " points to "
        << static_cast<const void*>(d) << ", outside __rseq_cs";
    ASSERT_EQ(off % sizeof(Descriptor), 0u)
        << "entry #" << (p - __start___rseq_cs_ptr_array)
        << " points into the middle of a descriptor";
    ++pointers_to[off / sizeof(Descriptor)];
  }
  EXPECT_EQ(static_cast<size_t>(__stop___rseq_cs_ptr_array -
                                __start___rseq_cs_ptr_array),
            n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(pointers_to[i], 1) << Describe(__start___rseq_cs + i);
  }
}

}  // namespace
