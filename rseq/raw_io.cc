#include "rseq/raw_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rseq/initial_env.h"

namespace cidmalloc {

RawBuffer& RawBuffer::Ch(char c) {
  if (len_ + 1 < sizeof(buf_)) buf_[len_++] = c;
  return *this;
}

RawBuffer& RawBuffer::Str(const char* s) {
  if (s == nullptr) s = "(null)";
  while (*s != '\0') Ch(*s++);
  return *this;
}

RawBuffer& RawBuffer::Udec(uint64_t v, int width) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = n; i < width; ++i) Ch(' ');
  while (n > 0) Ch(tmp[--n]);
  return *this;
}

RawBuffer& RawBuffer::Dec(int64_t v) {
  if (v < 0) {
    Ch('-');
    // Negate in unsigned arithmetic so INT64_MIN is handled.
    return Udec(0 - static_cast<uint64_t>(v));
  }
  return Udec(static_cast<uint64_t>(v));
}

RawBuffer& RawBuffer::Hex(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = kDigits[v & 15];
    v >>= 4;
  } while (v != 0);
  Str("0x");
  while (n > 0) Ch(tmp[--n]);
  return *this;
}

void RawBuffer::WriteTo(int fd) const { RawWrite(fd, buf_, len_); }

void RawWrite(int fd, const char* s, size_t n) {
  const int saved = errno;
  while (n > 0) {
    const long w = syscall(SYS_write, fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      break;
    }
    s += w;
    n -= static_cast<size_t>(w);
  }
  errno = saved;
}

const char* GetKnob(const char* name) {
  // NULL until libc's constructor has run (a malloc from the program's
  // .preinit_array), or after clearenv(): the initial environment then.
  if (environ == nullptr) return InitialEnvKnob(name);
  return secure_getenv(name);
}

long ReadSmallFile(const char* path, char* buf, size_t size) {
  if (size == 0) return -1;
  const int saved = errno;
  const long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved;
    return -1;
  }
  size_t len = 0;
  while (len + 1 < size) {
    const long r = syscall(SYS_read, fd, buf + len, size - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += static_cast<size_t>(r);
  }
  syscall(SYS_close, fd);
  buf[len] = '\0';
  errno = saved;
  return static_cast<long>(len);
}

namespace {
bool ParseUint(const char** p, int* out) {
  const char* s = *p;
  if (*s < '0' || *s > '9') return false;
  long v = 0;
  while (*s >= '0' && *s <= '9') {
    v = v * 10 + (*s - '0');
    if (v > (1 << 24)) return false;
    ++s;
  }
  *out = static_cast<int>(v);
  *p = s;
  return true;
}
}  // namespace

bool ForEachInCpuList(const char* list, void (*fn)(int cpu, void* arg),
                      void* arg) {
  const char* p = list;
  while (*p != '\0' && *p != '\n') {
    int lo = 0;
    if (!ParseUint(&p, &lo)) return false;
    int hi = lo;
    if (*p == '-') {
      ++p;
      if (!ParseUint(&p, &hi) || hi < lo) return false;
    }
    for (int c = lo; c <= hi; ++c) fn(c, arg);
    if (*p == ',') ++p;
  }
  return true;
}

}  // namespace cidmalloc
