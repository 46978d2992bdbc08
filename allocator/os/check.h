// allocator/os/check.h: always-on CHECK, debug-only ASSERT, and fatal
// reports.  Reporting never allocates: messages go through RawBuffer.
#ifndef CIDMALLOC_ALLOCATOR_OS_CHECK_H_
#define CIDMALLOC_ALLOCATOR_OS_CHECK_H_

#include <stdint.h>

#include "rseq/state.h"  // CIDMALLOC_LIKELY / CIDMALLOC_UNLIKELY

namespace cidmalloc::os {

// Prints "cidmalloc: <file>:<line>: CHECK failed: <expr>: <msg>" and aborts.
[[noreturn]] void CheckFailed(const char* file, int line, const char* expr,
                              const char* msg);

// Prints "cidmalloc: <what> <ptr>" (e.g. "free(): invalid pointer 0x...")
// on stderr and aborts.  For misuse by the program, not internal bugs.
[[noreturn]] void FatalMisuse(const char* what, const void* ptr);

// Prints "cidmalloc: <what>" on stderr and aborts.
[[noreturn]] void Fatal(const char* what);

// Prints "cidmalloc: warning: <a><b>" once per call site's choosing.
void Warn(const char* a, const char* b);

}  // namespace cidmalloc::os

// Always on, in every build: for conditions whose failure would corrupt
// memory if execution went on.
#define CIDMALLOC_CHECK(cond, msg)                                      \
  do {                                                                  \
    if (CIDMALLOC_UNLIKELY(!(cond))) {                                  \
      ::cidmalloc::os::CheckFailed(__FILE__, __LINE__, #cond, msg);     \
    }                                                                   \
  } while (0)

// Debug builds only (--config=debug): invariants too costly for the fast
// path.  Still type-checked in optimised builds.
#ifdef NDEBUG
#define CIDMALLOC_ASSERT(cond) \
  do {                         \
    (void)sizeof(!(cond));     \
  } while (0)
#define CIDMALLOC_DEBUG 0
#else
#define CIDMALLOC_ASSERT(cond) CIDMALLOC_CHECK(cond, "debug assertion")
#define CIDMALLOC_DEBUG 1
#endif

#endif  // CIDMALLOC_ALLOCATOR_OS_CHECK_H_
