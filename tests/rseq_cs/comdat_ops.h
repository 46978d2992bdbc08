// tests/rseq_cs/comdat_ops.h: the addresses of rseq/rseq.h's inline
// operations, taken in two translation units (comdat_a.cc, comdat_b.cc).
//
// Taking the address of an inline function makes the compiler emit an
// out-of-line copy in a COMDAT group in each unit; the linker keeps one
// copy and discards the others.  Each copy holds a critical section whose
// descriptor must disappear together with the discarded copy (the
// -O0 build, where nothing is inlined, does the same to every call).
#ifndef CIDMALLOC_TESTS_RSEQ_CS_COMDAT_OPS_H_
#define CIDMALLOC_TESTS_RSEQ_CS_COMDAT_OPS_H_

#include <stdint.h>

struct InlineOps {
  void (*counter_add)(uintptr_t, int64_t);
  void* (*pop)(void* const*, uintptr_t);
  bool (*push)(void* const*, uintptr_t, void*, int);
  uint32_t (*pop_batch)(void* const*, uintptr_t, void**, uint32_t);
  uint32_t (*push_batch)(void* const*, uintptr_t, void* const*, uint32_t,
                         int);
  int (*get_cpu)(unsigned*, unsigned*);
  // The node-qualified sections (templates: COMDAT like the others).
  bool (*pop_qualified)(void* const*, uintptr_t, void**);
  bool (*push_qualified)(void* const*, uintptr_t, void*, int);
};

InlineOps InlineOpsA();
InlineOps InlineOpsB();

#endif  // CIDMALLOC_TESTS_RSEQ_CS_COMDAT_OPS_H_
