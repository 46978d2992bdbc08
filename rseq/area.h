// rseq/area.h: loads from the calling thread's rseq area.
//
// The area sits at a constant offset from the thread pointer (%fs on
// x86-64, tpidr_el0 on AArch64), whoever registered it.  These are plain
// loads: the kernel updates the fields on return to user space, so a value
// may be stale by the time it is used, except inside a critical section.
// Nothing here ever stores to a kernel-owned field.
#ifndef CIDMALLOC_RSEQ_AREA_H_
#define CIDMALLOC_RSEQ_AREA_H_

#include <stdint.h>

#include "rseq/state.h"

namespace cidmalloc::rseq {

#if CIDMALLOC_RSEQ_X86_64
// Loads the 32-bit field at `offset` from the thread pointer.  `volatile`
// because the kernel changes it behind the compiler's back.
inline int32_t LoadTp32(intptr_t offset) {
  int32_t v;
  asm volatile("movl %%fs:(%1), %0" : "=r"(v) : "r"(offset));
  return v;
}
inline char* ThreadPointer() {
  char* tp;
  asm("movq %%fs:0, %0" : "=r"(tp));
  return tp;
}
#elif CIDMALLOC_RSEQ_AARCH64
inline char* ThreadPointer() {
  return static_cast<char*>(__builtin_thread_pointer());
}
// As on x86-64: a volatile load, the kernel's field.
inline int32_t LoadTp32(intptr_t offset) {
  return *reinterpret_cast<const volatile int32_t*>(ThreadPointer() + offset);
}
#endif

// cpu_id of the calling thread's area; negative if the area is not
// registered (or there is no area).
inline int32_t AreaCpuId() {
#if CIDMALLOC_RSEQ_SECTIONS
  if (g_process.registration == Registration::kNone) return -1;
  return LoadTp32(g_process.area_offset + CIDMALLOC_RSEQ_OFF_CPU_ID);
#else
  return -1;
#endif
}

// The 32-bit value at %fs:offset, or -1 when there is no rseq area.
inline int32_t LoadTp32OrNegative(intptr_t offset) {
#if CIDMALLOC_RSEQ_SECTIONS
  if (g_process.registration == Registration::kNone) return -1;
  return LoadTp32(offset);
#else
  (void)offset;
  return -1;
#endif
}

inline int32_t AreaField(int field_offset) {
#if CIDMALLOC_RSEQ_SECTIONS
  return LoadTp32(g_process.area_offset + field_offset);
#else
  (void)field_offset;
  return -1;
#endif
}

}  // namespace cidmalloc::rseq

#endif  // CIDMALLOC_RSEQ_AREA_H_
