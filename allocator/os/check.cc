#include "allocator/os/check.h"

#include <stdlib.h>

#include "rseq/raw_io.h"

namespace cidmalloc::os {

void CheckFailed(const char* file, int line, const char* expr,
                 const char* msg) {
  RawBuffer b;
  b.Str("cidmalloc: ").Str(file).Ch(':').Dec(line).Str(": CHECK failed: ");
  b.Str(expr).Str(": ").Str(msg).Ch('\n');
  b.WriteTo(2);
  abort();
}

void FatalMisuse(const char* what, const void* ptr) {
  RawBuffer b;
  b.Str("cidmalloc: ").Str(what).Ch(' ');
  b.Hex(reinterpret_cast<uintptr_t>(ptr)).Ch('\n');
  b.WriteTo(2);
  abort();
}

void Fatal(const char* what) {
  RawBuffer b;
  b.Str("cidmalloc: ").Str(what).Ch('\n');
  b.WriteTo(2);
  abort();
}

void Warn(const char* a, const char* b) {
  RawBuffer buf;
  buf.Str("cidmalloc: warning: ").Str(a).Str(b).Ch('\n');
  buf.WriteTo(2);
}

}  // namespace cidmalloc::os
