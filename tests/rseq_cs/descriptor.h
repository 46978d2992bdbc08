// tests/rseq_cs/descriptor.h: struct rseq_cs as the linker leaves it in the
// __rseq_cs section, for the programs here that read the descriptors back
// (section_test's sources and fast_path_probe.cc).  The allocator itself
// only emits them from assembly (rseq/cs_x86_64_asm.h, cs_aarch64_asm.h).
#ifndef CIDMALLOC_TESTS_RSEQ_CS_DESCRIPTOR_H_
#define CIDMALLOC_TESTS_RSEQ_CS_DESCRIPTOR_H_

#include <stdint.h>

#include "rseq/abi.h"

namespace cidmalloc_rseq_cs_test {

// struct rseq_cs of the kernel ABI, as laid out in rseq/abi.h.
struct Descriptor {
  uint32_t version;
  uint32_t flags;
  uint64_t start_ip;
  uint64_t post_commit_offset;
  uint64_t abort_ip;
};
static_assert(sizeof(Descriptor) == CIDMALLOC_RSEQ_CS_ALIGN);

}  // namespace cidmalloc_rseq_cs_test

#endif  // CIDMALLOC_TESTS_RSEQ_CS_DESCRIPTOR_H_
