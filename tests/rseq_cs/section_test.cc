// tests/rseq_cs/section_test.cc: the rseq_cs descriptors as linked.
//
// Every critical section of rseq/cs_x86_64.h leaves three things in the
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
#include <gtest/gtest.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rseq/abi.h"
#include "rseq/rseq.h"

#if !CIDMALLOC_RSEQ_X86_64
#error "the rseq_cs descriptors exist on x86-64 only"
#endif

namespace {

// struct rseq_cs of the kernel ABI (rseq/abi.h).
struct Descriptor {
  uint32_t version;
  uint32_t flags;
  uint64_t start_ip;
  uint64_t post_commit_offset;
  uint64_t abort_ip;
};
static_assert(sizeof(Descriptor) == CIDMALLOC_RSEQ_CS_ALIGN);

}  // namespace

// ---- Linker-provided bounds -------------------------------------------------
// Weak: null (instead of a link error) if a section is missing.  Hidden: they
// are this executable's own sections.
#define CS_BOUNDS(type, section)                                               \
  extern type __start_##section[] __attribute__((weak, visibility("hidden"))); \
  extern type __stop_##section[] __attribute__((weak, visibility("hidden")));
extern "C" {
CS_BOUNDS(const Descriptor, __rseq_cs)
CS_BOUNDS(const Descriptor* const, __rseq_cs_ptr_array)
CS_BOUNDS(const char, __rseq_failure)
CS_BOUNDS(const char, sec_cs_counter_add)
CS_BOUNDS(const char, sec_cs_pop)
CS_BOUNDS(const char, sec_cs_push)
CS_BOUNDS(const char, sec_cs_pop_wide)
CS_BOUNDS(const char, sec_cs_push_wide)
CS_BOUNDS(const char, sec_cs_pop_mm_cid)
CS_BOUNDS(const char, sec_cs_push_mm_cid)
CS_BOUNDS(const char, sec_cs_pop_batch)
CS_BOUNDS(const char, sec_cs_push_batch)
CS_BOUNDS(const char, sec_cs_cpu_node)
}

// ---- One probe per kind of critical section -------------------------------
#define CS_PROBE(name) __attribute__((noinline, used, section(#name)))

namespace probes {

// The probes call the always_inline sections of rseq/cs_x86_64.h directly:
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
  return cs::PopMmCid(table, offset, item);
}

CS_PROBE(sec_cs_push_mm_cid)
bool PushMmCid(void* const* table, uintptr_t offset, void* item) {
  return cs::PushMmCid(table, offset, item);
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

using ::cidmalloc::rseq::Stack;

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

std::vector<Kind> Kinds() {
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
      {"pop_batch", __start_sec_cs_pop_batch, __stop_sec_cs_pop_batch,
       Ending::kCommitStore},
      {"push_batch", __start_sec_cs_push_batch, __stop_sec_cs_push_batch,
       Ending::kCommitStore},
      {"cpu_node", __start_sec_cs_cpu_node, __stop_sec_cs_cpu_node,
       Ending::kAreaLoad},
  };
}

// The descriptors, as the linker laid them out.
std::vector<const Descriptor*> AllDescriptors() {
  std::vector<const Descriptor*> v;
  for (const Descriptor* d = __start___rseq_cs; d < __stop___rseq_cs; ++d) {
    v.push_back(d);
  }
  return v;
}

uint64_t EndIp(const Descriptor* d) {
  return d->start_ip + d->post_commit_offset;
}

std::string Describe(const Descriptor* d) {
  char buf[160];
  snprintf(buf, sizeof buf,
           "descriptor #%td at %p {start 0x%llx, len %llu, abort 0x%llx}",
           d - __start___rseq_cs, static_cast<const void*>(d),
           static_cast<unsigned long long>(d->start_ip),
           static_cast<unsigned long long>(d->post_commit_offset),
           static_cast<unsigned long long>(d->abort_ip));
  return buf;
}

bool InRange(uint64_t ip, const char* lo, const char* hi) {
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

Segments SegmentsOfDescriptors() {
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
int ExecSegmentOf(const Segments& s, uint64_t ip) {
  for (size_t i = 0; i < s.exec.size(); ++i) {
    if (ip >= s.exec[i].lo && ip < s.exec[i].hi) return static_cast<int>(i);
  }
  return -1;
}

// ---- A decoder for the few instruction forms at the edges of a section -----
// Decodes [fs] [REX] opcode ModRM [SIB] [disp] with a memory operand and
// returns its length, or 0 if the bytes are not of that form.
struct MemInsn {
  bool fs = false;     // 0x64 segment prefix
  bool rex_w = false;  // 64-bit operand size
  uint16_t opcode = 0;  // 0x0fXX for the two-byte opcodes (0x0f escape)
  size_t length = 0;
};

MemInsn DecodeMemInsn(const uint8_t* p, size_t avail) {
  MemInsn in;
  size_t i = 0;
  if (i < avail && p[i] == 0x64) {
    in.fs = true;
    ++i;
  }
  if (i < avail && (p[i] & 0xf0) == 0x40) {
    in.rex_w = (p[i] & 0x08) != 0;
    ++i;
  }
  if (i + 2 > avail) return {};
  in.opcode = p[i++];
  if (in.opcode == 0x0f) {
    if (i + 2 > avail) return {};
    in.opcode = static_cast<uint16_t>(0x0f00 | p[i++]);
  }
  const uint8_t modrm = p[i++];
  const int mod = modrm >> 6, rm = modrm & 7;
  if (mod == 3) return {};  // register operand, not memory
  size_t disp = mod == 1 ? 1 : mod == 2 ? 4 : 0;
  if (rm == 4) {  // SIB follows
    if (i + 1 > avail) return {};
    const uint8_t sib = p[i++];
    if (mod == 0 && (sib & 7) == 5) disp = 4;
  } else if (mod == 0 && rm == 5) {
    disp = 4;  // RIP-relative
  }
  i += disp;
  if (i > avail) return {};
  in.length = i;
  return in;
}

// The commit: `movl reg32, mem` (stack count) or `addq reg64, mem` (counter).
bool IsCommitStore(const MemInsn& in) {
  return !in.fs &&
         ((in.opcode == 0x89 && !in.rex_w) || (in.opcode == 0x01 && in.rex_w));
}
// `movl %fs:disp(reg), reg32`: a 32-bit load from the rseq area, or
// `movzwl %fs:disp(reg), reg32`: the wide sections' 16-bit ID load.
bool IsAreaLoad(const MemInsn& in) {
  return in.fs && (in.opcode == 0x8b || in.opcode == 0x0fb7) && !in.rex_w;
}

// `movq mem, reg64` (no %fs): the load of the ID field's %fs offset from
// g_process, RIP-relative or through a register holding its address.
bool IsOffsetLoad(const MemInsn& in) {
  return !in.fs && in.opcode == 0x8b && in.rex_w;
}

// True if some instruction of the accepted form ends exactly at `end`.
template <typename Pred>
bool EndsWith(uint64_t end, Pred accept) {
  const uint8_t* e = reinterpret_cast<const uint8_t*>(end);
  for (size_t len = 2; len <= 15; ++len) {
    const MemInsn in = DecodeMemInsn(e - len, len);
    if (in.length == len && accept(in)) return true;
  }
  return false;
}

// ---- Tests ----------------------------------------------------------------

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

// Without a disassembler: the first instruction of every section loads from
// the rseq area (the ID, or cpu_id for CpuNode: read after arming), and the
// last one is the commit store (or, for CpuNode, which commits nothing, the
// node_id load).
TEST(RseqCsCode, FirstInstructionReadsTheAreaLastIsTheCommit) {
  const Segments s = SegmentsOfDescriptors();
  std::vector<Kind> kinds = Kinds();
  int stores = 0, loads = 0;
  for (const Descriptor* d : AllDescriptors()) {
    SCOPED_TRACE(Describe(d));
    ASSERT_GE(ExecSegmentOf(s, d->start_ip), 0);
    ASSERT_EQ(ExecSegmentOf(s, EndIp(d) - 1), ExecSegmentOf(s, d->start_ip));

    // The per-ID operations first load the ID field's %fs offset (a 64-bit
    // load from g_process into the ID register), then the ID through it;
    // CpuNode reads cpu_id directly.  Nothing else may come first.
    const uint8_t* start = reinterpret_cast<const uint8_t*>(d->start_ip);
    const size_t len = static_cast<size_t>(d->post_commit_offset);
    MemInsn first = DecodeMemInsn(start, len);
    if (first.length != 0 && IsOffsetLoad(first)) {
      first = DecodeMemInsn(start + first.length, len - first.length);
    }
    EXPECT_TRUE(first.length != 0 && IsAreaLoad(first))
        << "the section does not start by reading the rseq area";

    const bool store = EndsWith(EndIp(d), IsCommitStore);
    const bool load = EndsWith(EndIp(d), IsAreaLoad);
    EXPECT_TRUE(store || load) << "the last instruction is neither a commit "
                                  "store nor an area load";
    stores += store;
    loads += load;
    for (const Kind& k : kinds) {
      if (!InRange(d->start_ip, k.lo, k.hi)) continue;
      if (k.ending == Ending::kCommitStore) {
        EXPECT_TRUE(store) << k.name
                           << ": the last instruction is not the "
                              "commit store";
      } else {
        EXPECT_TRUE(load) << k.name
                          << ": the last instruction is not the "
                             "node_id load";
      }
    }
  }
  EXPECT_GE(stores, 5);
  EXPECT_GE(loads, 1);
}

// The sections are real code: run them, through the probes and through the
// public operations of rseq/rseq.h, on per-ID data.  The thread may change
// ID between two operations, so only totals are checked.  Every push takes
// a fresh item: a stack links through its items, and an item may still be
// on another ID's stack.
class RseqCsOps : public ::testing::Test {
 protected:
  static constexpr uint32_t kCapacity = 64;
  struct alignas(64) Counter {
    int64_t v;
  };

  void SetUp() override {
    ids_ = ::cidmalloc::rseq::NumIds();
    const size_t words = sizeof(Stack) / sizeof(uint64_t);
    regions_.resize(ids_);
    table_.resize(ids_);
    for (uint32_t i = 0; i < ids_; ++i) {
      regions_[i].reset(new uint64_t[words]());
      Stack* st = reinterpret_cast<Stack*>(regions_[i].get());
      st->capacity = kCapacity;
      table_[i] = st;
    }
    counters_.resize(ids_);
  }

  uint64_t StackedItems() const {
    uint64_t n = 0;
    for (void* t : table_) n += static_cast<Stack*>(t)->Count();
    return n;
  }
  int64_t CounterSum() const {
    int64_t sum = 0;
    for (const Counter& c : counters_) sum += c.v;
    return sum;
  }
  uintptr_t CounterBase() const {
    return reinterpret_cast<uintptr_t>(counters_.data());
  }

  uint32_t ids_ = 0;
  std::vector<std::unique_ptr<uint64_t[]>> regions_;
  std::vector<void*> table_;
  std::vector<Counter> counters_;
  void* Item() {
    EXPECT_LT(next_item_, kItems);
    return &items_[next_item_++];
  }
  static constexpr int kItems = 64;
  uint64_t items_[kItems] = {};
  int next_item_ = 0;
};

TEST_F(RseqCsOps, Probes) {
  namespace r = ::cidmalloc::rseq;
  // The sections arm rseq_cs in the rseq area: only where there is one.
  if (r::CurrentMode() == r::Mode::kNone) GTEST_SKIP() << "no rseq";
  void* const* t = table_.data();
  // The wide sections index a table of kWideTableIds entries: the same
  // regions, null beyond them.
  std::vector<void*> wide(r::kWideTableIds, nullptr);
  std::copy(table_.begin(), table_.end(), wide.begin());
  int64_t stored = 0, taken = 0, added = 0;
  for (int round = 0; round < 3; ++round) {
    // Raw-ID modes only: with node-qualified IDs they fail (the allocator
    // does not run them there).
    for (int i = 0; i < 2; ++i) {
      stored += probes::PushWide(wide.data(), 0, Item());
    }
    void* w = nullptr;
    taken += probes::PopWide(wide.data(), 0, &w);
    // The mm_cid sections: cid mode only (in cpu mode mm_cid is no ID).
    if (r::RawIdIsMmCid()) {
      for (int i = 0; i < 2; ++i) {
        stored += probes::PushMmCid(wide.data(), 0, Item());
      }
      taken += probes::PopMmCid(wide.data(), 0, &w);
    }
    for (int i = 0; i < 4; ++i) stored += probes::Push(t, 0, Item());
    void* in[4] = {Item(), Item(), Item(), Item()};
    stored += probes::PushBatch(t, 0, in, 4);
    void* item = nullptr;
    taken += probes::Pop(t, 0, &item);
    void* out[8] = {};
    taken += probes::PopBatch(t, 0, out, 8);
    // want == 0 fails in the section itself (the rseq.h wrappers return
    // before it), on a stack that is not empty: nothing popped or pushed.
    stored += probes::Push(t, 0, Item());
    EXPECT_EQ(probes::PopBatch(t, 0, out, 0), 0u);
    void* none[1] = {Item()};
    EXPECT_EQ(probes::PushBatch(t, 0, none, 0), 0u);
    taken += probes::Pop(t, 0, &item);
    for (int i = 0; i < 100; ++i)
      added += probes::CounterAdd(CounterBase(), 3) ? 3 : 0;
  }
  EXPECT_GT(stored, 0);
  EXPECT_EQ(StackedItems(), static_cast<uint64_t>(stored - taken));
  EXPECT_GT(added, 0);
  EXPECT_EQ(CounterSum(), added);
  if (r::Process().has_node_id) {
    int32_t cpu = -1, node = -1;
    probes::CpuNode(&cpu, &node);
    EXPECT_GE(cpu, 0);
    EXPECT_GE(node, 0);
  }
}

TEST_F(RseqCsOps, PublicOperations) {
  namespace r = ::cidmalloc::rseq;
  void* const* t = table_.data();
  int64_t stored = 0, taken = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 4; ++i) stored += r::Push(t, 0, Item());
    void* in[4] = {Item(), Item(), Item(), Item()};
    stored += r::PushBatch(t, 0, in, 4);
    taken += r::Pop(t, 0) != nullptr;
    void* out[8] = {};
    taken += r::PopBatch(t, 0, out, 8);
    for (int i = 0; i < 100; ++i) r::CounterAdd(CounterBase(), 3);
  }
  EXPECT_EQ(stored, 3 * 8);  // never full, and every ID has a region
  EXPECT_EQ(StackedItems(), static_cast<uint64_t>(stored - taken));
  EXPECT_EQ(CounterSum(), 3 * 100 * 3);
  unsigned cpu = ~0u, node = ~0u;
  ASSERT_EQ(r::GetCpu(&cpu, &node), 0);
  EXPECT_LT(cpu, r::Process().possible_cpus);
}

}  // namespace
