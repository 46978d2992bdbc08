// allocator/os/config.h: the CIDMALLOC_* environment knobs, in one table.
//
// Read once, during initialisation, with secure_getenv semantics and without
// allocating.  An invalid value prints a one-line warning and keeps the
// default.  The table in config.cc is the single list; README.md documents
// it and tests/allocator/config_test checks that the two agree.
#ifndef CIDMALLOC_ALLOCATOR_OS_CONFIG_H_
#define CIDMALLOC_ALLOCATOR_OS_CONFIG_H_

#include <stddef.h>
#include <stdint.h>

namespace cidmalloc::os {

enum class NumaPolicy : uint8_t { kBind, kPreferred, kOff };
enum class ReleaseMethod : uint8_t { kDontNeed, kFree };

struct Config {
  NumaPolicy numa_policy = NumaPolicy::kBind;
  ReleaseMethod release_method = ReleaseMethod::kDontNeed;
  // Front-end cache budget of one ID (cid or cpu), in bytes of capacity.
  size_t cache_bytes = size_t{1} << 20;
  // An ID's cache that ran no slow path and whose stack tops did not move
  // for this long (between one and two of these periods) is drained by
  // another ID's slow path or the background thread; once a period a slab
  // also empties the classes that did not miss, and idle central lists give
  // their spans back (front_end.h); 0: none of this.
  uint32_t cache_idle_ms = 1000;
  // Free, still-committed bytes a node's page heap keeps before it returns
  // memory to the OS.
  size_t release_threshold = size_t{32} << 20;
  // How long committed free memory past the threshold stays free before
  // automatic release returns it (page_heap/release_decay.h); 0 returns it
  // at once.
  uint32_t release_delay_ms = 1000;
  // MADV_HUGEPAGE on buffers realloc grows beyond a chunk.
  bool huge_pages = true;
  // A thread of the allocator's own runs the idle-cache scan and the
  // delayed release on time, so that a process that goes quiet still gives
  // its caches and free memory back (api/background.h).
  bool background_thread = false;
  // CIDMALLOC_STATS=1 or 2: count operations and print the summary at
  // exit; 2 also prints the size-class table after it.
  bool stats = false;
  bool stats_classes = false;
};

// One row of the knob table (for documentation and tests).
struct KnobInfo {
  const char* name;
  const char* values;
  const char* default_value;
  const char* help;
};
// Returns the table and its length.
const KnobInfo* Knobs(size_t* count);

// Parses the environment into *config.  Called once by the allocator's
// initialisation; tests call it after setenv().
void LoadConfig(Config* config);

// CIDMALLOC_STATS is "1" or "2".  LoadConfig reads it this way too (and
// warns about a value other than 0, 1 or 2); the exit summary of a program
// that never initialised the allocator asks here, without parsing anything
// else.
bool StatsKnobOn();

// "2M", "64k", "1G", "4096" -> bytes.  Returns false on a malformed value.
bool ParseBytes(const char* s, size_t* out);

// Decimal digits only, at most `max`.  Returns false otherwise.
bool ParseUint(const char* s, uint64_t max, uint64_t* out);

}  // namespace cidmalloc::os

#endif  // CIDMALLOC_ALLOCATOR_OS_CONFIG_H_
