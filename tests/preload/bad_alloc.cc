// tests/preload/bad_alloc.cc: operator new's failure paths in a C++ program
// that preloads libcidmalloc.so (not linked with it), whose references to
// libstdc++ are weak (allocator/api/new_delete.cc).  Prints one line per
// case; preload_deps_test.sh compares them with the expected ones.
#include <stdint.h>
#include <stdio.h>

#include <new>

namespace {
int g_handler_calls = 0;
}  // namespace

int main() {
  // An impossible size: the handler-less throwing form throws bad_alloc.
  volatile size_t huge = SIZE_MAX / 4;
  try {
    char* p = new char[huge];
    printf("new[] returned %p\n", static_cast<void*>(p));
  } catch (const std::bad_alloc& e) {
    printf("new[]: caught %s\n", e.what());
  }
  // A new-handler that gives up by throwing: the throwing form retries
  // until then and lets the exception through ...
  std::set_new_handler([] {
    if (++g_handler_calls % 3 == 0) throw std::bad_alloc();
  });
  try {
    void* p = ::operator new(huge);
    printf("operator new returned %p\n", p);
  } catch (const std::bad_alloc&) {
    printf("operator new: caught bad_alloc after %d handler calls\n",
           g_handler_calls);
  }
  // ... and the nothrow form returns null instead.
  g_handler_calls = 0;
  void* q = ::operator new(huge, std::nothrow);
  printf("nothrow: %s after %d handler calls\n", q ? "non-null" : "null",
         g_handler_calls);
  std::set_new_handler(nullptr);
  // And ordinary allocations work.
  int* x = new int(42);
  printf("new int: %d\n", *x);
  delete x;
  return 0;
}
