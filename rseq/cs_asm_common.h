// rseq/cs_asm_common.h: the parts of the critical sections' assembly that
// are the same on every architecture, for rseq/cs_x86_64_asm.h and
// rseq/cs_aarch64_asm.h: the descriptor and its pointer, the operand lists
// of the process-wide fields, the instantiation of an operation for each
// ID kind, and the test hooks' empty forms.  Each architecture's header
// defines what these refer to: CIDMALLOC_RSEQ_FIELD (the constraint of a
// process-wide field: "m" on x86-64, which reads them inside the section,
// "r" on AArch64), the ID loads (CIDMALLOC_RSEQ_CS_LOAD_*) and, in test
// builds, the hooks (CIDMALLOC_RSEQ_INJECT_ASM, the compare-twice checks).
//
// Only included by the architectures' section headers.
#ifndef CIDMALLOC_RSEQ_CS_ASM_COMMON_H_
#define CIDMALLOC_RSEQ_CS_ASM_COMMON_H_

#include "rseq/abi.h"
#include "rseq/inject.h"
#include "rseq/state.h"

// The descriptor (label 3) and its pointer.  The "?" flag puts both, and
// the architecture's abort stub after them, in the section group of the
// code around them: when the linker drops a duplicate COMDAT copy of an
// inline function, its descriptors go with it instead of pointing into
// discarded code.  The code between 4 and 5 is the critical section; 6 is
// the abort IP.
#define CIDMALLOC_RSEQ_CS_DESCRIPTOR                                      \
  ".pushsection __rseq_cs, \"aw?\"\n\t"                                   \
  ".balign " CIDMALLOC_STR(CIDMALLOC_RSEQ_CS_ALIGN) "\n"                 \
  "3:\n\t"                                                               \
  ".long 0, 0\n\t"                   /* version, flags */                \
  ".quad 4f, (5f - 4f), 6f\n\t"      /* start, post-commit len, abort */ \
  ".popsection\n\t"                                                      \
  ".pushsection __rseq_cs_ptr_array, \"aw?\"\n\t"                         \
  ".balign 8\n\t"                                                       \
  ".quad 3b\n\t"                                                         \
  ".popsection\n\t"

// The process-wide fields the sections read, as operands (see each
// architecture's header for where it reads them).
//   The wide mm_cid sections' only one (PopOnce / PushOnce<kRaw>).
#define CIDMALLOC_RSEQ_CS_AREA_INPUT \
  [area] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.area_offset)
//   The node-qualified sections without a restart loop (PopOnce /
//   PushOnce<kNodeQualified>).
#define CIDMALLOC_RSEQ_CS_QUALIFIED_INPUTS                                  \
  [area] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.area_offset),    \
      [stride] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.cid_stride), \
      [nnodes] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.num_nodes)
//   Every other section.
#define CIDMALLOC_RSEQ_CS_COMMON_INPUTS                                     \
  [area] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.area_offset),    \
      [idoff] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.id_offset), \
      [nids] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.num_rseq_ids), \
      [stride] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.cid_stride), \
      [nnodes] CIDMALLOC_RSEQ_FIELD(::cidmalloc::rseq::g_process.num_nodes)

// The raw, the wide raw and wide mm_cid (Pop and Push only) and the
// node-qualified instantiation of an operation: one `asm volatile goto`
// each, with the same operands.
#define CIDMALLOC_RSEQ_RAW_ASM(body) \
  body(CIDMALLOC_RSEQ_CS_LOAD_ID, CIDMALLOC_RSEQ_COMPARE_TWICE_ASM("id"))
#define CIDMALLOC_RSEQ_WIDE_ASM(body)    \
  body(CIDMALLOC_RSEQ_CS_LOAD_ID_WIDE,   \
       CIDMALLOC_RSEQ_COMPARE_TWICE_WIDE_ASM("id"))
#define CIDMALLOC_RSEQ_MM_CID_ASM(body)         \
  body(CIDMALLOC_RSEQ_CS_LOAD_MM_CID_WIDE,      \
       CIDMALLOC_RSEQ_COMPARE_TWICE_MM_CID_ASM("id"))
#define CIDMALLOC_RSEQ_QUALIFIED_ASM(body, check)     \
  body(CIDMALLOC_RSEQ_CS_LOAD_QUALIFIED_ID(check),    \
       CIDMALLOC_RSEQ_COMPARE_TWICE_QUALIFIED_ASM("id"))

// The test hooks (rseq/inject.h) outside test builds: nothing.
#ifndef CIDMALLOC_RSEQ_INJECT
#define CIDMALLOC_RSEQ_INJECT_ASM(n) ""
#endif
#ifndef CIDMALLOC_RSEQ_COMPARE_TWICE
#define CIDMALLOC_RSEQ_COMPARE_TWICE_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_COMPARE_TWICE_WIDE_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_COMPARE_TWICE_MM_CID_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_COMPARE_TWICE_QUALIFIED_ASM(id_operand) ""
#endif

#endif  // CIDMALLOC_RSEQ_CS_ASM_COMMON_H_
