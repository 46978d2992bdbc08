// allocator/api/stats_internal.h: counting and reporting inside layer 6.
#ifndef CIDMALLOC_ALLOCATOR_API_STATS_INTERNAL_H_
#define CIDMALLOC_ALLOCATOR_API_STATS_INTERNAL_H_

#include <stdint.h>

#include "allocator/os/config.h"

namespace cidmalloc::api {

const os::Config& Config();
// True once initialisation has completed (the first allocation did it).
bool Initialized();

// Counting mode only (CIDMALLOC_STATS=1).  An allocation was served from
// the front-end cache (a hit) or by a slow path; an object was freed on its
// own node or on another (a remote free).
enum class Served : uint8_t { kCache, kSlowPath };
enum class FreedOn : uint8_t { kOwnNode, kOtherNode };
void CountAlloc(void* p, Served served);
void CountFree(void* p, FreedOn where);

// Called once by initialisation, before its release store publishes it:
// records whether the summary is printed at exit (CIDMALLOC_STATS) and,
// when it is, keeps a copy of stderr.
void StatsInit(const os::Config& config);

}  // namespace cidmalloc::api

#endif  // CIDMALLOC_ALLOCATOR_API_STATS_INTERNAL_H_
