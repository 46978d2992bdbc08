// allocator/api/alloc.cc: initialisation, slow paths and fork handling.
#include "allocator/api/alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "allocator/api/background.h"
#include "allocator/api/stats_internal.h"
#include "allocator/central/central_list.h"
#include "allocator/front_end/run_cache.h"
#include "allocator/os/check.h"
#include "allocator/os/config.h"
#include "allocator/os/os.h"
#include "allocator/os/spinlock.h"
#include "allocator/page_heap/meta_arena.h"
#include "allocator/page_heap/page_heap.h"
#include "rseq/raw_io.h"
#include "rseq/rseq.h"

namespace cidmalloc::api {

constinit uintptr_t g_state = 0;
constinit bool g_counting = false;

namespace {

// Written once by DoInit, before the release store of g_init_state below;
// read-only afterwards.
constinit os::Config g_config;
// 0: not started, 1: in progress, 2: ready.  The release store of 2 pairs
// with the acquire loads in EnsureInit(): g_config and every layer's state
// are visible to a thread that sees 2.
constinit std::atomic<int> g_init_state{0};

void ForkPrepare() {
  // A fork while another thread initialises would give the child an
  // allocator that stays "running" for ever.  Acquire: pairs with
  // InitSlow()'s release store of 2.
  while (g_init_state.load(std::memory_order_acquire) == 1) {
    syscall(SYS_sched_yield);
  }
  front_end::ForkPrepare();
  central::ForkPrepare();
  page_heap::ForkPrepare();
}
void ForkParent() {
  page_heap::ForkParent();
  central::ForkParent();
  front_end::ForkParent();
}
void ForkChild() {
  page_heap::ForkChild();
  central::ForkChild();
  front_end::ForkChild();
  os::ForgetSpinLocksAfterFork();
  BackgroundForkChild();
}

// The cookie's secret, bits 8-63 (g_state's low byte holds the flags).
uintptr_t RandomCookie() {
  // Never 0 (see g_state).
  return (os::RandomSecret(1) | 0x100) & ~uintptr_t{0xff};
}

void DoInit() {
  const int saved = errno;
  rseq::EnsureInit();
  os::LoadConfig(&g_config);
  os::InitTopology();
  page_heap::Init(&g_config);
  front_end::Init(&g_config, &g_state, sizeof(g_state));
  BackgroundInit(&g_config);
  g_counting = g_config.stats;
  StatsInit(g_config);
  rseq::SetSoftIdExitCallback(front_end::OnSoftIdExit);
  // kFastFree and kFastSoft push without the remote check: one node only.
  const bool one_node = os::NumNodes() == 1 && !os::g_topology.injected;
  uint8_t fast = 0;
  if (!g_counting) {
    if (rseq::CurrentIdKind() == rseq::IdKind::kRaw) {
      // The inline sections index g_slabs with the raw ID unchecked, and
      // read it from mm_cid: cid mode only.  Cpu mode's inline sections
      // (after the ret) read cpu_id through the ID field's offset.
      if (rseq::RawIdIsMmCid()) {
        fast = kFastAlloc;
        if (one_node) fast |= kFastFree;
      } else if (rseq::RawIdsBelowNumRseqIds()) {
        fast = kFastCpu;
        if (one_node) fast |= kFastCpuFree;
      }
    } else if (rseq::CurrentIdKind() == rseq::IdKind::kNodeQualified) {
      fast = kFastQualified;
    } else if (rseq::CurrentMode() == rseq::Mode::kNone && one_node) {
      fast = kFastSoft;
    }
  }
  // Published by the release store of g_init_state.
  g_state = RandomCookie() | fast;
  errno = saved;
}

// The fork handlers: the rseq layer's first, then the allocator's, once.
// pthread_atfork runs prepare handlers in the reverse order of their
// registration and the others in that order, so handlers registered before
// these run outside them: a program's prepare handler runs after the
// allocator has taken all its locks, and its child handler before the
// child's locks are reset, and either waits for ever if it allocates
// beyond its cache (tests/preload/fork_handlers.c).  glibc's malloc takes
// its locks inside fork() itself, after every handler.  Hence
// registration at load time, before the program's own (a library's
// constructor runs before those of the executable, and of libraries that
// do not depend on it), not at the first allocation: a C program's first
// allocation can come after its pthread_atfork calls, or inside one
// (glibc 2.36 grows its table of handlers with malloc, under the lock
// pthread_atfork would then take again).
constinit std::atomic<bool> g_fork_handlers{false};
void RegisterForkHandlers() {
  // Relaxed: only which caller registers matters.
  if (g_fork_handlers.exchange(true, std::memory_order_relaxed)) return;
  rseq::RegisterForkHandlers();
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
}
// Priority 101, the first a program may use: in a static link, before the
// program's own constructors.
__attribute__((constructor(101))) void RegisterForkHandlersAtLoad() {
  RegisterForkHandlers();
}

// Set while this thread initialises, to tell re-entry from another thread.
__thread bool t_initializing CIDMALLOC_TLS_IE = false;

void InitSlow() {
  // Initialisation allocates nothing (raw system calls, the metadata arena;
  // glibc's first pthread_atfork registrations use static storage), so
  // re-entry would be a bug: report it rather than wait for ourselves.
  CIDMALLOC_CHECK(!t_initializing, "malloc re-entered during initialisation");
  int expected = 0;
  // Acquire pairs with nothing on success (0 is only the initial value);
  // a failed CAS goes on to the acquire loads below.
  if (g_init_state.compare_exchange_strong(expected, 1,
                                           std::memory_order_acquire)) {
    t_initializing = true;
    DoInit();
    t_initializing = false;
    // Release: pairs with the acquire loads of g_init_state (EnsureInit(),
    // the wait below, Initialized()).
    g_init_state.store(2, std::memory_order_release);
    // Normally done at load time already (below); after "ready", since
    // pthread_atfork may call malloc, which now works.
    RegisterForkHandlers();
    return;
  }
  // Another thread initialises: wait for it.  Acquire: pairs with its
  // release store of 2 above.
  while (g_init_state.load(std::memory_order_acquire) != 2) {
    syscall(SYS_sched_yield);
  }
}

// Acquire: pairs with InitSlow()'s release store of 2.
inline void EnsureInit() {
  if (CIDMALLOC_UNLIKELY(g_init_state.load(std::memory_order_acquire) != 2)) {
    InitSlow();
  }
}

}  // namespace

const os::Config& Config() {
  EnsureInit();
  return g_config;
}

bool Initialized() {
  // Acquire: pairs with the release store of 2 in InitSlow().
  return g_init_state.load(std::memory_order_acquire) == 2;
}

void* AllocSmallSlow(uint32_t stack_offset) noexcept {
  // None mode's fast path, apart from AllocSmallMiss, whose saved
  // registers it would otherwise pay for.
  void* p;
  if (CIDMALLOC_LIKELY(FastFlags() & kFastSoft) &&
      CIDMALLOC_LIKELY(front_end::TryAllocSoft(stack_offset, &p))) {
    MarkInUse(p);
    return p;
  }
  return AllocSmallMiss(front_end::ClassOfStackOffset(stack_offset));
}

void* AllocSmallMiss(int cls) noexcept {
  void* p;
  EnsureInit();
  // The full path: registers the thread's own rseq area if needed, or uses
  // its soft ID.
  p = rseq::Pop(front_end::g_slabs, front_end::kLayout.offset[cls]);
  const Served served = p != nullptr ? Served::kCache : Served::kSlowPath;
  if (served == Served::kSlowPath) {
    p = front_end::AllocSlow(cls);
    if (p == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    MaybeStartBackground();
  }
  MarkInUse(p);
  if (g_counting) CountAlloc(p, served);
  return p;
}

namespace {
// Runs the ID's run stack may hold (front_end/run_cache.h).
constexpr size_t kMaxCachedRunBytes = size_t{front_end::kMaxCachedRunPages}
                                      << page_heap::kPageShift;
}  // namespace

void* AllocLarge(size_t size, size_t align, Fill fill) noexcept {
  // Fast flags set: initialised and not counting.
  if (size <= kMaxCachedRunBytes && align <= page_heap::kPageSize &&
      fill == Fill::kAny && CIDMALLOC_LIKELY(FastFlags() != 0)) {
    const auto pages = static_cast<uint32_t>(page_heap::PagesFor(size));
    void* other = nullptr;
    if (void* p = front_end::TryTakeRun(pages, &other)) return p;
    return AllocLargeMiss(size, align, fill, other);
  }
  return AllocLargeMiss(size, align, fill, nullptr);
}

void* AllocLargeMiss(size_t size, size_t align, Fill fill,
                     void* other) noexcept {
  if (other != nullptr) front_end::TakeRunMiss(other);
  EnsureInit();
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return nullptr;
  }
  // A run of the same length the thread's ID freed last.
  if (size <= kMaxCachedRunBytes && align <= page_heap::kPageSize) {
    const auto pages = static_cast<uint32_t>(page_heap::PagesFor(size));
    if (void* p = front_end::TakeRun(pages)) {
      if (fill == Fill::kZero) memset(p, 0, size);
      if (g_counting) CountAlloc(p, Served::kCache);
      return p;
    }
  }
  bool zeroed = false;
  // The arena: the thread's ID (cid, cpu or soft ID), which the page heap
  // takes modulo its arenas per node.
  void* p = page_heap::AllocLarge(os::CurrentNode(),
                                  static_cast<int>(rseq::CurrentIdHint()),
                                  size, align, &zeroed);
  if (p == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (fill == Fill::kZero && !zeroed) memset(p, 0, size);
  if (g_counting) CountAlloc(p, Served::kSlowPath);
  MaybeStartBackground();
  front_end::NoteLargeSlowPath();
  return p;
}

void FreeSlow(void* ptr) noexcept {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  page_heap::ChunkInfo* chunk = page_heap::LookupChunk(p);
  // Null, or not ours.
  if (CIDMALLOC_UNLIKELY(chunk == nullptr)) return FreeLarge(ptr);
  // Fast flags set: initialised and not counting.
  if (CIDMALLOC_LIKELY(FastFlags() != 0)) {
    const uint32_t pages = page_heap::HeapRunPages(chunk, p);
    if (pages - 1 < front_end::kMaxCachedRunPages) {
      if (front_end::TryCacheRun(ptr, pages, chunk->node)) return;
    } else if (pages != 0) {
      return page_heap::FreeLarge(chunk, p);  // Longer: to its heap.
    }
  }
  return FreeLargeIn(ptr, chunk);
}

void FreeLarge(void* ptr) noexcept {
  if (ptr == nullptr) return;
  page_heap::ChunkInfo* chunk =
      page_heap::LookupChunk(reinterpret_cast<uintptr_t>(ptr));
  if (chunk == nullptr) return InvalidPointer("free(): invalid pointer", ptr);
  return FreeLargeIn(ptr, chunk);
}

void FreeLargeIn(void* ptr, page_heap::ChunkInfo* chunk) noexcept {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  // Not a small object: a large allocation, or a span that is free already.
  // Freed on another node than its chunk's, it is a remote free too, though
  // it goes straight to its own node's page heap.
  if (g_counting) {
    CountFree(ptr, os::NumNodes() > 1 && chunk->node != os::CurrentNode()
                       ? FreedOn::kOtherNode
                       : FreedOn::kOwnNode);
  }
  // A run short enough for the ID's run stack; HeapRunPages is 0 for
  // anything but the start of a live heap run (page_heap::FreeLarge reports
  // it, or frees the huge mapping).
  const uint32_t pages = page_heap::HeapRunPages(chunk, p);
  if (pages - 1 < front_end::kMaxCachedRunPages &&
      front_end::CacheRun(ptr, pages, chunk->node)) {
    return;
  }
  page_heap::FreeLarge(chunk, p);
  front_end::NoteLargeSlowPath();
}

void FreeNotSmallStart(void* p, uint32_t tag) noexcept {
  if (central::TagClass(tag) == 0) return FreeSlow(p);
  return InvalidPointer("free(): invalid pointer (not the start of an object)",
                        p);
}

void FreeSmallUnmarked(void* p) noexcept {
  if (CIDMALLOC_UNLIKELY(!MarkFree(p, g_state))) {
    return DoubleFree("free()", p);
  }
  return FreeSmallSlow(p);
}

void FreeSmallSlow(void* p) noexcept {
  // The span tag again (two loads the inline path just made, so L1 hits):
  // free()'s inline path then keeps neither the tag nor the class live for
  // its slow paths (passing either cost it a register copy).
  const uint32_t tag = page_heap::LookupSpanTag(reinterpret_cast<uintptr_t>(p));
  // None mode's fast path (see AllocSmallSlow).
  if (CIDMALLOC_LIKELY(FastFlags() & kFastSoft) &&
      CIDMALLOC_LIKELY(front_end::TryFreeSoft(central::TagPayload(tag), p))) {
    return;
  }
  return FreeSmallMiss(p, central::TagClass(tag));
}

void FreeSmallMiss(void* p, int cls) noexcept {
  EnsureInit();
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  page_heap::ChunkInfo* chunk = page_heap::LookupChunk(addr);
  const int node = chunk->node;
  const FreedOn where = os::NumNodes() > 1 && node != os::CurrentNode()
                            ? FreedOn::kOtherNode
                            : FreedOn::kOwnNode;
  if (g_counting) CountFree(p, where);
  if (where == FreedOn::kOtherNode) return front_end::FreeRemote(p);
  front_end::FreeSlow(cls, p, node);
}

void DoubleFree(const char* who, void* p) noexcept {
  RawBuffer b;
  b.Str("cidmalloc: ").Str(who).Str(": double free of ");
  b.Hex(reinterpret_cast<uintptr_t>(p)).Ch('\n');
  b.WriteTo(2);
  abort();
}

void InvalidPointer(const char* who, void* p) noexcept {
  os::FatalMisuse(who, p);
}

namespace {
[[noreturn]] void Fatal(const char* who, void* p) {
  InvalidPointer(who, p);
  __builtin_unreachable();
}
}  // namespace

size_t UsableSize(const char* who, void* ptr) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  // The span map first, as free() does: a small object needs no chunk.
  const int cls = central::ClassOfAddress(p);
  if (cls != 0) {
    if (!central::IsObjectStart(p, cls)) Fatal(who, ptr);
    if (static_cast<uintptr_t*>(ptr)[1] == FreeMark(p, g_state)) {
      DoubleFree(who, ptr);
    }
    return central::Class(cls).size;
  }
  page_heap::ChunkInfo* chunk = page_heap::LookupChunk(p);
  if (chunk == nullptr) Fatal(who, ptr);
  const size_t n = page_heap::LargeUsableSize(chunk, p);
  if (n == 0) Fatal(who, ptr);
  // A run in an ID's run stack is live to the page heap, freed to the
  // program.
  if (n <= kMaxCachedRunBytes && front_end::IsCachedRun(ptr)) {
    DoubleFree(who, ptr);
  }
  return n;
}

void* AllocAligned(size_t align, size_t size) {
  if ((align & (align - 1)) != 0) {
    // Not a power of two: the next one up, as glibc's memalign does (and
    // for operator new's undefined case); posix_memalign and aligned_alloc
    // reject such alignments before they get here.
    if (align > (SIZE_MAX >> 1)) {
      errno = ENOMEM;
      return nullptr;
    }
    align = size_t{1} << (64 - __builtin_clzll(align));
  }
  if (align <= central::kMinAlign) return Alloc(size);
  if (size <= central::kMaxSmallSize && align <= central::kMaxSmallSize) {
    // A class whose size is a multiple of `align` has every object aligned
    // (spans are aligned to their power-of-two size, which is >= align
    // whenever size is a multiple of align); the first such class is at
    // least max(size, align).  A mask, not `%`: a division per class
    // walked made posix_memalign(65536, 1000) take 160 ns.
    const size_t from = size > align ? size : align;
    for (int cls = central::ClassOf(from); cls < central::kNumClasses; ++cls) {
      const central::SizeClassInfo& c = central::Class(cls);
      if ((c.size & (align - 1)) == 0 && c.span_bytes >= align) {
        return AllocSmall(cls);
      }
    }
  }
  return AllocLarge(size, align, Fill::kAny);
}

}  // namespace cidmalloc::api
