// tests/rseq_cs/section_code_test.cc: the code at the edges of every
// critical section: it starts by reading the rseq area and ends with the
// commit store, checked with a decoder of the few instruction forms found
// there (part of the section_test and section_comdat_test binaries; see
// section_test.cc): an x86-64 decoder of the few forms found there, or
// AArch64's fixed-width encodings.
#include <gtest/gtest.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <vector>

#include "tests/rseq_cs/section_test.h"

namespace {

using namespace cidmalloc_section_test;  // NOLINT

#if CIDMALLOC_RSEQ_X86_64
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

// The three questions the test asks, on x86-64.
bool StartsWithAreaLoad(const uint8_t* start, size_t len) {
  // The per-ID operations first load the ID field's %fs offset (a 64-bit
  // load from g_process into the ID register), then the ID through it;
  // CpuNode reads cpu_id directly.  Nothing else may come first.
  MemInsn first = DecodeMemInsn(start, len);
  if (first.length != 0 && IsOffsetLoad(first)) {
    first = DecodeMemInsn(start + first.length, len - first.length);
  }
  return first.length != 0 && IsAreaLoad(first);
}
bool EndsWithCommitStore(uint64_t end) { return EndsWith(end, IsCommitStore); }
bool EndsWithAreaLoad(uint64_t end) { return EndsWith(end, IsAreaLoad); }

#elif CIDMALLOC_RSEQ_AARCH64
// ---- AArch64: fixed 4-byte instructions, matched by their encodings -------
// (Arm ARM, "Loads and stores": the unsigned-offset and register-offset
// forms; Rt, Rn and the offset fields are masked out.)
struct Form {
  uint32_t mask, bits;
};
// ldr wT, [xN, #imm]; ldrh wT, [xN, #imm]; ldr wT, [xN, xM];
// ldrh wT, [xN, xM]: the 32- and 16-bit loads from the rseq area (its
// address in x16, or the thread pointer plus the ID field's offset).
constexpr Form kAreaLoads[] = {{0xffc00000u, 0xb9400000u},
                               {0xffc00000u, 0x79400000u},
                               {0xffe0fc00u, 0xb8606800u},
                               {0xffe0fc00u, 0x78606800u}};
// str xT, [xN, #imm]; str xT, [xN, xM] (the counter); strh wT, [xN, #imm]
// (the capacity): the commit stores.
constexpr Form kCommitStores[] = {{0xffc00000u, 0xf9000000u},
                                  {0xffe0fc00u, 0xf8206800u},
                                  {0xffc00000u, 0x79000000u}};

template <size_t N>
bool IsOneOf(const uint8_t* p, const Form (&forms)[N]) {
  uint32_t insn;
  memcpy(&insn, p, sizeof insn);
  for (const Form& f : forms) {
    if ((insn & f.mask) == f.bits) return true;
  }
  return false;
}
bool StartsWithAreaLoad(const uint8_t* start, size_t len) {
  return len >= 4 && IsOneOf(start, kAreaLoads);
}
bool EndsWithCommitStore(uint64_t end) {
  return IsOneOf(reinterpret_cast<const uint8_t*>(end) - 4, kCommitStores);
}
bool EndsWithAreaLoad(uint64_t end) {
  return IsOneOf(reinterpret_cast<const uint8_t*>(end) - 4, kAreaLoads);
}
#endif

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

    const uint8_t* start = reinterpret_cast<const uint8_t*>(d->start_ip);
    const size_t len = static_cast<size_t>(d->post_commit_offset);
    EXPECT_TRUE(StartsWithAreaLoad(start, len))
        << "the section does not start by reading the rseq area";

    const bool store = EndsWithCommitStore(EndIp(d));
    const bool load = EndsWithAreaLoad(EndIp(d));
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

}  // namespace
