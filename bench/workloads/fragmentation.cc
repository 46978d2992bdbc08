// fragmentation: how much memory an allocator keeps after a fragmenting
// pattern, and how much it gives back (bench/workloads/README.md).
//
//   1. allocate about 1 GiB (--quick: 50 MiB) in mixed sizes, about a third
//      of the bytes each in small (16-512 B), medium (513 B-64 KiB) and
//      large (64 KiB-4 MiB) objects, every byte written;
//   2. free a random 90 % of them, leaving the survivors scattered;
//   3. allocate about half as much again in different sizes (24-768 B,
//      769 B-96 KiB, 96 KiB-6 MiB);
//   4. free everything and call malloc_trim(0).
//
// Prints "metric rss_peak_kb=" (VmHWM) and "metric rss_end_kb=" (VmRSS after
// step 4), and the RSS after steps 2 and 3 and before the trim.  The object
// table lives in its own mmap, outside the allocator's heap, and is unmapped
// before the last measurement.  Every object is checked before it is freed
// (a word at each end and a byte in the middle).
//
//   --quick   50 MiB instead of 1 GiB
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;

struct Obj {
  char* p;
  uint32_t size;
  uint32_t id;
};

struct SizeMix {
  uint64_t small_lo, small_hi;
  uint64_t medium_lo, medium_hi;
  uint64_t large_lo, large_hi;
};

// Per 10,000 objects: 9,896 small, 103 medium, 1 large, which gives each
// class about a third of the bytes (log-uniform sizes; the means are about
// 143 B, 13.7 KiB and 1 MiB).
constexpr SizeMix kFirst = {16, 512, 513, 64 << 10, (64 << 10) + 1, 4 << 20};
constexpr SizeMix kSecond = {24, 768, 769, 96 << 10, (96 << 10) + 1,
                             6 << 20};

size_t PickSize(wl::Rng& rng, const SizeMix& mix) {
  uint64_t u = rng.Below(10000);
  if (u < 9896) return rng.LogRange(mix.small_lo, mix.small_hi);
  if (u < 9999) return rng.LogRange(mix.medium_lo, mix.medium_hi);
  return rng.LogRange(mix.large_lo, mix.large_hi);
}

class Table {
 public:
  explicit Table(size_t max) : max_(max) {
    bytes_ = max * sizeof(Obj);
    void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) Fail("mmap of the object table failed");
    objs_ = static_cast<Obj*>(m);
  }
  ~Table() { munmap(objs_, bytes_); }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  Obj* objs() { return objs_; }
  size_t max() const { return max_; }

 private:
  Obj* objs_;
  size_t max_;
  size_t bytes_;
};

struct Counters {
  uint64_t allocs = 0;
  uint64_t frees = 0;
  uint64_t alloc_sum = 0;
  uint64_t free_sum = 0;
  uint64_t live_bytes = 0;
};

inline unsigned char FillByte(uint32_t id) {
  return static_cast<unsigned char>(0x11 + id * 7);
}

void NewObject(Obj* o, size_t size, uint32_t id, Counters& c) {
  char* p = static_cast<char*>(malloc(size));
  if (p == nullptr) Fail("malloc(%zu) returned NULL", size);
  memset(p, FillByte(id), size);
  uint64_t w = wl::Mix64(id);
  wl::StoreWord(p, 0, w);
  wl::StoreWord(p, size - 8, ~w);
  o->p = p;
  o->size = static_cast<uint32_t>(size);
  o->id = id;
  c.allocs++;
  c.alloc_sum += wl::IdSum(id);
  c.live_bytes += size;
}

void FreeObject(Obj* o, Counters& c) {
  uint64_t w = wl::Mix64(o->id);
  if (wl::LoadWord(o->p, 0) != w || wl::LoadWord(o->p, o->size - 8) != ~w) {
    Fail("object %u at %p (%u bytes): end words corrupt", o->id,
         static_cast<void*>(o->p), o->size);
  }
  if (o->size >= 24 && static_cast<unsigned char>(o->p[o->size / 2]) !=
                           FillByte(o->id)) {
    Fail("object %u at %p (%u bytes): middle byte corrupt", o->id,
         static_cast<void*>(o->p), o->size);
  }
  free(o->p);
  o->p = nullptr;
  c.frees++;
  c.free_sum += wl::IdSum(o->id);
  c.live_bytes -= o->size;
}

// Allocates objects from `mix` until `bytes` have been allocated; appends
// them at table[*n...].
void AllocatePhase(Table& t, size_t* n, uint64_t bytes, const SizeMix& mix,
                   wl::Rng& rng, Counters& c) {
  uint64_t done = 0;
  while (done < bytes) {
    if (*n == t.max()) Fail("object table full");
    size_t size = PickSize(rng, mix);
    NewObject(&t.objs()[*n], size, static_cast<uint32_t>(*n), c);
    ++*n;
    done += size;
  }
}

void PrintRss(const char* key) {
  printf("metric %s=%ld\n", key, wl::StatusKb("VmRSS"));
}

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "fragmentation";
  wl::Args args(argc, argv, "");
  const uint64_t first_bytes =
      args.quick() ? uint64_t{50} << 20 : uint64_t{1} << 30;
  const uint64_t second_bytes = first_bytes / 2;

  double t0 = wl::NowSeconds();
  long rss_start = wl::StatusKb("VmRSS");
  Counters c;
  wl::Rng rng(7000);
  size_t n = 0;
  {
    // About 2.5 M objects per GiB of the first phase and 0.9 M for the
    // second; room for 16 M per GiB (only the part used is touched).
    Table table(static_cast<size_t>((first_bytes >> 30) + 1) * 16'000'000);
    AllocatePhase(table, &n, first_bytes, kFirst, rng, c);
    const size_t first_n = n;
    PrintRss("rss_phase1_kb");

    size_t survivors = 0;
    for (size_t i = 0; i < first_n; ++i) {
      if (rng.Chance(9, 10)) {
        FreeObject(&table.objs()[i], c);
      } else {
        ++survivors;
      }
    }
    PrintRss("rss_after_free90_kb");

    AllocatePhase(table, &n, second_bytes, kSecond, rng, c);
    PrintRss("rss_phase3_kb");
    printf("metric live_mib_phase3=%.1f\n",
           static_cast<double>(c.live_bytes) / (1 << 20));

    for (size_t i = 0; i < n; ++i) {
      if (table.objs()[i].p != nullptr) FreeObject(&table.objs()[i], c);
    }
    printf("metric first_objects=%zu\n", first_n);
    printf("metric survivors=%zu\n", survivors);
  }  // unmaps the table
  PrintRss("rss_before_trim_kb");
  malloc_trim(0);
  double secs = wl::NowSeconds() - t0;
  long peak = wl::StatusKb("VmHWM");
  long end = wl::StatusKb("VmRSS");

  if (c.allocs != n || c.frees != n || c.live_bytes != 0) {
    Fail("allocated %llu, freed %llu of %zu objects, %llu bytes live",
         static_cast<unsigned long long>(c.allocs),
         static_cast<unsigned long long>(c.frees), n,
         static_cast<unsigned long long>(c.live_bytes));
  }
  if (c.alloc_sum != c.free_sum) {
    Fail("checksum of freed objects 0x%016llx != allocated 0x%016llx",
         static_cast<unsigned long long>(c.free_sum),
         static_cast<unsigned long long>(c.alloc_sum));
  }
  if (peak < 0 || end < 0) Fail("cannot read VmHWM / VmRSS");
  printf("metric rss_start_kb=%ld\n", rss_start);
  printf("metric rss_peak_kb=%ld\n", peak);
  printf("metric rss_end_kb=%ld\n", end);
  wl::Ok(secs, "objects=%zu rss_peak_kb=%ld rss_end_kb=%ld checksum=%016llx",
         n, peak, end, static_cast<unsigned long long>(c.alloc_sum));
  return 0;
}
