// tests/rseq_cs/comdat_b.cc: see comdat_ops.h.
#include "rseq/rseq.h"
#include "tests/rseq_cs/comdat_ops.h"

InlineOps InlineOpsB() {
  namespace r = ::cidmalloc::rseq;
  return {&r::CounterAdd, &r::Pop,       &r::Push,
          &r::PopBatch,   &r::PushBatch, &r::GetCpu,
          &r::PopUnchecked<r::IdKind::kNodeQualified>,
          &r::PushUnchecked<r::IdKind::kNodeQualified>};
}
