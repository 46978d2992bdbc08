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
// The assembly of both (CIDMALLOC_RSEQ_INJECT_ASM, the
// CIDMALLOC_RSEQ_COMPARE_TWICE_*ASM macros) is in each architecture's
// section header (rseq/cs_x86_64_asm.h, rseq/cs_aarch64_asm.h); here are
// what C++ shares: the loop counts, the portable delay and the mismatch
// label.
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
// The same delay, from C++, for the portable fallback.
#define CIDMALLOC_RSEQ_INJECT_C(n)                                        \
  do {                                                                    \
    for (uint32_t i_ = cidmalloc_rseq_inject_loops[n]; i_ != 0; --i_) {   \
      asm volatile("" ::: "memory");                                      \
    }                                                                     \
  } while (0)
#else
#define CIDMALLOC_RSEQ_INJECT_C(n) \
  do {                             \
  } while (0)
#endif

#ifdef CIDMALLOC_RSEQ_COMPARE_TWICE
#define CIDMALLOC_RSEQ_MISMATCH_LABELS , mismatch
#define CIDMALLOC_RSEQ_MISMATCH_HANDLER \
  mismatch:                             \
  ::cidmalloc::rseq::IdChangedInCriticalSection();
#else
#define CIDMALLOC_RSEQ_MISMATCH_LABELS
#define CIDMALLOC_RSEQ_MISMATCH_HANDLER
#endif

namespace cidmalloc::rseq {
// Reports an ID that changed inside a critical section and aborts.
[[noreturn]] void IdChangedInCriticalSection();
}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_INJECT_H_
