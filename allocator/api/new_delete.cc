// allocator/api/new_delete.cc: every replaceable operator new and delete.
//
// Throwing forms call the new-handler and retry, then throw std::bad_alloc,
// as [new.delete.single] requires; nothrow forms return nullptr instead.
// Sized deletes need no size (the span map knows it), so they free directly
// (api/alloc.h, Free: a push at the size's stack was slower).
//
// Built twice (allocator/api/BUILD).  With CIDMALLOC_WEAK_LIBSTDCXX, for
// libcidmalloc.so, libstdc++ is not a dependency: loading it would cost
// every preloaded C program about 1 ms of start-up and 1 MB of RSS (docs/
// benchmarks/tuning_log.md).  This file is the only one that needs it (the
// other layers are built with -fno-exceptions), for the new-handler and for
// throwing and catching std::bad_alloc, and there its references are weak.
// A C++ program has libstdc++ loaded, so they resolve to it.  In a program
// without it nothing calls operator new, unless it loads a C++ library
// later; then a failed operator new reports and aborts instead of
// throwing.  Without the define (static linking) the references are
// strong, so that a static libstdc++ supplies them.
#include <cstddef>
#include <new>

#include "allocator/api/alloc.h"
#include "allocator/os/check.h"

#ifdef CIDMALLOC_WEAK_LIBSTDCXX
// Every libstdc++ symbol this object refers to
// (//tests/preload:preload_deps_test checks that libcidmalloc.so needs
// nothing but libc, and what operator new does with and without it).
__asm__(
    ".weak _ZSt15get_new_handlerv\n\t"
    ".weak __cxa_allocate_exception\n\t"
    ".weak __cxa_throw\n\t"
    ".weak __cxa_begin_catch\n\t"
    ".weak __cxa_end_catch\n\t"
    ".weak __gxx_personality_v0\n\t"
    ".weak _Unwind_Resume\n\t"
    ".weak _ZTISt9bad_alloc\n\t"
    ".weak _ZTVSt9bad_alloc\n\t"
    ".weak _ZNSt9bad_allocD1Ev");

// Redeclared weak, so that its address is not assumed non-null.
namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
}  // namespace std
#endif

namespace {

// libstdc++ is loaded (all of the symbols above come with it).
bool HaveLibstdcxx() {
#ifdef CIDMALLOC_WEAK_LIBSTDCXX
  return &std::get_new_handler != nullptr;
#else
  return true;
#endif
}

using cidmalloc::api::Alloc;
using cidmalloc::api::AllocAligned;
using cidmalloc::api::Free;

enum class OnFailure { kThrow, kReturnNull };

template <OnFailure kFailure>
CIDMALLOC_NOINLINE void* NewSlow(std::size_t size, std::size_t align) {
  for (;;) {
    void* p = align == 0 ? Alloc(size) : AllocAligned(align, size);
    if (p != nullptr) return p;
    std::new_handler handler =
        HaveLibstdcxx() ? std::get_new_handler() : nullptr;
    if (handler == nullptr) {
      if constexpr (kFailure == OnFailure::kThrow) {
        if (!HaveLibstdcxx()) {
          cidmalloc::os::Fatal(
              "operator new: out of memory, and no libstdc++ loaded to "
              "throw std::bad_alloc");
        }
        throw std::bad_alloc();
      } else {
        return nullptr;
      }
    }
    if constexpr (kFailure == OnFailure::kThrow) {
      handler();
    } else {
      try {
        handler();
      } catch (...) {
        return nullptr;
      }
    }
  }
}

// A miss of the inline pop: Alloc's whole path (a multi-node machine's
// node-qualified pop, none mode's soft-ID pop, refills, large sizes), then
// the new-handler loop only if that fails.  Apart from NewSlow, whose
// frame (the loop, the handler's try/catch) cost a multi-node machine's
// operator new 20 % when its qualified pop went through it.
template <OnFailure kFailure>
CIDMALLOC_NOINLINE void* NewMiss(std::size_t size) {
  void* p = Alloc(size);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return NewSlow<kFailure>(size, 0);
}

// The cache pop inline; anything else (a miss, a large size, the
// new-handler) out of line, reached by a tail call, so that the fast path
// keeps nothing live across a call and needs no stack frame.
inline void* New(std::size_t size) {
  void* p;
  if (__builtin_expect(cidmalloc::api::TryAllocCached(size, &p), 1)) return p;
  return NewMiss<OnFailure::kThrow>(size);
}

inline void* NewNothrow(std::size_t size) noexcept {
  void* p;
  if (__builtin_expect(cidmalloc::api::TryAllocCached(size, &p), 1)) return p;
  return NewMiss<OnFailure::kReturnNull>(size);
}

inline void* NewAligned(std::size_t size, std::align_val_t align) {
  return NewSlow<OnFailure::kThrow>(size, static_cast<std::size_t>(align));
}

inline void* NewAlignedNothrow(std::size_t size,
                               std::align_val_t align) noexcept {
  return NewSlow<OnFailure::kReturnNull>(size,
                                         static_cast<std::size_t>(align));
}

}  // namespace

// Each operator starts on a cache line, as malloc and free do
// (CIDMALLOC_HOT_ENTRY, alloc.h): unaligned, cpu mode's sections (placed
// after the ret) made operator new and sized delete 1.3-1.5x slower than
// with the same instructions aligned (docs/benchmarks/tuning_log.md).
#define CIDMALLOC_NEW_EXPORT \
  __attribute__((visibility("default"))) CIDMALLOC_HOT_ENTRY

CIDMALLOC_NEW_EXPORT void* operator new(std::size_t n) { return New(n); }
CIDMALLOC_NEW_EXPORT void* operator new[](std::size_t n) { return New(n); }
CIDMALLOC_NEW_EXPORT void* operator new(std::size_t n,
                                        const std::nothrow_t&) noexcept {
  return NewNothrow(n);
}
CIDMALLOC_NEW_EXPORT void* operator new[](std::size_t n,
                                          const std::nothrow_t&) noexcept {
  return NewNothrow(n);
}
CIDMALLOC_NEW_EXPORT void* operator new(std::size_t n, std::align_val_t a) {
  return NewAligned(n, a);
}
CIDMALLOC_NEW_EXPORT void* operator new[](std::size_t n, std::align_val_t a) {
  return NewAligned(n, a);
}
CIDMALLOC_NEW_EXPORT void* operator new(std::size_t n, std::align_val_t a,
                                        const std::nothrow_t&) noexcept {
  return NewAlignedNothrow(n, a);
}
CIDMALLOC_NEW_EXPORT void* operator new[](std::size_t n, std::align_val_t a,
                                          const std::nothrow_t&) noexcept {
  return NewAlignedNothrow(n, a);
}

CIDMALLOC_NEW_EXPORT void operator delete(void* p) noexcept { Free(p); }
CIDMALLOC_NEW_EXPORT void operator delete[](void* p) noexcept { Free(p); }
CIDMALLOC_NEW_EXPORT void operator delete(void* p,
                                          const std::nothrow_t&) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete[](void* p,
                                            const std::nothrow_t&) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete(void* p, std::size_t) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete[](void* p, std::size_t) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete(void* p, std::align_val_t) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete[](void* p,
                                            std::align_val_t) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete(void* p, std::align_val_t,
                                          const std::nothrow_t&) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete[](void* p, std::align_val_t,
                                            const std::nothrow_t&) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete(void* p, std::size_t,
                                          std::align_val_t) noexcept {
  Free(p);
}
CIDMALLOC_NEW_EXPORT void operator delete[](void* p, std::size_t,
                                            std::align_val_t) noexcept {
  Free(p);
}
