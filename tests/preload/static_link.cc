// tests/preload/static_link.cc: a binary statically linked with cidmalloc
// through Bazel's malloc attribute (cc_binary(malloc = "//:cidmalloc")).
//
// Checks that malloc, calloc, realloc, operator new and free are
// cidmalloc's (the heap statistics see them) and prints
//   mode MODE registration REG slabs N
// for the shell test to check against CIDMALLOC_RSEQ_MODE.  Exits 0 when
// every check passed, 1 otherwise.
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memory>
#include <string>
#include <vector>

#include "allocator/api/cidmalloc.h"

namespace {

int g_failures = 0;

void Expect(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "static_link: FAILED: %s\n", what);
    ++g_failures;
  }
}

}  // namespace

int main() {
  struct cidmalloc_stats before;
  Expect(cidmalloc_get_stats(&before) == 0, "cidmalloc_get_stats() == 0");

  // A few hundred objects of assorted sizes, small and large, written and
  // read back.
  std::vector<void*> blocks;
  for (int i = 0; i < 400; ++i) {
    const size_t size = static_cast<size_t>(1 + (i * 37) % 3000) +
                        (i % 50 == 0 ? 300000 : 0);
    unsigned char* p = static_cast<unsigned char*>(
        i % 3 == 0 ? calloc(1, size) : malloc(size));
    Expect(p != nullptr, "allocation");
    if (p == nullptr) continue;
    if (i % 3 == 0) Expect(p[size - 1] == 0, "calloc zeroes");
    memset(p, i & 0xff, size);
    Expect(malloc_usable_size(p) >= size, "malloc_usable_size >= size");
    blocks.push_back(p);
  }
  for (size_t i = 0; i < blocks.size(); i += 2) {
    void* q = realloc(blocks[i], 5000);
    Expect(q != nullptr, "realloc");
    if (q != nullptr) blocks[i] = q;
  }
  {
    auto s = std::make_unique<std::string>(1000, 'x');
    std::vector<std::string> v(100, *s);
    Expect(v[99].size() == 1000, "operator new");
  }

  struct cidmalloc_stats during;
  cidmalloc_get_stats(&during);
  for (void* p : blocks) free(p);

  struct cidmalloc_stats after;
  cidmalloc_get_stats(&after);

  Expect(after.mode != nullptr && after.mode[0] != '\0', "mode is set");
  Expect(after.registration != nullptr && after.registration[0] != '\0',
         "registration is set");
  Expect(after.num_nodes >= 1, "at least one node");
  Expect(after.slabs >= 1, "this thread touched a slab");
  uint64_t mapped = 0;
  for (unsigned n = 0; n < after.num_nodes && n < CIDMALLOC_MAX_NODES; ++n) {
    mapped += after.node_mapped[n];
  }
  // 8 blocks of 300 KB are live at once: the heap must have mapped them.
  Expect(mapped >= 8 * 300000, "the heap mapped the large blocks");
  if (after.counting) {
    Expect(during.mallocs >= before.mallocs + 400, "mallocs counted");
    Expect(after.frees >= during.frees + 400, "frees counted");
  }

  printf("mode %s registration %s slabs %u counting %d mallocs %llu\n",
         after.mode ? after.mode : "(null)",
         after.registration ? after.registration : "(null)", after.slabs,
         after.counting, static_cast<unsigned long long>(after.mallocs));
  if (g_failures != 0) {
    printf("static_link: %d check(s) failed\n", g_failures);
    return 1;
  }
  return 0;
}
