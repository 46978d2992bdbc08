// micro: single-threaded malloc/free loops (bench/workloads/README.md).
//
//   --case=fixed   malloc(64) / free pairs
//   --case=random  malloc / free pairs of random sizes in [8, 1024]
//   --case=batch   allocate 1,000 objects of random sizes in [8, 1024],
//                  then free all of them; repeat
//
// Every object gets a cookie in its first and last word; both are read back
// (through an opaque barrier, so the compiler cannot drop the malloc/free
// pair or the stores) and checked before the object is freed.  The values
// read are folded into a checksum that must equal the one computed from
// the cookies alone.
#include <stdint.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;
using wl::LoadWord;
using wl::StoreWord;

constexpr size_t kTableSize = 1 << 16;  // random sizes, reused cyclically
constexpr size_t kBatch = 1000;

struct Result {
  uint64_t ops = 0;       // malloc/free pairs
  uint64_t sum = 0;       // folded from memory
  uint64_t expected = 0;  // folded from the cookies
};

inline uint64_t Cookie(uint64_t i) { return (i + 1) * 0x9e3779b97f4a7c15ULL; }

// Writes the cookie into the first word of a `size`-byte object and, if
// the two do not overlap, into its last word.
inline void Put(char* p, size_t size, uint64_t c) {
  StoreWord(p, 0, c);
  if (size >= 16) StoreWord(p, size - 8, c);
}

inline uint64_t Take(const char* p, size_t size, uint64_t c) {
  uint64_t a = LoadWord(p, 0);
  uint64_t b = size >= 16 ? LoadWord(p, size - 8) : c;
  if (a != c || b != c) {
    Fail("object %p (size %zu): cookie 0x%016llx / 0x%016llx, expected "
         "0x%016llx", static_cast<const void*>(p), size,
         static_cast<unsigned long long>(a),
         static_cast<unsigned long long>(b),
         static_cast<unsigned long long>(c));
  }
  return a + (b >> 1);
}

inline char* Alloc(size_t size) {
  char* p = static_cast<char*>(malloc(size));
  if (p == nullptr) Fail("malloc(%zu) returned NULL", size);
  if ((reinterpret_cast<uintptr_t>(p) & (size >= 16 ? 15 : 7)) != 0) {
    Fail("malloc(%zu) returned misaligned %p", size, static_cast<void*>(p));
  }
  return p;
}

Result RunFixed(uint64_t iters) {
  constexpr size_t kSize = 64;
  Result r;
  for (uint64_t i = 0; i < iters; ++i) {
    uint64_t c = Cookie(i);
    char* p = Alloc(kSize);
    Put(p, kSize, c);
    wl::Escape(p);
    r.sum += Take(p, kSize, c);
    r.expected += c + (c >> 1);
    free(p);
  }
  r.ops = iters;
  return r;
}

std::vector<uint32_t> SizeTable() {
  wl::Rng rng(1);
  std::vector<uint32_t> t(kTableSize);
  for (auto& s : t) s = static_cast<uint32_t>(rng.Range(8, 1024));
  return t;
}

Result RunRandom(uint64_t iters) {
  std::vector<uint32_t> sizes = SizeTable();
  Result r;
  for (uint64_t i = 0; i < iters; ++i) {
    size_t size = sizes[i & (kTableSize - 1)];
    uint64_t c = Cookie(i);
    char* p = Alloc(size);
    Put(p, size, c);
    wl::Escape(p);
    r.sum += Take(p, size, c);
    r.expected += c + (c >> 1);
    free(p);
  }
  r.ops = iters;
  return r;
}

Result RunBatch(uint64_t rounds) {
  std::vector<uint32_t> sizes = SizeTable();
  std::vector<char*> ptrs(kBatch);
  Result r;
  uint64_t n = 0;  // objects allocated so far
  for (uint64_t round = 0; round < rounds; ++round) {
    uint64_t first = n;
    for (size_t j = 0; j < kBatch; ++j, ++n) {
      size_t size = sizes[n & (kTableSize - 1)];
      char* p = Alloc(size);
      Put(p, size, Cookie(n));
      ptrs[j] = p;
    }
    wl::Escape(ptrs.data());
    // Free in allocation order, checking that no later object overwrote an
    // earlier one.
    for (size_t j = 0; j < kBatch; ++j) {
      uint64_t k = first + j;
      uint64_t c = Cookie(k);
      r.sum += Take(ptrs[j], sizes[k & (kTableSize - 1)], c);
      r.expected += c + (c >> 1);
      free(ptrs[j]);
    }
  }
  r.ops = n;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "micro";
  wl::Args args(argc, argv, "case");
  std::string which = args.GetChoice("case", "fixed random batch", "fixed");

  // Full sizes give 2-4 s under glibc malloc on the 2-vCPU reference
  // machine; --quick does 1/20 of the work.
  uint64_t work = 0;
  if (which == "fixed") work = 150'000'000;
  if (which == "random") work = 120'000'000;
  if (which == "batch") work = 40'000;  // rounds of kBatch objects
  if (args.quick()) work /= 20;

  double t0 = wl::NowSeconds();
  Result r;
  if (which == "fixed") r = RunFixed(work);
  if (which == "random") r = RunRandom(work);
  if (which == "batch") r = RunBatch(work);
  double secs = wl::NowSeconds() - t0;

  if (r.sum != r.expected) {
    Fail("checksum 0x%016llx, expected 0x%016llx",
         static_cast<unsigned long long>(r.sum),
         static_cast<unsigned long long>(r.expected));
  }
  printf("metric ns_per_op=%.2f\n", secs * 1e9 / static_cast<double>(r.ops));
  wl::Ok(secs, "case=%s ops=%llu checksum=%016llx", which.c_str(),
         static_cast<unsigned long long>(r.ops),
         static_cast<unsigned long long>(r.sum));
  return 0;
}
