// rseq/inject.h: compile-time test hooks inside the critical sections.
//
// Off in normal builds: every macro expands to nothing.  The //rseq:rseq_test
// library variant defines
//   CIDMALLOC_RSEQ_INJECT        delay loops at each injection point; the
//                                loop count of point n is
//                                cidmalloc_rseq_inject_loops[n], so a test
//                                widens the window in which preemption,
//                                migration and signals hit a section.
//   CIDMALLOC_RSEQ_COMPARE_TWICE re-reads the ID right before each commit and
//                                aborts the process if it changed without
//                                the kernel restarting the section.
#ifndef CIDMALLOC_RSEQ_INJECT_H_
#define CIDMALLOC_RSEQ_INJECT_H_

#include <stdint.h>

#include "rseq/abi.h"

#define CIDMALLOC_STR_(x) #x
#define CIDMALLOC_STR(x) CIDMALLOC_STR_(x)

#ifdef CIDMALLOC_RSEQ_INJECT
extern "C" {
// Loop counts per injection point; written by tests between runs.
extern volatile uint32_t
    cidmalloc_rseq_inject_loops[CIDMALLOC_RSEQ_INJECT_POINTS]
    __attribute__((visibility("hidden")));
}
// Delay loop at point n.  Uses %eax, which every critical section clobbers.
//   eax = inject_loops[n]
//   while (eax != 0) eax--
#define CIDMALLOC_RSEQ_INJECT_ASM(n)                                  \
  "movl cidmalloc_rseq_inject_loops+4*" #n "(%%rip), %%eax\n\t"       \
  "testl %%eax, %%eax\n\t"                                            \
  "jz 77" #n "f\n\t"                                                  \
  "76" #n ":\n\t"                                                     \
  "decl %%eax\n\t"                                                    \
  "jnz 76" #n "b\n\t"                                                 \
  "77" #n ":\n\t"
// The same delay, from C++, for the portable fallback.
#define CIDMALLOC_RSEQ_INJECT_C(n)                                        \
  do {                                                                    \
    for (uint32_t i_ = cidmalloc_rseq_inject_loops[n]; i_ != 0; --i_) {   \
      asm volatile("" ::: "memory");                                      \
    }                                                                     \
  } while (0)
#else
#define CIDMALLOC_RSEQ_INJECT_ASM(n) ""
#define CIDMALLOC_RSEQ_INJECT_C(n) \
  do {                             \
  } while (0)
#endif

#ifdef CIDMALLOC_RSEQ_COMPARE_TWICE
// Before a commit: the ID must still be the one the section started with.
// Uses %rax, so it comes before any operation keeps a value there.
//   rax = idoff; if (area->id_field != id) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_ASM(id_operand)    \
  "movq %[idoff], %%rax\n\t"                           \
  "cmpl %%fs:(%%rax), %k[" id_operand "]\n\t"          \
  "jne %l[mismatch]\n\t"
// The same for the wide sections' 16-bit ID:
//   rax = idoff; if ((uint16) area->id_field != id) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_WIDE_ASM(id_operand) \
  "movq %[idoff], %%rax\n\t"                             \
  "cmpw %%fs:(%%rax), %w[" id_operand "]\n\t"            \
  "jne %l[mismatch]\n\t"
// The same for the wide mm_cid sections:
//   rax = area; if ((uint16) area->mm_cid != id) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_MM_CID_ASM(id_operand)          \
  "movq %[area], %%rax\n\t"                                        \
  "cmpw %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID) "(%%rax), %w[" \
  id_operand "]\n\t"                                                \
  "jne %l[mismatch]\n\t"
// The same for node-qualified IDs (id = node_id * cid_stride + mm_cid),
// after the section's last use of the id register, which it overwrites:
//   rax = area; id -= area->mm_cid; eax = area->node_id * cid_stride;
//   if (id != eax) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_QUALIFIED_ASM(id_operand)                \
  "movq %[area], %%rax\n\t"                                                  \
  "subl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID) "(%%rax), %k["        \
  id_operand "]\n\t"                                                         \
  "movl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_NODE_ID) "(%%rax), %%eax\n\t" \
  "imull %[stride], %%eax\n\t"                                               \
  "cmpl %%eax, %k[" id_operand "]\n\t"                                        \
  "jne %l[mismatch]\n\t"
#define CIDMALLOC_RSEQ_MISMATCH_LABELS , mismatch
#define CIDMALLOC_RSEQ_MISMATCH_HANDLER \
  mismatch:                             \
  ::cidmalloc::rseq::IdChangedInCriticalSection();
#else
#define CIDMALLOC_RSEQ_COMPARE_TWICE_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_COMPARE_TWICE_WIDE_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_COMPARE_TWICE_MM_CID_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_COMPARE_TWICE_QUALIFIED_ASM(id_operand) ""
#define CIDMALLOC_RSEQ_MISMATCH_LABELS
#define CIDMALLOC_RSEQ_MISMATCH_HANDLER
#endif

namespace cidmalloc::rseq {
// Reports an ID that changed inside a critical section and aborts.
[[noreturn]] void IdChangedInCriticalSection();
}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_INJECT_H_
