#include "rseq/initial_env.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rseq/once.h"

namespace cidmalloc {

namespace {

constexpr char kPrefix[] = "CIDMALLOC_";
constexpr size_t kPrefixLength = sizeof(kPrefix) - 1;

// The initial environment's CIDMALLOC_* entries, "NAME=value\0" one after
// the other, in their order there; g_used bytes of it hold entries.
// Written only by the one caller that claimed g_loaded, before it publishes
// it; read only once g_loaded is done (rseq/once.h), never written again.
char g_store[4096];
size_t g_used;
constinit OnceGate g_loaded;

// Appends the CIDMALLOC_* entries of the NUL-separated list on `fd` to
// g_store.  Streamed through a buffer on the stack: the environment as a
// whole may be far larger than g_store.
void CopyKnobEntries(long fd) {
  char chunk[1024];
  size_t entry_start = 0;  // Where in g_store the current entry starts.
  size_t seen = 0;         // Bytes of the current entry read so far.
  bool keep = true;        // The current entry is a knob and fits so far.
  for (;;) {
    const long r = syscall(SYS_read, fd, chunk, sizeof(chunk));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (long i = 0; i < r; ++i) {
      const char c = chunk[i];
      if (c == '\0') {
        if (keep && seen > kPrefixLength) {
          g_store[g_used++] = '\0';  // Room was left for it below.
        } else {
          g_used = entry_start;
        }
        entry_start = g_used;
        seen = 0;
        keep = true;
        continue;
      }
      if (keep) {
        if (seen < kPrefixLength && c != kPrefix[seen]) {
          keep = false;
        } else if (g_used + 1 < sizeof(g_store)) {  // And the NUL after it.
          g_store[g_used++] = c;
        } else {
          keep = false;
        }
      }
      ++seen;
    }
  }
  g_used = entry_start;  // An entry with no NUL after it is left out.
}

void Load() {
  const long fd =
      syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  CopyKnobEntries(fd);
  syscall(SYS_close, fd);
}

}  // namespace

const char* InitialEnvKnob(const char* name) {
  // secure_getenv's rule: nothing from the environment in a process the
  // kernel started in secure-execution mode.
  if (getauxval(AT_SECURE) != 0) return nullptr;
  const int saved = errno;
  // Another thread may be loading: knobs are read while the allocator or
  // the rseq layer initialises, which other threads may wait for.
  g_loaded.Run(Load);
  errno = saved;
  const size_t length = strlen(name);
  for (size_t i = 0; i < g_used; i += strlen(g_store + i) + 1) {
    if (strncmp(g_store + i, name, length) == 0 &&
        g_store[i + length] == '=') {
      return g_store + i + length + 1;
    }
  }
  return nullptr;
}

}  // namespace cidmalloc
