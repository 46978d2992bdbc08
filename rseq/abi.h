// rseq/abi.h: every constant shared between C++ and the critical-section
// assembly lives here, and nowhere else.
//
// The kernel side is the `struct rseq` ABI of include/uapi/linux/rseq.h.  We do
// not include <linux/rseq.h> (older Debian headers lack node_id and mm_cid);
// the layout below is the ABI and is checked with static_asserts.
//
// Ownership of the fields (see docs/rseq.md, "ABI rules"):
//   cpu_id_start, cpu_id, node_id, mm_cid   written by the kernel only.  We
//                                           never store to them once the
//                                           area is registered.
//   rseq_cs                                 written by user space (the
//                                           critical-section prologue) and
//                                           cleared by the kernel.
//   flags                                   deprecated; never touched.
#ifndef CIDMALLOC_RSEQ_ABI_H_
#define CIDMALLOC_RSEQ_ABI_H_

// ---- Kernel ABI (struct rseq) ------------------------------------------
#define CIDMALLOC_RSEQ_OFF_CPU_ID_START 0
#define CIDMALLOC_RSEQ_OFF_CPU_ID 4
#define CIDMALLOC_RSEQ_OFF_RSEQ_CS 8
#define CIDMALLOC_RSEQ_OFF_FLAGS 16
#define CIDMALLOC_RSEQ_OFF_NODE_ID 20
#define CIDMALLOC_RSEQ_OFF_MM_CID 24
// The length we register: the original 32-byte ABI, which already holds
// node_id and mm_cid.  Kernels before 6.3 accept only this length.
#define CIDMALLOC_RSEQ_AREA_SIZE 32
// The signature that must sit in the 4 bytes right before every abort IP,
// the one glibc registers its areas with on each architecture.  AArch64's
// is an instruction, `brk #0x45e0`, so that a stray jump to it traps.
#if defined(__aarch64__)
#define CIDMALLOC_RSEQ_SIG 0xd428bc00
#else
#define CIDMALLOC_RSEQ_SIG 0x53053053
#endif
// rseq(2)'s flags argument: undo the calling thread's registration.
#define CIDMALLOC_RSEQ_FLAG_UNREGISTER 1
// AT_RSEQ_FEATURE_SIZE thresholds: the end offset of each field.
#define CIDMALLOC_RSEQ_FEATURE_NODE_ID 24
#define CIDMALLOC_RSEQ_FEATURE_MM_CID 28
// auxv tags (Linux 6.3); older libc headers do not define them.
#define CIDMALLOC_AT_RSEQ_FEATURE_SIZE 27
#define CIDMALLOC_AT_RSEQ_ALIGN 28
// Values the kernel / glibc leave in cpu_id when the area is not usable.
#define CIDMALLOC_RSEQ_CPU_ID_UNINITIALIZED (-1)
#define CIDMALLOC_RSEQ_CPU_ID_REGISTRATION_FAILED (-2)

// ---- struct rseq_cs descriptor (32 bytes, 32-byte aligned) -------------
//   u32 version; u32 flags; u64 start_ip; u64 post_commit_offset;
//   u64 abort_ip;
#define CIDMALLOC_RSEQ_CS_ALIGN 32

// ---- cidmalloc per-ID data layouts used by the assembly ----------------
// A per-ID bounded stack (rseq::Stack), linked through its items:
//   u64 top          item | count << 48, 0 when empty; the item's first
//                    word holds the top word below it
//   u8 reserved[6]   zero, so that the u64 at offset 8 (the limit) is
//   u16 capacity     capacity << 48, which a push compares with the top
//                    word as it is
#define CIDMALLOC_STACK_OFF_TOP 0
#define CIDMALLOC_STACK_OFF_LIMIT 8
#define CIDMALLOC_STACK_OFF_CAPACITY 14
#define CIDMALLOC_STACK_BYTES 16
#define CIDMALLOC_STACK_COUNT_SHIFT 48
#define CIDMALLOC_STACK_MAX_CAPACITY 0xffff
#define CIDMALLOC_STACK_ITEM_MASK 0xffffffffffff
// Per-ID counters are one cache line apart: counter(id) = base + (id << 6).
#define CIDMALLOC_COUNTER_STRIDE_SHIFT 6

// ---- Test injection points (rseq/inject.h) -----------------------------
// Number of delay-loop injection points per critical section.
#define CIDMALLOC_RSEQ_INJECT_POINTS 4

#endif  // CIDMALLOC_RSEQ_ABI_H_
