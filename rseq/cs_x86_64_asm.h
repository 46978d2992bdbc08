// rseq/cs_x86_64_asm.h: the text of the restartable critical sections,
// x86-64: the macros that emit each section's descriptor, arming, ID load
// and body, with a pseudo-code comment on every instruction.  The C++
// operations that instantiate them, one `asm volatile goto` each, are in
// rseq/cs_ops.h (shared with rseq/cs_aarch64_asm.h).
//
// Each operation is one `asm goto`.  Its layout:
//
//   __rseq_cs:            3: { version 0, flags 0, start_ip 4f,
//                              post_commit_offset 5f - 4f, abort_ip 6f }
//   __rseq_cs_ptr_array:  .quad 3b
//   __rseq_failure:       ud1 RSEQ_SIG(%rip), %edi  (the 4 signature bytes
//                         sit right before the abort IP)
//                      6: jmp abort               (restart from C++)
//   .text:                rseq_cs = &3b           (arm the descriptor)
//                      4: ... loads, checks ...    (start_ip)
//                         single commit store
//                      5:                          (post_commit_ip)
//
// Invariants (//tests/rseq_cs:section_test checks that each section starts
// by reading the rseq area and ends with its commit; fast_path_budget_test
// counts the stores inside the probes' sections):
//   - The only store to shared data in [4, 5) is the last instruction.
//     Earlier stores go to memory private to the caller: batch `out`, and
//     the first word (the link) of an item being pushed, which is the
//     caller's until the commit puts it on the stack.
//   - The ID is read inside the section, after the descriptor is armed, so
//     a preemption, migration or signal between reading it and the commit
//     restarts the section.
//   - Every failure branch leaves without storing to shared data.
//   - Kernel-owned fields are only loaded.
//
// Operands shared by every section:
//   area    (memory) %fs offset of the rseq area (rseq_cs at area + 8)
//   idoff   (memory) %fs offset of the ID field (mm_cid or cpu_id)
//   nids    number of rseq IDs; an ID at or above it (including the
//           ~0 of a not-yet-registered own area) fails the section.
//           The wide sections (IdBound::kWideTable) have no such check:
//           they index a table of kWideTableIds entries with the ID's low
//           16 bits, and an ID that no thread can hold finds a null entry.
//   stride, nnodes  node-qualified IDs: the cid and node bounds
// Every section is `asm volatile goto`: GCC 12 deletes an `asm goto` that
// has outputs when the outputs are unused (seen with the counter add),
// despite the documented implicit volatile.
//
// Only included by rseq/cs_ops.h.
#ifndef CIDMALLOC_RSEQ_CS_X86_64_ASM_H_
#define CIDMALLOC_RSEQ_CS_X86_64_ASM_H_

#include "rseq/abi.h"
#include "rseq/cs_asm_common.h"
#include "rseq/inject.h"
#include "rseq/state.h"

// Emits the descriptor (label 3) and its pointer (rseq/cs_asm_common.h),
// and the signed abort stub (label 6) that jumps to the C++ label
// `abort`, in the same section group.
#define CIDMALLOC_RSEQ_CS_DEFINE                                          \
  CIDMALLOC_RSEQ_CS_DESCRIPTOR                                           \
  ".pushsection __rseq_failure, \"ax?\"\n\t"                              \
  ".byte 0x0f, 0xb9, 0x3d\n\t"       /* ud1 <sig>(%rip), %edi */         \
  ".long " CIDMALLOC_STR(CIDMALLOC_RSEQ_SIG) "\n"                        \
  "6:\n\t"                                                               \
  "jmp %l[abort]\n\t"                /* restart the operation */         \
  ".popsection\n\t"

// id = area offset; rax = &descriptor; area->rseq_cs = rax; start_ip.
// The area and ID-field offsets are memory operands loaded into the id
// register, which is free until the section reads the ID: the caller keeps
// two registers fewer live.  The arming store is the last instruction
// before start_ip.
#define CIDMALLOC_RSEQ_CS_ARM                                             \
  "movq %[area], %q[id]\n\t"           /* id = area offset */             \
  "leaq 3b(%%rip), %%rax\n\t"          /* rax = &descriptor */            \
  "movq %%rax, %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_RSEQ_CS)          \
  "(%q[id])\n"                          /* area->rseq_cs = rax */          \
  "4:\n\t"

// id = area->id_field; if (id >= nids) goto fail
#define CIDMALLOC_RSEQ_CS_LOAD_ID                                         \
  "movq %[idoff], %q[id]\n\t"          /* id = ID field offset */         \
  "movl %%fs:(%q[id]), %k[id]\n\t"     /* id = current cid / cpu */       \
  "cmpl %[nids], %k[id]\n\t"           /* if (id >= nids) */              \
  "jae %l[fail]\n\t"                   /*   goto fail */

// id = low 16 bits of area->id_field.  No bound check: the table has an
// entry for every 16-bit value (kWideTableIds), null beyond the IDs in use,
// so an unregistered own area (mm_cid ~0 -> 0xffff, cpu_id -1 -> 0xffff)
// fails at the null test below.  One load and one branch fewer than
// CIDMALLOC_RSEQ_CS_LOAD_ID.
#define CIDMALLOC_RSEQ_CS_LOAD_ID_WIDE                                    \
  "movq %[idoff], %q[id]\n\t"          /* id = ID field offset */         \
  "movzwl %%fs:(%q[id]), %k[id]\n\t"   /* id = (uint16) cid / cpu */

// id = low 16 bits of area->mm_cid, read through the area offset that the
// arming code left in the id register: CIDMALLOC_RSEQ_CS_LOAD_ID_WIDE without
// its load of the ID-field offset.  Cid mode only (IdBound::kWideMmCid).
#define CIDMALLOC_RSEQ_CS_LOAD_MM_CID_WIDE                                \
  "movzwl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID)                  \
  "(%q[id]), %k[id]\n\t"               /* id = (uint16) area->mm_cid */

// s = table[id]; if (s == NULL) goto fail; s += offset
#define CIDMALLOC_RSEQ_CS_LOAD_STACK                                      \
  "movq (%[table], %q[id], 8), %[s]\n\t" /* s = table[id] */             \
  "testq %[s], %[s]\n\t"                 /* if (s == NULL) */            \
  "jz %l[fail]\n\t"                      /*   goto fail */               \
  "addq %[offset], %[s]\n\t"             /* s = (char*)s + offset */

// Node-qualified IDs (IdKind::kNodeQualified).  The id register holds the
// area offset from the arming code.  `check` is empty, or
// CIDMALLOC_RSEQ_CS_CHECK_NODE for a push that insists on a node.
//   eax = area->node_id; if (eax >= nnodes) goto fail; check;
//   eax *= cid_stride; id = area->mm_cid; if (id >= cid_stride) goto fail;
//   id += eax
#define CIDMALLOC_RSEQ_CS_LOAD_QUALIFIED_ID(check)                         \
  "movl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_NODE_ID)                   \
  "(%q[id]), %%eax\n\t"                /* eax = area->node_id */          \
  "cmpl %[nnodes], %%eax\n\t"          /* if (eax >= nnodes) */           \
  "jae %l[fail]\n\t"                   /*   goto fail */                  \
  check                                                                    \
  "imull %[stride], %%eax\n\t"         /* eax *= cid_stride */            \
  "movl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_MM_CID)                    \
  "(%q[id]), %k[id]\n\t"               /* id = area->mm_cid */            \
  "cmpl %[stride], %k[id]\n\t"         /* if (id >= cid_stride) */        \
  "jae %l[fail]\n\t"                   /*   goto fail */                  \
  "addl %%eax, %k[id]\n\t"             /* id += eax */

// if (eax != node) goto fail   (eax = area->node_id)
#define CIDMALLOC_RSEQ_CS_CHECK_NODE                                       \
  "cmpl %[node], %%eax\n\t"            /* if (eax != node) */             \
  "jne %l[fail]\n\t"                   /*   goto fail */

// The process-wide fields are memory operands (rseq/cs_asm_common.h's
// operand lists): a section that does not use one costs nothing.
#define CIDMALLOC_RSEQ_FIELD(field) "m"(field)

// The test hooks of rseq/inject.h: delay loops at the injection points
// (CIDMALLOC_RSEQ_INJECT) and the ID read again before each commit
// (CIDMALLOC_RSEQ_COMPARE_TWICE); their empty forms, for the allocator's
// builds, are in rseq/cs_asm_common.h.
#ifdef CIDMALLOC_RSEQ_INJECT
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
#endif

// Each operation's code is a macro of its ID load and its compare-twice
// check, instantiated once per IdKind: the raw and the node-qualified
// versions are separate critical sections with separate descriptors.
//
// id <<= 6; commit: *(base + id) += delta
#define CIDMALLOC_RSEQ_COUNTER_ADD_ASM(load_id)                              \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  "shlq $" CIDMALLOC_STR(CIDMALLOC_COUNTER_STRIDE_SHIFT) ", %[id]\n\t"       \
                                       /* id <<= 6 */                        \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "addq %[delta], (%[base], %[id])\n"  /* commit: *(base + id) += delta */   \
  "5:\n\t"

// w = s->top; v = w & kItemMask; if (v == NULL) fail; w = v->next;
// commit: s->top = w
#define CIDMALLOC_RSEQ_POP_ASM(load_id, compare_twice)                       \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "movq (%[s]), %[n]\n\t"              /* w = s->top */                      \
  "movabsq $" CIDMALLOC_STR(CIDMALLOC_STACK_ITEM_MASK) ", %[v]\n\t"          \
                                       /* v = kItemMask */                   \
  "andq %[n], %[v]\n\t"                /* v &= w: the top item */            \
  "jz %l[fail]\n\t"                    /* if (v == NULL: empty) goto fail */ \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  "movq (%[v]), %[n]\n\t"              /* w = v->next: the word below */     \
  compare_twice                                                              \
  "movq %[n], (%[s])\n"                /* commit: s->top = w */              \
  "5:\n\t"

// w = s->top; n = w >> 48; if (n >= s->capacity) fail; item->next = w;
// commit: s->top = item | (n + 1) << 48
#define CIDMALLOC_RSEQ_PUSH_ASM(load_id, compare_twice)                      \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "movq (%[s]), %%rax\n\t"             /* rax = s->top */                    \
  "cmpq " CIDMALLOC_STR(CIDMALLOC_STACK_OFF_LIMIT) "(%[s]), %%rax\n\t"        \
                                       /* if (rax >= capacity << 48) */      \
  "jae %l[fail]\n\t"                   /*   goto fail (full) */              \
  "movq %%rax, (%[item])\n\t"          /* item->next = rax (the caller's) */ \
  "movabsq $" CIDMALLOC_STR(CIDMALLOC_STACK_ITEM_MASK) ", %[n]\n\t"          \
                                       /* n = kItemMask */                   \
  "orq %%rax, %[n]\n\t"                /* n |= rax: count << 48 | mask */    \
  "leaq 1(%[n], %[item]), %[n]\n\t"    /* n += 1 + item: the new top word */ \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "movq %[n], (%[s])\n"                /* commit: s->top = n */              \
  "5:\n\t"

// end = min(end, want); if (end == 0) goto fail   (the batch sections: at
// most `want` objects, and none is a failure)
#define CIDMALLOC_RSEQ_CLAMP_END_TO_WANT                                  \
  "cmpl %[want], %k[end]\n\t"          /* if (end > want) */             \
  "cmoval %[want], %k[end]\n\t"        /*   end = want */                \
  "testl %k[end], %k[end]\n\t"         /* if (end == 0: want == 0) */    \
  "jz %l[fail]\n\t"                    /*   goto fail */

// w = s->top; end = min(w >> 48, want); if (end == 0) fail;
// do { rax = w & mask; *o++ = rax; w = rax->next; } while (--end);
// commit: s->top = w
#define CIDMALLOC_RSEQ_POP_BATCH_ASM(load_id, compare_twice)                 \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "movq (%[s]), %[n]\n\t"              /* w = s->top */                      \
  "movq %[n], %[end]\n\t"              /* end = w */                         \
  "shrq $" CIDMALLOC_STR(CIDMALLOC_STACK_COUNT_SHIFT) ", %[end]\n\t"           \
                                       /* end >>= 48: the count */           \
  "jz %l[fail]\n\t"                    /* if (end == 0) goto fail */         \
  CIDMALLOC_RSEQ_CLAMP_END_TO_WANT                                           \
  "movabsq $" CIDMALLOC_STR(CIDMALLOC_STACK_ITEM_MASK) ", %[m]\n\t"          \
                                       /* m = kItemMask */                   \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  "9:\n\t"                             /* do { */                            \
  "movq %[n], %%rax\n\t"               /*   rax = w */                       \
  "andq %[m], %%rax\n\t"               /*   rax &= m: the item */            \
  "movq %%rax, (%[o])\n\t"             /*   *o = rax (caller-private) */     \
  "addq $8, %[o]\n\t"                  /*   o += 1 */                        \
  "movq (%%rax), %[n]\n\t"             /*   w = rax->next */                 \
  "subl $1, %k[end]\n\t"               /* } while (--end != 0) */            \
  "jnz 9b\n\t"                                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "movq %[n], (%[s])\n"                /* commit: s->top = w */              \
  "5:\n\t"

// w = s->top; n = w >> 48; end = min(s->capacity - n, want); if (end <= 0)
// fail; do { rax = *i++; rax->next = w; w = rax | ++n << 48; } while (--end);
// commit: s->top = w
#define CIDMALLOC_RSEQ_PUSH_BATCH_ASM(load_id, compare_twice)                \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "movq (%[s]), %[w]\n\t"              /* w = s->top */                      \
  "movq %[w], %[n]\n\t"                /* n = w */                           \
  "shrq $" CIDMALLOC_STR(CIDMALLOC_STACK_COUNT_SHIFT) ", %[n]\n\t"             \
                                       /* n >>= 48: the count */             \
  "movzwl " CIDMALLOC_STR(CIDMALLOC_STACK_OFF_CAPACITY) "(%[s]), %k[end]\n\t"  \
                                       /* end = s->capacity */               \
  "subl %k[n], %k[end]\n\t"            /* end -= n (room) */                 \
  "jbe %l[fail]\n\t"                   /* if (room <= 0) goto fail */        \
  CIDMALLOC_RSEQ_CLAMP_END_TO_WANT                                           \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  "9:\n\t"                             /* do { */                            \
  "movq (%[i]), %%rax\n\t"             /*   rax = *i */                      \
  "movq %[w], (%%rax)\n\t"             /*   rax->next = w (caller's item) */ \
  "addq $8, %[i]\n\t"                  /*   i += 1 */                        \
  "addq $1, %[n]\n\t"                  /*   n += 1 */                        \
  "movq %[n], %[w]\n\t"                /*   w = n */                         \
  "shlq $" CIDMALLOC_STR(CIDMALLOC_STACK_COUNT_SHIFT) ", %[w]\n\t"             \
                                       /*   w <<= 48 */                      \
  "orq %%rax, %[w]\n\t"                /*   w |= rax */                      \
  "subl $1, %k[end]\n\t"               /* } while (--end != 0) */            \
  "jnz 9b\n\t"                                                               \
  CIDMALLOC_RSEQ_INJECT_ASM(2)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "movq %[w], (%[s])\n"                /* commit: s->top = w */              \
  "5:\n\t"

// c = s->capacity + delta; c = min(max(c, 0), limit);
// commit: s->capacity = c
#define CIDMALLOC_RSEQ_ADJUST_CAPACITY_ASM(load_id, compare_twice)           \
  CIDMALLOC_RSEQ_CS_DEFINE CIDMALLOC_RSEQ_CS_ARM load_id                     \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                               \
  CIDMALLOC_RSEQ_CS_LOAD_STACK                                               \
  "movzwl " CIDMALLOC_STR(CIDMALLOC_STACK_OFF_CAPACITY) "(%[s]), %k[c]\n\t"    \
                                       /* c = s->capacity */                 \
  "addl %[delta], %k[c]\n\t"           /* c += delta */                      \
  "jns 8f\n\t"                         /* if (c < 0) */                      \
  "xorl %k[c], %k[c]\n"                /*   c = 0 */                         \
  "8:\n\t"                                                                   \
  "cmpl %[limit], %k[c]\n\t"           /* if (c > limit) */                  \
  "cmoval %[limit], %k[c]\n\t"         /*   c = limit */                     \
  CIDMALLOC_RSEQ_INJECT_ASM(1)                                               \
  compare_twice                                                              \
  CIDMALLOC_RSEQ_INJECT_ASM(3)                                               \
  "movw %w[c], " CIDMALLOC_STR(CIDMALLOC_STACK_OFF_CAPACITY) "(%[s])\n"         \
                                       /* commit: s->capacity = c */         \
  "5:\n\t"


// Pop's item: %rax, the scratch register that arms the descriptor, so that
// the caller keeps one register fewer live; but where the compare-twice
// check or the test delays use %rax after the item is loaded, any other.
#if defined(CIDMALLOC_RSEQ_COMPARE_TWICE) || defined(CIDMALLOC_RSEQ_INJECT)
#define CIDMALLOC_RSEQ_POP_V(v) "=&r"(v)
#define CIDMALLOC_RSEQ_POP_CLOBBERS "rax", "memory", "cc"
#else
#define CIDMALLOC_RSEQ_POP_V(v) "=&a"(v)
#define CIDMALLOC_RSEQ_POP_CLOBBERS "memory", "cc"
#endif

// Every other section's clobbers: %rax, the scratch register of the
// arming code, the test delays and the compare-twice check.
#define CIDMALLOC_RSEQ_CLOBBERS "rax", "memory", "cc"

// The cpu/node read (CpuNode): both fields in one section, so the pair is
// consistent even across a migration.  No commit: the last load ends the
// section.  Operands: [area] (register) the area's %fs offset; [c], [nd].
//   rax = &descriptor; area->rseq_cs = rax; c = area->cpu_id;
//   nd = area->node_id
#define CIDMALLOC_RSEQ_CPU_NODE_ASM                                        \
  CIDMALLOC_RSEQ_CS_DEFINE                                                 \
  "leaq 3b(%%rip), %%rax\n\t"         /* rax = &descriptor */              \
  "movq %%rax, %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_RSEQ_CS)           \
  "(%[area])\n"                       /* area->rseq_cs = rax */            \
  "4:\n\t"                                                                 \
  "movl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_CPU_ID)                   \
  "(%[area]), %[c]\n\t"               /* c = area->cpu_id */               \
  CIDMALLOC_RSEQ_INJECT_ASM(0)                                             \
  "movl %%fs:" CIDMALLOC_STR(CIDMALLOC_RSEQ_OFF_NODE_ID)                  \
  "(%[area]), %[nd]\n"                 /* nd = area->node_id */             \
  "5:\n\t"

#endif  // CIDMALLOC_RSEQ_CS_X86_64_ASM_H_
