// allocator/api/new_delete.cc: every replaceable operator new and delete.
//
// Throwing forms call the new-handler and retry, then throw std::bad_alloc,
// as [new.delete.single] requires; nothrow forms return nullptr instead.
// Sized deletes need no size (the pagemap knows it), so they free directly.
#include <cstddef>
#include <new>

#include "allocator/api/alloc.h"

namespace {

using cidmalloc::api::Alloc;
using cidmalloc::api::AllocAligned;
using cidmalloc::api::Free;

enum class OnFailure { kThrow, kReturnNull };

template <OnFailure kFailure>
CIDMALLOC_NOINLINE void* NewSlow(std::size_t size, std::size_t align) {
  for (;;) {
    void* p = align == 0 ? Alloc(size) : AllocAligned(align, size);
    if (p != nullptr) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) {
      if constexpr (kFailure == OnFailure::kThrow) {
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

inline void* New(std::size_t size) {
  void* p = Alloc(size);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return NewSlow<OnFailure::kThrow>(size, 0);
}

inline void* NewNothrow(std::size_t size) noexcept {
  void* p = Alloc(size);
  if (__builtin_expect(p != nullptr, 1)) return p;
  return NewSlow<OnFailure::kReturnNull>(size, 0);
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

#define CIDMALLOC_NEW_EXPORT __attribute__((visibility("default")))

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
