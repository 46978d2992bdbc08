// allocator/api/stats_internal.h: counting and reporting inside layer 6.
#ifndef CIDMALLOC_ALLOCATOR_API_STATS_INTERNAL_H_
#define CIDMALLOC_ALLOCATOR_API_STATS_INTERNAL_H_

#include "allocator/os/config.h"

namespace cidmalloc::api {

const os::Config& Config();
// True once initialisation has completed (the first allocation did it).
bool Initialized();

// Counting mode only (CIDMALLOC_STATS=1).
void CountAlloc(void* p, bool cache_hit);
void CountFree(void* p, bool remote);

// Called once by initialisation, before its release store publishes it:
// records whether the summary is printed at exit (CIDMALLOC_STATS) and,
// when it is, keeps a copy of stderr.
void StatsInit(const os::Config& config);

}  // namespace cidmalloc::api

#endif  // CIDMALLOC_ALLOCATOR_API_STATS_INTERNAL_H_
