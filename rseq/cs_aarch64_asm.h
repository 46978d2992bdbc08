// rseq/cs_aarch64_asm.h: the text of the restartable critical sections,
// AArch64 (little-endian): the same macros, operand names and layout as
// rseq/cs_x86_64_asm.h, whose comment gives the layout and the invariants
// (one commit store, the last instruction; the ID read after arming; no
// store to shared data on a failure branch; kernel-owned fields only
// loaded).  The C++ operations that instantiate them are in rseq/cs_ops.h.
//
// What differs from x86-64:
//   - No segment-relative addressing: the arming code reads the thread
//     pointer (tpidr_el0) into the id register and leaves the area's
//     address in x16 for the rest of the section; the node, mm_cid and
//     compare-twice loads address the area through x16.
//   - Two fixed scratch registers, x16 and x17 (the intra-procedure-call
//     registers, which no section's operand can be): x16 the area, x17 the
//     descriptor address, the delay loops' count and the compare-twice
//     value.  Each is clobbered by every section.
//   - The signature before each abort IP is the instruction `brk #0x45e0`
//     (CIDMALLOC_RSEQ_SIG, glibc's for AArch64): .inst, not data.
//   - Operands that x86-64 reads as memory are registers here ("r"
//     inputs): 31 registers leave room, and a 32-bit register operand is
//     written %w[...], a 64-bit one %x[...].
//
// Operands shared by every section (cf. rseq/cs_x86_64_asm.h):
//   area    the thread-pointer offset of the rseq area
//   idoff   the thread-pointer offset of the ID field (mm_cid or cpu_id)
//   nids, stride, nnodes   as on x86-64
//
// Only included by rseq/cs_ops.h.
#ifndef CIDMALLOC_RSEQ_CS_AARCH64_ASM_H_
#define CIDMALLOC_RSEQ_CS_AARCH64_ASM_H_

#include "rseq/abi.h"
#include "rseq/cs_asm_common.h"
#include "rseq/inject.h"
#include "rseq/state.h"

// The descriptor (label 3) and its pointer (rseq/cs_asm_common.h), and the
// signed abort stub (label 6) that branches to the C++ label `abort`.
#define CIDMALLOC_RSEQ_CS_DEFINE                                          \
  CIDMALLOC_RSEQ_CS_DESCRIPTOR                                           \
  ".pushsection __rseq_failure, \"ax?\"\n\t"                              \
  ".inst " CIDMALLOC_STR(CIDMALLOC_RSEQ_SIG) "\n" /* brk #0x45e0 */      \
  "6:\n\t"                                                               \
  "b %l[abort]\n\t"                  /* restart the operation */         \
  ".popsection\n\t"

// id = thread pointer; x17 = &descriptor; x16 = &area;
// area->rseq_cs = x17; start_ip.  The arming store is the last instruction
// before start_ip.
#define CIDMALLOC_RSEQ_CS_ARM                                             \
  "mrs %x[id], tpidr_el0\n\t"          /* id = thread pointer */          \
  "adrp x17, 3b\n\t"                   /* x17 = page of descriptor */     \
  "add x17, x17, :lo12:3b\n\t"         /* x17 = &descriptor */            \
  "add x16, %x[id], %x[area]\n\t"      /* x16 = &area */                  \
  "str x17, [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_RSEQ_CS) "]\n"     \
                                       /* area->rseq_cs = x17 */          \
  "4:\n\t"

// id = area->id_field; if (id >= nids) goto fail
#define CIDMALLOC_RSEQ_CS_LOAD_ID                                         \
  "ldr %w[id], [%x[id], %x[idoff]]\n\t" /* id = current cid / cpu */      \
  "cmp %w[id], %w[nids]\n\t"           /* if (id >= nids) */              \
  "b.hs %l[fail]\n\t"                  /*   goto fail */

// id = low 16 bits of area->id_field; no bound check (see
// rseq/cs_x86_64_asm.h: the wide table has a null entry for every ID no
// thread holds).
#define CIDMALLOC_RSEQ_CS_LOAD_ID_WIDE                                    \
  "ldrh %w[id], [%x[id], %x[idoff]]\n\t" /* id = (uint16) cid / cpu */

// id = low 16 bits of area->mm_cid (IdBound::kWideMmCid).
#define CIDMALLOC_RSEQ_CS_LOAD_MM_CID_WIDE                                \
  "ldrh %w[id], [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID) "]\n\t" \
                                       /* id = (uint16) area->mm_cid */

// s = table[id]; if (s == NULL) goto fail; s += offset
#define CIDMALLOC_RSEQ_CS_LOAD_STACK                                      \
  "ldr %x[s], [%x[table], %x[id], lsl #3]\n\t" /* s = table[id] */       \
  "cbz %x[s], %l[fail]\n\t"              /* if (s == NULL) goto fail */  \
  "add %x[s], %x[s], %x[offset]\n\t"     /* s = (char*)s + offset */

// Node-qualified IDs (IdKind::kNodeQualified); `check` is empty or
// CIDMALLOC_RSEQ_CS_CHECK_NODE.
//   w17 = area->node_id; if (w17 >= nnodes) goto fail; check;
//   w17 *= cid_stride; id = area->mm_cid; if (id >= cid_stride) goto fail;
//   id += w17
#define CIDMALLOC_RSEQ_CS_LOAD_QUALIFIED_ID(check)                         \
  "ldr w17, [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_NODE_ID) "]\n\t"      \
                                       /* w17 = area->node_id */          \
  "cmp w17, %w[nnodes]\n\t"            /* if (w17 >= nnodes) */           \
  "b.hs %l[fail]\n\t"                  /*   goto fail */                  \
  check                                                                    \
  "mul w17, w17, %w[stride]\n\t"       /* w17 *= cid_stride */            \
  "ldr %w[id], [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID) "]\n\t"    \
                                       /* id = area->mm_cid */            \
  "cmp %w[id], %w[stride]\n\t"         /* if (id >= cid_stride) */        \
  "b.hs %l[fail]\n\t"                  /*   goto fail */                  \
  "add %w[id], %w[id], w17\n\t"        /* id += w17 */

// if (w17 != node) goto fail   (w17 = area->node_id)
#define CIDMALLOC_RSEQ_CS_CHECK_NODE                                       \
  "cmp w17, %w[node]\n\t"              /* if (w17 != node) */             \
  "b.ne %l[fail]\n\t"                  /*   goto fail */

// The process-wide fields are register operands (see the file comment);
// the ID-field offset is thread-pointer relative, as g_process.id_offset
// is.
#define CIDMALLOC_RSEQ_FIELD(field) "r"(field)

// The test hooks of rseq/inject.h (their empty forms, for the allocator's
// builds, are in rseq/cs_asm_common.h).
#ifdef CIDMALLOC_RSEQ_INJECT
// Delay loop at point n, in x17 (free at every injection point).
//   w17 = inject_loops[n]
//   while (w17 != 0) w17--
#define CIDMALLOC_RSEQ_INJECT_ASM(n)                                  \
  "adrp x17, cidmalloc_rseq_inject_loops\n\t"                         \
  "add x17, x17, :lo12:cidmalloc_rseq_inject_loops\n\t"               \
  "ldr w17, [x17, #4*" #n "]\n\t"                                     \
  "cbz w17, 77" #n "f\n\t"                                            \
  "76" #n ":\n\t"                                                     \
  "sub w17, w17, #1\n\t"                                              \
  "cbnz w17, 76" #n "b\n\t"                                           \
  "77" #n ":\n\t"
#endif

#ifdef CIDMALLOC_RSEQ_COMPARE_TWICE
// Before a commit: the ID must still be the one the section started with.
//   x17 = thread pointer; if (area->id_field != id) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_ASM(id_operand)    \
  "mrs x17, tpidr_el0\n\t"                             \
  "ldr w17, [x17, %x[idoff]]\n\t"                      \
  "cmp w17, %w[" id_operand "]\n\t"                    \
  "b.ne %l[mismatch]\n\t"
// The wide sections' 16-bit ID:
//   x17 = thread pointer; if ((uint16) area->id_field != id) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_WIDE_ASM(id_operand) \
  "mrs x17, tpidr_el0\n\t"                               \
  "ldrh w17, [x17, %x[idoff]]\n\t"                       \
  "cmp w17, %w[" id_operand "]\n\t"                      \
  "b.ne %l[mismatch]\n\t"
// The wide mm_cid sections:
//   if ((uint16) area->mm_cid != id) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_MM_CID_ASM(id_operand)             \
  "ldrh w17, [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID) "]\n\t" \
  "cmp w17, %w[" id_operand "]\n\t"                                    \
  "b.ne %l[mismatch]\n\t"
// Node-qualified IDs, after the section's last use of the id register,
// which it overwrites:
//   id -= area->mm_cid; w17 = area->node_id * cid_stride;
//   if (id != w17) goto mismatch
#define CIDMALLOC_RSEQ_COMPARE_TWICE_QUALIFIED_ASM(id_operand)           \
  "ldr w17, [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID) "]\n\t"   \
  "sub %w[" id_operand "], %w[" id_operand "], w17\n\t"                 \
  "ldr w17, [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_NODE_ID) "]\n\t"  \
  "mul w17, w17, %w[stride]\n\t"                                        \
  "cmp %w[" id_operand "], w17\n\t"                                     \
  "b.ne %l[mismatch]\n\t"
#endif

// id <<= 6; x17 = *(base + id) + delta; commit: *(base + id) = x17
#define CIDMALLOC_RSEQ_COUNTER_ADD_ASM(load_id)                              \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  "lsl %x[id], %x[id], #" CIDMALLOC_STR(CIDMALLOC_COUNTER_STRIDE_SHIFT) "\n\t" \
                                       /* id <<= 6 */                        \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "ldr x17, [%x[base], %x[id]]\n\t"    /* x17 = *(base + id) */              \
  "add x17, x17, %x[delta]\n\t"        /* x17 += delta */                    \
  "str x17, [%x[base], %x[id]]\n"      /* commit: *(base + id) = x17 */      \
  "5:\n\t"

// w = s->top; v = w & kItemMask; if (v == NULL) fail; w = v->next;
// commit: s->top = w
#define CIDMALLOC_RSEQ_POP_ASM(load_id, compare_twice)                       \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "ldr %x[n], [%x[s]]\n\t"             /* w = s->top */                      \
  "and %x[v], %x[n], #" CIDMALLOC_STR(CIDMALLOC_STACK_ITEM_MASK) "\n\t"      \
                                       /* v = w & kItemMask: the top item */ \
  "cbz %x[v], %l[fail]\n\t"            /* if (v == NULL: empty) goto fail */ \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  "ldr %x[n], [%x[v]]\n\t"             /* w = v->next: the word below */     \
  compare_twice                                                              \
  "str %x[n], [%x[s]]\n"               /* commit: s->top = w */              \
  "5:\n\t"

// x17 = s->top; n = s->limit (capacity << 48); if (x17 >= n) fail;
// item->next = x17; n = (x17 | kItemMask) + item + 1;
// commit: s->top = n  (item | (count + 1) << 48)
#define CIDMALLOC_RSEQ_PUSH_ASM(load_id, compare_twice)                      \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "ldr x17, [%x[s]]\n\t"               /* x17 = s->top */                    \
  "ldr %x[n], [%x[s], #" CIDMALLOC_STR(CIDMALLOC_STACK_OFF_LIMIT) "]\n\t"    \
                                       /* n = capacity << 48 */              \
  "cmp x17, %x[n]\n\t"                 /* if (x17 >= capacity << 48) */      \
  "b.hs %l[fail]\n\t"                  /*   goto fail (full) */              \
  "str x17, [%x[item]]\n\t"            /* item->next = x17 (the caller's) */ \
  "orr %x[n], x17, #" CIDMALLOC_STR(CIDMALLOC_STACK_ITEM_MASK) "\n\t"        \
                                       /* n = x17 | kItemMask */             \
  "add %x[n], %x[n], %x[item]\n\t"     /* n += item */                       \
  "add %x[n], %x[n], #1\n\t"           /* n += 1: the new top word */        \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "str %x[n], [%x[s]]\n"               /* commit: s->top = n */              \
  "5:\n\t"

// end = min(end, want); if (end == 0) goto fail
#define CIDMALLOC_RSEQ_CLAMP_END_TO_WANT                                  \
  "cmp %w[end], %w[want]\n\t"          /* if (end > want) */             \
  "csel %w[end], %w[want], %w[end], hi\n\t" /* end = want */             \
  "cbz %w[end], %l[fail]\n\t"          /* if (end == 0) goto fail */

// w = s->top; end = min(w >> 48, want); if (end == 0) fail;
// do { x17 = w & mask; *o++ = x17; w = x17->next; } while (--end);
// commit: s->top = w
#define CIDMALLOC_RSEQ_POP_BATCH_ASM(load_id, compare_twice)                 \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "ldr %x[n], [%x[s]]\n\t"             /* w = s->top */                      \
  "lsr %x[end], %x[n], #" CIDMALLOC_STR(CIDMALLOC_STACK_COUNT_SHIFT) "\n\t"  \
                                       /* end = w >> 48: the count */        \
  "cbz %x[end], %l[fail]\n\t"          /* if (end == 0) goto fail */         \
  CIDMALLOC_RSEQ_CLAMP_END_TO_WANT                                           \
  "mov %x[m], #" CIDMALLOC_STR(CIDMALLOC_STACK_ITEM_MASK) "\n\t"             \
                                       /* m = kItemMask */                   \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  "9:\n\t"                             /* do { */                            \
  "and x17, %x[n], %x[m]\n\t"          /*   x17 = w & m: the item */         \
  "str x17, [%x[o]], #8\n\t"           /*   *o++ = x17 (caller-private) */   \
  "ldr %x[n], [x17]\n\t"               /*   w = x17->next */                 \
  "subs %w[end], %w[end], #1\n\t"      /* } while (--end != 0) */            \
  "b.ne 9b\n\t"                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "str %x[n], [%x[s]]\n"               /* commit: s->top = w */              \
  "5:\n\t"

// w = s->top; n = w >> 48; end = min(s->capacity - n, want); if (end <= 0)
// fail; do { x17 = *i++; x17->next = w; w = x17 | ++n << 48; } while
// (--end); commit: s->top = w
#define CIDMALLOC_RSEQ_PUSH_BATCH_ASM(load_id, compare_twice)                \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "ldr %x[w], [%x[s]]\n\t"             /* w = s->top */                      \
  "lsr %x[n], %x[w], #" CIDMALLOC_STR(CIDMALLOC_STACK_COUNT_SHIFT) "\n\t"    \
                                       /* n = w >> 48: the count */          \
  "ldrh %w[end], [%x[s], #"                                                  \
  CIDMALLOC_STR(CIDMALLOC_STACK_OFF_CAPACITY) "]\n\t"                        \
                                       /* end = s->capacity */               \
  "subs %w[end], %w[end], %w[n]\n\t"   /* end -= n (room) */                 \
  "b.ls %l[fail]\n\t"                  /* if (room <= 0) goto fail */        \
  CIDMALLOC_RSEQ_CLAMP_END_TO_WANT                                           \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  "9:\n\t"                             /* do { */                            \
  "ldr x17, [%x[i]], #8\n\t"           /*   x17 = *i++ */                    \
  "str %x[w], [x17]\n\t"               /*   x17->next = w (caller's item) */ \
  "add %x[n], %x[n], #1\n\t"           /*   n += 1 */                        \
  "orr %x[w], x17, %x[n], lsl #" CIDMALLOC_STR(CIDMALLOC_STACK_COUNT_SHIFT)  \
  "\n\t"                               /*   w = x17 | n << 48 */             \
  "subs %w[end], %w[end], #1\n\t"      /* } while (--end != 0) */            \
  "b.ne 9b\n\t"                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "str %x[w], [%x[s]]\n"               /* commit: s->top = w */              \
  "5:\n\t"

// c = s->capacity + delta; c = min(max(c, 0), limit);
// commit: s->capacity = c
#define CIDMALLOC_RSEQ_ADJUST_CAPACITY_ASM(load_id, compare_twice)           \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "ldrh %w[c], [%x[s], #" CIDMALLOC_STR(CIDMALLOC_STACK_OFF_CAPACITY) "]\n\t" \
                                       /* c = s->capacity */                 \
  "adds %w[c], %w[c], %w[delta]\n\t"   /* c += delta */                      \
  "csel %w[c], wzr, %w[c], mi\n\t"     /* if (c < 0) c = 0 */                \
  "cmp %w[c], %w[limit]\n\t"           /* if (c > limit) */                  \
  "csel %w[c], %w[limit], %w[c], hi\n\t" /*   c = limit */                   \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "strh %w[c], [%x[s], #" CIDMALLOC_STR(CIDMALLOC_STACK_OFF_CAPACITY) "]\n"  \
                                       /* commit: s->capacity = c */         \
  "5:\n\t"


// Clobbers: the two scratch registers in every section, Pop's included.
#define CIDMALLOC_RSEQ_POP_V(v) "=&r"(v)
#define CIDMALLOC_RSEQ_CLOBBERS "x16", "x17", "memory", "cc"
#define CIDMALLOC_RSEQ_POP_CLOBBERS CIDMALLOC_RSEQ_CLOBBERS

// The cpu/node read (CpuNode), as on x86-64: both fields in one section.
// Operands: [area] (register) the area's offset; [c], [nd].
//   x16 = &area; area->rseq_cs = &descriptor; c = area->cpu_id;
//   nd = area->node_id
#define CIDMALLOC_RSEQ_CPU_NODE_ASM                                        \
  CIDMALLOC_RSEQ_CS_DEFINE                                                 \
  "mrs x16, tpidr_el0\n\t"             /* x16 = thread pointer */          \
  "add x16, x16, %x[area]\n\t"         /* x16 = &area */                   \
  "adrp x17, 3b\n\t"                   /* x17 = page of descriptor */      \
  "add x17, x17, :lo12:3b\n\t"         /* x17 = &descriptor */             \
  "str x17, [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_RSEQ_CS) "]\n"      \
                                       /* area->rseq_cs = x17 */           \
  "4:\n\t"                                                                 \
  "ldr %w[c], [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_CPU_ID) "]\n\t"   \
                                       /* c = area->cpu_id */              \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                             \
  "ldr %w[nd], [x16, #" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_NODE_ID) "]\n"   \
                                       /* nd = area->node_id */            \
  "5:\n\t"

#endif  // CIDMALLOC_RSEQ_CS_AARCH64_ASM_H_
