// rseq/raw_io.h: allocation-free, async-signal-safe output and knob reads.
//
// Everything below the API layer reports through these helpers: they never
// call malloc, printf or iostreams, so they are safe inside the allocator, in
// a signal handler and during early initialisation.
#ifndef CIDMALLOC_RSEQ_RAW_IO_H_
#define CIDMALLOC_RSEQ_RAW_IO_H_

#include <stddef.h>
#include <stdint.h>

namespace cidmalloc {

// A fixed-size text buffer.  Appends that do not fit are truncated, never
// allocated.
class RawBuffer {
 public:
  RawBuffer& Str(const char* s);
  RawBuffer& Dec(int64_t v);
  // Right-aligned in `width` characters (more where v needs them).
  RawBuffer& Udec(uint64_t v, int width = 0);
  RawBuffer& Hex(uint64_t v);  // "0x" followed by lower-case digits.
  RawBuffer& Ch(char c);
  const char* data() const { return buf_; }
  size_t size() const { return len_; }
  // Writes the contents to `fd` (retrying short writes and EINTR).
  void WriteTo(int fd) const;

 private:
  char buf_[512];
  size_t len_ = 0;
};

// write(2) until done; errno is preserved.
void RawWrite(int fd, const char* s, size_t n);

// Reads a configuration knob with secure_getenv semantics (NULL in setuid
// and other secure-execution processes) and without allocating.  Where
// `environ` is NULL (before libc's initialisation, in .preinit_array, or
// after clearenv()), from the initial environment (initial_env.h).
const char* GetKnob(const char* name);

// Reads a small file (e.g. under /sys) into `buf` with raw syscalls.
// Returns the number of bytes read (NUL-terminated), or -1.
long ReadSmallFile(const char* path, char* buf, size_t size);

// Parses a Linux cpu list ("0-3,8,10-11") and calls `fn(cpu, arg)` for each
// cpu.  Returns false on a malformed list.
bool ForEachInCpuList(const char* list, void (*fn)(int cpu, void* arg),
                      void* arg);

}  // namespace cidmalloc

#endif  // CIDMALLOC_RSEQ_RAW_IO_H_
