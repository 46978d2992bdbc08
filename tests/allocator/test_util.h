// tests/allocator/test_util.h: helpers shared by the allocator tests:
// capturing a file descriptor's output, cpu pinning, the process's address
// space size, resident pages and page faults, byte patterns.
//
// Nothing here depends on the allocator's internals, so the helpers can be
// used by tests that link the allocator and by those that do not.
#ifndef CIDMALLOC_TESTS_ALLOCATOR_TEST_UTIL_H_
#define CIDMALLOC_TESTS_ALLOCATOR_TEST_UTIL_H_

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/common/cpus.h"

namespace cidmalloc_test {

// Redirects a file descriptor (default: stderr) into a memfd while alive;
// Finish() restores it and returns what was written.  A memfd never blocks
// the writer, however much it writes.
class FdCapture {
 public:
  explicit FdCapture(int fd = 2) : fd_(fd) {
    memfd_ = static_cast<int>(syscall(SYS_memfd_create, "capture", 0));
    saved_ = dup(fd_);
    if (memfd_ >= 0 && saved_ >= 0) {
      fflush(nullptr);
      ok_ = dup2(memfd_, fd_) == fd_;
    }
  }
  ~FdCapture() { Finish(); }
  FdCapture(const FdCapture&) = delete;
  FdCapture& operator=(const FdCapture&) = delete;

  bool ok() const { return ok_; }

  // Restores the descriptor (idempotent) and returns the captured text.
  std::string Finish() {
    if (saved_ >= 0) {
      fflush(nullptr);
      dup2(saved_, fd_);
      close(saved_);
      saved_ = -1;
      if (memfd_ >= 0) {
        char buf[4096];
        ssize_t n;
        off_t off = 0;
        while ((n = pread(memfd_, buf, sizeof buf, off)) > 0) {
          text_.append(buf, static_cast<size_t>(n));
          off += n;
        }
        close(memfd_);
        memfd_ = -1;
      }
    }
    return text_;
  }

 private:
  int fd_;
  int memfd_ = -1;
  int saved_ = -1;
  bool ok_ = false;
  std::string text_;
};

using cidmalloc_testing::AllowedCpus;

// Pins the calling thread to `cpu`; true if it now runs there (checked with
// sched_getcpu as well).
inline bool PinToCpu(int cpu) {
  return cidmalloc_testing::PinToCpu(cpu) && sched_getcpu() == cpu;
}

// The process's virtual address space size (VmSize), in bytes; 0 if unknown.
inline size_t VmSizeBytes() {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f) != nullptr) {
    if (strncmp(line, "VmSize:", 7) == 0) {
      kib = strtoull(line + 7, nullptr, 10);
      break;
    }
  }
  fclose(f);
  return kib * 1024;
}

// memset that the compiler must perform: stores to a block that is freed
// right afterwards are otherwise dead, and GCC removes them.
// How many pages of [p, p+size) are resident (mincore); p on a page
// boundary.  SIZE_MAX if mincore fails, which no expected count matches.
inline size_t ResidentPages(const void* p, size_t size) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  if (mincore(const_cast<void*>(p), size, vec.data()) != 0) return SIZE_MAX;
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

// The calling thread's minor page faults so far.
inline long ThreadMinorFaults() {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

inline void Dirty(void* p, int byte, size_t n) {
  memset(p, byte, n);
  asm volatile("" : : "r"(p) : "memory");
}

// A position-dependent byte pattern: detects lost, shifted or stale bytes.
inline unsigned char PatternByte(size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 131u + (i >> 8) * 7u + seed) ^
                                    (seed >> 3));
}
inline void FillPattern(void* p, size_t n, unsigned seed) {
  unsigned char* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = PatternByte(i, seed);
}
// Index of the first byte in [0, n) that differs from the pattern, or n.
inline size_t FirstPatternMismatch(const void* p, size_t n, unsigned seed) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != PatternByte(i, seed)) return i;
  }
  return n;
}
// Index of the first non-zero byte in [0, n), or n.
inline size_t FirstNonZero(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return i;
  }
  return n;
}

inline bool IsAligned(const void* p, size_t align) {
  return (reinterpret_cast<uintptr_t>(p) & (align - 1)) == 0;
}

}  // namespace cidmalloc_test

#endif  // CIDMALLOC_TESTS_ALLOCATOR_TEST_UTIL_H_
