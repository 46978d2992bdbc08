#include "allocator/os/config.h"

#include <string.h>

#include "allocator/os/check.h"
#include "rseq/raw_io.h"

namespace cidmalloc::os {

namespace {

// The knob table.  CIDMALLOC_RSEQ_MODE, CIDMALLOC_RSEQ_NODE_IDS and
// CIDMALLOC_RSEQ_SOFT are parsed by the rseq layer (they must be known
// before any allocation); they are listed here so that the table is
// complete.
constexpr KnobInfo kKnobs[] = {
    {"CIDMALLOC_RSEQ_MODE", "cid|cpu|none", "best available",
     "caps the front end's ID mode (tests, benchmarks)"},
    {"CIDMALLOC_RSEQ_NODE_IDS", "auto|on|off", "auto",
     "node-qualified cid IDs (one slab per node and cid); auto: on with "
     "several nodes"},
    {"CIDMALLOC_RSEQ_SOFT", "owner|lock", "owner",
     "none mode: a thread's own soft ID without a lock (owner protocol, "
     "where membarrier allows it) or under its lock"},
    {"CIDMALLOC_NUMA_POLICY", "bind|preferred|off", "bind",
     "how each node's memory is bound to the node (mbind)"},
    {"CIDMALLOC_CACHE_BYTES", "bytes (k/M/G suffix)", "1M",
     "front-end cache capacity budget per cid (or cpu)"},
    {"CIDMALLOC_CACHE_IDLE_MS", "milliseconds, 0-3600000", "1000",
     "period after which a slow path drains the caches of IDs that neither "
     "missed nor moved a stack's top, empties each slab's classes that did "
     "not miss, and returns idle central lists' empty spans and the free pages "
     "of their sparse ones (0: never; malloc_trim drains every cache)"},
    {"CIDMALLOC_RELEASE_BYTES", "bytes (k/M/G suffix)", "32M",
     "free bytes a node keeps before returning memory to the OS"},
    {"CIDMALLOC_RELEASE_DELAY_MS", "milliseconds, 0-3600000", "1000",
     "how long free memory past CIDMALLOC_RELEASE_BYTES stays free before it "
     "goes back to the OS (0: at once)"},
    {"CIDMALLOC_RELEASE_METHOD", "dontneed|free", "dontneed",
     "madvise advice used to return memory (MADV_DONTNEED or MADV_FREE)"},
    {"CIDMALLOC_BACKGROUND_THREAD", "on|off", "off",
     "a thread of the allocator's own runs the idle-cache scan and the "
     "delayed release on time, so that a process that goes quiet still "
     "gives memory back"},
    {"CIDMALLOC_HUGE_PAGES", "on|off", "on",
     "ask for transparent huge pages (MADV_HUGEPAGE) on buffers realloc "
     "grows beyond 2 MiB"},
    {"CIDMALLOC_STATS", "0|1|2", "0",
     "print a summary on stderr at exit and count every operation (the "
     "inline fast paths are then off); 2 also prints a table of the size "
     "classes (spans, objects in use, cached and free)"},
};

constexpr uint64_t kMaxDelayMs = 3600000;  // An hour.

void Invalid(const char* name, const char* value) {
  RawBuffer b;
  b.Str("cidmalloc: warning: ").Str(name).Ch('=').Str(value);
  b.Str(" is invalid; using the default\n");
  b.WriteTo(2);
}

}  // namespace

const KnobInfo* Knobs(size_t* count) {
  *count = sizeof(kKnobs) / sizeof(kKnobs[0]);
  return kKnobs;
}

namespace {

// The decimal digits at the start of s, as a value of at most `max`: sets
// *out and returns a pointer past them, or returns nullptr when there is no
// digit or the value would exceed max.  ParseBytes and ParseUint both read
// their number with it.
const char* ParseDigits(const char* s, uint64_t max, uint64_t* out) {
  if (s == nullptr || *s < '0' || *s > '9') return nullptr;
  uint64_t v = 0;
  for (; *s >= '0' && *s <= '9'; ++s) {
    const uint64_t digit = static_cast<uint64_t>(*s - '0');
    // v * 10 + digit > max, without overflowing.
    if (digit > max || v > (max - digit) / 10) return nullptr;
    v = v * 10 + digit;
  }
  *out = v;
  return s;
}

}  // namespace

bool ParseBytes(const char* s, size_t* out) {
  uint64_t v;
  s = ParseDigits(s, uint64_t{1} << 50, &v);
  if (s == nullptr) return false;
  int shift = 0;
  switch (*s) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++s;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++s;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++s;
      break;
    default:
      return false;
  }
  if (*s != '\0' || v > (uint64_t{1} << (50 - shift))) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

bool ParseUint(const char* s, uint64_t max, uint64_t* out) {
  uint64_t v;
  s = ParseDigits(s, max, &v);
  if (s == nullptr || *s != '\0') return false;
  *out = v;
  return true;
}

namespace {

// A knob of milliseconds, 0 to kMaxDelayMs: sets *out if it is set and
// valid, warns if it is set and invalid.
void LoadMilliseconds(const char* name, uint32_t* out) {
  const char* v = GetKnob(name);
  if (v == nullptr) return;
  uint64_t ms;
  if (ParseUint(v, kMaxDelayMs, &ms)) {
    *out = static_cast<uint32_t>(ms);
  } else {
    Invalid(name, v);
  }
}

// A knob of "on" or "off": sets *out if it is set and valid, warns if it is
// set and invalid.
void LoadOnOff(const char* name, bool* out) {
  const char* v = GetKnob(name);
  if (v == nullptr) return;
  if (strcmp(v, "on") == 0) {
    *out = true;
  } else if (strcmp(v, "off") == 0) {
    *out = false;
  } else {
    Invalid(name, v);
  }
}

}  // namespace

void LoadConfig(Config* c) {
  *c = Config();
  if (const char* v = GetKnob("CIDMALLOC_NUMA_POLICY")) {
    if (strcmp(v, "bind") == 0) {
      c->numa_policy = NumaPolicy::kBind;
    } else if (strcmp(v, "preferred") == 0) {
      c->numa_policy = NumaPolicy::kPreferred;
    } else if (strcmp(v, "off") == 0) {
      c->numa_policy = NumaPolicy::kOff;
    } else {
      Invalid("CIDMALLOC_NUMA_POLICY", v);
    }
  }
  if (const char* v = GetKnob("CIDMALLOC_RELEASE_METHOD")) {
    if (strcmp(v, "dontneed") == 0) {
      c->release_method = ReleaseMethod::kDontNeed;
    } else if (strcmp(v, "free") == 0) {
      c->release_method = ReleaseMethod::kFree;
    } else {
      Invalid("CIDMALLOC_RELEASE_METHOD", v);
    }
  }
  if (const char* v = GetKnob("CIDMALLOC_CACHE_BYTES")) {
    size_t bytes;
    if (ParseBytes(v, &bytes)) {
      c->cache_bytes = bytes;
    } else {
      Invalid("CIDMALLOC_CACHE_BYTES", v);
    }
  }
  LoadMilliseconds("CIDMALLOC_CACHE_IDLE_MS", &c->cache_idle_ms);
  if (const char* v = GetKnob("CIDMALLOC_RELEASE_BYTES")) {
    size_t bytes;
    if (ParseBytes(v, &bytes)) {
      c->release_threshold = bytes;
    } else {
      Invalid("CIDMALLOC_RELEASE_BYTES", v);
    }
  }
  LoadMilliseconds("CIDMALLOC_RELEASE_DELAY_MS", &c->release_delay_ms);
  LoadOnOff("CIDMALLOC_BACKGROUND_THREAD", &c->background_thread);
  LoadOnOff("CIDMALLOC_HUGE_PAGES", &c->huge_pages);
  c->stats = StatsKnobOn();
  if (const char* v = GetKnob("CIDMALLOC_STATS")) {
    if (!c->stats && strcmp(v, "0") != 0) Invalid("CIDMALLOC_STATS", v);
    c->stats_classes = strcmp(v, "2") == 0;
  }
}

bool StatsKnobOn() {
  const char* v = GetKnob("CIDMALLOC_STATS");
  return v != nullptr && (strcmp(v, "1") == 0 || strcmp(v, "2") == 0);
}

}  // namespace cidmalloc::os
