#include "allocator/page_heap/meta_arena.h"

#include <errno.h>
#include <string.h>

#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"

namespace cidmalloc::page_heap {

namespace {

// All guarded by g_lock.
constinit os::SpinLock g_lock;
char* g_cursor = nullptr;
char* g_end = nullptr;
size_t g_mapped = 0;
ChunkInfo* g_free_infos = nullptr;  // Linked through ChunkInfo::base.

constexpr size_t kArenaBlock = size_t{2} << 20;

// The first address at or after `at` that is `phase` past a multiple of
// `align`.
uintptr_t Place(const char* at, size_t align, size_t phase) {
  return ((reinterpret_cast<uintptr_t>(at) + align - 1 - phase) &
          ~(uintptr_t{align} - 1)) +
         phase;
}

void* AllocLocked(size_t bytes, size_t align, size_t phase = 0) {
  uintptr_t p = Place(g_cursor, align, phase);
  if (g_cursor == nullptr || p + bytes > reinterpret_cast<uintptr_t>(g_end)) {
    const size_t block =
        bytes + align > kArenaBlock ? (bytes + align + 4095) & ~size_t{4095}
                                    : kArenaBlock;
    char* fresh = static_cast<char*>(os::MapAligned(block, 4096));
    if (fresh == nullptr) return nullptr;  // errno is ENOMEM.
    g_mapped += block;
    g_cursor = fresh;
    g_end = fresh + block;
    p = Place(g_cursor, align, phase);
  }
  g_cursor = reinterpret_cast<char*>(p + bytes);
  return reinterpret_cast<void*>(p);  // Fresh mmap memory is zero.
}

}  // namespace

void* MetaAlloc(size_t bytes, size_t align, size_t phase) {
  os::SpinLockHolder h(&g_lock);
  return AllocLocked(bytes, align, phase);
}

ChunkInfo* NewChunkInfo() {
  os::SpinLockHolder h(&g_lock);
  if (g_free_infos != nullptr) {
    ChunkInfo* info = g_free_infos;
    g_free_infos = reinterpret_cast<ChunkInfo*>(info->base);
    memset(static_cast<void*>(info), 0, sizeof(*info));
    return info;
  }
  return static_cast<ChunkInfo*>(AllocLocked(sizeof(ChunkInfo), 64));
}

void DeleteChunkInfo(ChunkInfo* info) {
  os::SpinLockHolder h(&g_lock);
  info->base = reinterpret_cast<uintptr_t>(g_free_infos);
  g_free_infos = info;
}

size_t MetaBytesMapped() {
  os::SpinLockHolder h(&g_lock);
  return g_mapped;
}

void MetaForkPrepare() { g_lock.Lock(); }
void MetaForkParent() { g_lock.Unlock(); }
void MetaForkChild() { g_lock.ResetAfterFork(); }

}  // namespace cidmalloc::page_heap
