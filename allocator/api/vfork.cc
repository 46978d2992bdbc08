// allocator/api/vfork.cc: vfork(), overridden so that a child that
// allocates before it execs cannot corrupt its parent's heap.
//
// A vfork child runs on its parent thread's stack and TLS, rseq area
// included, with no rseq registration of its own: its critical sections
// would run on the parent's cid or cpu unprotected (rseq/vfork.cc tells
// the story, and how the area is lent to the child and taken back).  glibc
// 2.36's posix_spawn, system and popen clone their children internally and
// allocate nothing in them, so only vfork() itself is replaced.
//
// vfork() must be written in assembly: the child returns from it first and
// reuses the stack below the caller's frame, so nothing this function
// needs after the system call may live there.  Like glibc's, it keeps its
// return address in a register that the system call preserves in both
// tasks (x86-64: %rdi, which SYS_vfork does not read; AArch64: x30), and
// calls C only before the system call, and after it on the stack of
// whichever task runs.
//
// The hooks: cidmalloc_vfork_prepare() initialises the allocator (never
// in the child) and calls rseq::VforkPrepare(); cidmalloc_vfork_finish(r)
// takes the system call's raw result, calls rseq::VforkChild() or
// rseq::VforkParent() and returns vfork's result (-1 with errno on
// failure).
//
// Not handled: a program that calls clone(CLONE_VM) itself without
// CLONE_THREAD and allocates in the child; user shadow stacks (glibc 2.36
// does not enable them, and this library is not marked for them).
#include <errno.h>

#include "allocator/api/stats_internal.h"
#include "rseq/rseq.h"

extern "C" {

__attribute__((visibility("hidden"))) void cidmalloc_vfork_prepare() noexcept {
  cidmalloc::api::Config();  // Initialises the allocator if need be.
  cidmalloc::rseq::VforkPrepare();
}

__attribute__((visibility("hidden"))) long cidmalloc_vfork_finish(
    long r) noexcept {
  if (r == 0) {
    cidmalloc::rseq::VforkChild();
    return 0;
  }
  cidmalloc::rseq::VforkParent();
  if (r < 0 && r > -4096) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

}  // extern "C"

// vfork is global and strong; __vfork, glibc's other name for it, weak: a
// static link that also pulls glibc's vfork.o (whose __vfork is strong)
// then keeps glibc's __vfork without a duplicate definition.
#if defined(__x86_64__)
asm(R"(
  .text
  .globl vfork
  .weak __vfork
  .type vfork, @function
  .type __vfork, @function
  .p2align 4
vfork:
__vfork:
  .cfi_startproc
)"
#if defined(__CET__)
    "  endbr64\n"
#endif
    R"(
  subq $8, %rsp                   # align the stack for the call
  .cfi_adjust_cfa_offset 8
  call cidmalloc_vfork_prepare    # init; signals blocked; area given up
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rdi                       # rdi = return address (survives syscall)
  .cfi_adjust_cfa_offset -8
  .cfi_register %rip, %rdi
  movl $58, %eax                  # rax = SYS_vfork
  syscall                         # rax = child pid, 0 in the child, -errno
  pushq %rdi                      # return address back on the stack
  .cfi_adjust_cfa_offset 8
  .cfi_rel_offset %rip, 0
  pushq %rax                      # align the stack for the call
  .cfi_adjust_cfa_offset 8
  movq %rax, %rdi                 # arg = raw result
  call cidmalloc_vfork_finish     # area taken (child) or back (parent)
  addq $8, %rsp                   # rax = vfork's result
  .cfi_adjust_cfa_offset -8
  ret
  .cfi_endproc
  .size vfork, .-vfork
  .size __vfork, .-__vfork
)");
#elif defined(__aarch64__)
asm(R"(
  .text
  .globl vfork
  .weak __vfork
  .type vfork, %function
  .type __vfork, %function
  .p2align 4
vfork:
__vfork:
  .cfi_startproc
  hint #34                        // bti c (a no-op without BTI)
  stp x29, x30, [sp, #-16]!       // save fp, lr
  .cfi_def_cfa_offset 16
  .cfi_offset 29, -16
  .cfi_offset 30, -8
  mov x29, sp
  bl cidmalloc_vfork_prepare      // init; signals blocked; area given up
  ldp x29, x30, [sp], #16         // x30 = return address (survives svc)
  .cfi_restore 29
  .cfi_restore 30
  .cfi_def_cfa_offset 0
  mov x0, #0x4111                 // CLONE_VM | CLONE_VFORK | SIGCHLD
  mov x1, #0                      // the same stack
  mov x2, #0                      // no parent tid
  mov x3, #0                      // no tls
  mov x4, #0                      // no child tid
  mov x8, #220                    // SYS_clone
  svc #0                          // x0 = child pid, 0 in the child, -errno
  stp x29, x30, [sp, #-16]!       // save fp, lr
  .cfi_def_cfa_offset 16
  .cfi_offset 29, -16
  .cfi_offset 30, -8
  mov x29, sp
  bl cidmalloc_vfork_finish       // area taken (child) or back (parent)
  ldp x29, x30, [sp], #16         // x0 = vfork's result
  .cfi_restore 29
  .cfi_restore 30
  .cfi_def_cfa_offset 0
  ret
  .cfi_endproc
  .size vfork, .-vfork
  .size __vfork, .-__vfork
)");
#endif
