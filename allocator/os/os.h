// allocator/os/os.h: memory from the kernel, as raw system calls.
//
// Layer 2 (with topology.h and config.h).  Every function preserves errno on
// success and leaves ENOMEM (or the kernel's errno) on failure; none
// allocates.
#ifndef CIDMALLOC_ALLOCATOR_OS_OS_H_
#define CIDMALLOC_ALLOCATOR_OS_OS_H_

#include <stddef.h>
#include <stdint.h>

#include "allocator/os/config.h"

namespace cidmalloc::os {

// Maps `size` bytes (a multiple of the page size) of fresh, zeroed,
// read-write memory aligned to `align` (a power of two >= 4096).  Returns
// nullptr with errno ENOMEM when the kernel refuses.
void* MapAligned(size_t size, size_t align);
void Unmap(void* p, size_t size);

// The bytes MapAligned has mapped since the process started, unmapped or
// not: how large the heap has been (the background thread starts early
// once it passes the release threshold, api/background.h).  Relaxed.
uint64_t BytesMappedEver();

// mremap(2) of the mapping [p, p+old_size) to new_size bytes.  kInPlace
// only resizes where it is (fails unless the pages after it are free);
// kMoveTo moves it onto `dest` (a reservation of new_size bytes, which it
// replaces).  Returns the new address, or nullptr with the kernel's errno.
enum class RemapKind : uint8_t { kInPlace, kMoveTo };
void* Remap(void* p, size_t old_size, size_t new_size, RemapKind kind,
            void* dest);

// Returns [p, p+size) to the OS with the configured madvise advice.  The
// range stays mapped; it reads as zero (MADV_DONTNEED) or as zero or old
// contents (MADV_FREE) afterwards.
bool ReleasePages(void* p, size_t size, ReleaseMethod method);

// The kernel's page size (AT_PAGESZ; 4096 if the auxiliary vector has
// none): the unit ReleasePages can return.  Read once, relaxed.
size_t KernelPageSize();

// Asks for transparent huge pages on [p, p+size) (MADV_HUGEPAGE), which
// must be 2 MiB-aligned.  Returns false where the kernel refuses (no THP,
// or THP disabled); the range then keeps 4 KiB pages.
bool AdviseHugePages(void* p, size_t size);
// MADV_NOHUGEPAGE on [p, p+size), 2 MiB-aligned: 4 KiB pages only, even
// under THP "always".  Returns false where the kernel refuses.
bool AdviseNoHugePages(void* p, size_t size);

// Binds [p, p+size) to `node` with the given policy (mbind(2)).  Returns
// false (and leaves the range unbound) if the kernel refuses, e.g. for a
// node that does not exist.
bool BindToNode(void* p, size_t size, int node, NumaPolicy policy);

// The node that backs the page at `p`, or -1 if unknown or not resident
// (get_mempolicy MPOL_F_NODE|MPOL_F_ADDR).  For tests and statistics.
int NodeOfAddress(const void* p);

// Milliseconds of CLOCK_MONOTONIC_COARSE (the vDSO's clock: no system call,
// a resolution of one tick, a few ms), for the page heap's release delay.
// 0 if the clock cannot be read.
uint64_t MonotonicMs();

// The time-stamp counter (rdtsc): a clock for rate hints on slow paths,
// with no system call and no vDSO.  It counts at the TSC's rate, which is
// not known here (1-4 GHz on x86-64 machines), so callers only compare
// differences with windows that may be off by that factor.  Elsewhere,
// nanoseconds of CLOCK_MONOTONIC (the vDSO's): a 1 GHz "cycle", within
// that factor of the TSC's.
#if defined(__x86_64__) || defined(__i386__)
inline uint64_t CycleCount() { return __builtin_ia32_rdtsc(); }
#else
uint64_t CycleCount();
#endif

// A random word, secret to the process, for the layers' free marks
// (`which` 0 or 1: two independent ones): from the kernel's 16 random
// bytes (AT_RANDOM) mixed with the address-space layout.  Never 0.
uintptr_t RandomSecret(int which);

}  // namespace cidmalloc::os

#endif  // CIDMALLOC_ALLOCATOR_OS_OS_H_
