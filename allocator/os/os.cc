#include "allocator/os/os.h"

#include <errno.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "allocator/os/topology.h"

namespace cidmalloc::os {

namespace {
// From <linux/mempolicy.h>; spelled out to avoid depending on libnuma.
constexpr int kMpolPreferred = 1;
constexpr int kMpolBind = 2;
constexpr unsigned kMpolFNode = 1;
constexpr unsigned kMpolFAddr = 2;
constexpr int kMaxNodeBits = 1024;

// BytesMappedEver.  Relaxed: a statistic that only grows; its readers
// decide nothing that needs it exact.
std::atomic<uint64_t> g_bytes_mapped_ever{0};

void* RawMmap(size_t size) {
  const long r = syscall(SYS_mmap, nullptr, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  // The raw system call returns -errno in [-4095, -1] (glibc's wrapper sets
  // errno and returns -1; syscall() does the same).
  if (r == -1) return nullptr;
  return reinterpret_cast<void*>(r);
}
}  // namespace

void* MapAligned(size_t size, size_t align) {
  const int saved = errno;
  if (size == 0 || size + align < size) {
    errno = ENOMEM;
    return nullptr;
  }
  // Over-map by `align`, then trim both ends so the result is aligned.
  char* raw = static_cast<char*>(RawMmap(size + align));
  if (raw == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + align - 1) & ~(uintptr_t{align} - 1);
  const size_t head = aligned - start;
  const size_t tail = align - head;
  if (head != 0) syscall(SYS_munmap, raw, head);
  if (tail != 0) syscall(SYS_munmap, reinterpret_cast<char*>(aligned) + size,
                         tail);
  g_bytes_mapped_ever.fetch_add(size, std::memory_order_relaxed);
  errno = saved;
  return reinterpret_cast<void*>(aligned);
}

uint64_t BytesMappedEver() {
  return g_bytes_mapped_ever.load(std::memory_order_relaxed);
}

void* Remap(void* p, size_t old_size, size_t new_size, RemapKind kind,
            void* dest) {
  const int saved = errno;
  const long r =
      kind == RemapKind::kInPlace
          ? syscall(SYS_mremap, p, old_size, new_size, 0)
          : syscall(SYS_mremap, p, old_size, new_size,
                    MREMAP_MAYMOVE | MREMAP_FIXED, dest);
  if (r == -1) return nullptr;
  errno = saved;
  return reinterpret_cast<void*>(r);
}

void Unmap(void* p, size_t size) {
  const int saved = errno;
  syscall(SYS_munmap, p, size);
  errno = saved;
}

namespace {

// madvise(2), errno kept; true if the kernel took the advice.
bool Madvise(void* p, size_t size, int advice) {
  const int saved = errno;
  const long r = syscall(SYS_madvise, p, size, advice);
  errno = saved;
  return r == 0;
}

}  // namespace

bool ReleasePages(void* p, size_t size, ReleaseMethod method) {
  if (method == ReleaseMethod::kFree && Madvise(p, size, MADV_FREE)) {
    return true;
  }
  // kDontNeed, or MADV_FREE refused (kernels before 4.5).
  return Madvise(p, size, MADV_DONTNEED);
}

size_t KernelPageSize() {
  static std::atomic<size_t> cached{0};
  size_t size = cached.load(std::memory_order_relaxed);
  if (size == 0) {
    size = getauxval(AT_PAGESZ);
    if (size == 0 || (size & (size - 1)) != 0) size = 4096;
    cached.store(size, std::memory_order_relaxed);  // Idempotent.
  }
  return size;
}

bool AdviseHugePages(void* p, size_t size) {
  return Madvise(p, size, MADV_HUGEPAGE);
}

bool AdviseNoHugePages(void* p, size_t size) {
  return Madvise(p, size, MADV_NOHUGEPAGE);
}

bool BindToNode(void* p, size_t size, int node, NumaPolicy policy) {
  if (policy == NumaPolicy::kOff) return true;
  if (node < 0 || node >= kMaxNodeBits) return false;
  // Nothing to bind to: the kernel refuses a node without memory (EINVAL)
  // and places the pages on the nearest node that has some.
  if (node < NumNodes() && !NodeHasMemory(node)) return true;
  unsigned long mask[kMaxNodeBits / (8 * sizeof(unsigned long))] = {};
  mask[node / (8 * sizeof(unsigned long))] |=
      1ul << (node % (8 * sizeof(unsigned long)));
  const int mode = policy == NumaPolicy::kBind ? kMpolBind : kMpolPreferred;
  const int saved = errno;
  const long r =
      syscall(SYS_mbind, p, size, mode, mask, kMaxNodeBits + 1, 0u);
  errno = saved;
  return r == 0;
}

int NodeOfAddress(const void* p) {
  int node = -1;
  const int saved = errno;
  const long r = syscall(SYS_get_mempolicy, &node, nullptr, 0ul, p,
                         kMpolFNode | kMpolFAddr);
  errno = saved;
  return r == 0 ? node : -1;
}

namespace {

// Nanoseconds of `clock`, or 0 (errno kept) if it cannot be read.
uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  const int saved = errno;
  if (clock_gettime(clock, &ts) != 0) {
    errno = saved;
    return 0;
  }
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 +
         static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

uint64_t MonotonicMs() { return ClockNs(CLOCK_MONOTONIC_COARSE) / 1000000; }

#if !defined(__x86_64__) && !defined(__i386__)
uint64_t CycleCount() { return ClockNs(CLOCK_MONOTONIC); }
#endif

uintptr_t RandomSecret(int which) {
  uintptr_t c = 0;
  const void* random = reinterpret_cast<const void*>(getauxval(AT_RANDOM));
  if (random != nullptr) {
    memcpy(&c, static_cast<const char*>(random) + (which & 1) * sizeof c,
           sizeof c);
  }
  c ^= reinterpret_cast<uintptr_t>(&c) * 0x9e3779b97f4a7c15ull;  // ASLR.
  c ^= static_cast<uintptr_t>(which + 1) * 0xc2b2ae3d27d4eb4full;
  return c != 0 ? c : 1;
}

}  // namespace cidmalloc::os
