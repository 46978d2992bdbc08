// allocator/central/size_classes.h: the size-class table.
//
// Classes 1..kNumClasses-1 are small objects; class 0 means "not a small
// object" (large allocation or not ours).  Sizes are fine-grained at the
// small end: every 16 bytes up to 128, then 8 classes per power of two up
// to kMaxSmallSize, and one class for 1 KiB and a header (internal::
// ClassSize), so no size above 128 bytes wastes more than 1/9 of its
// object (tests/allocator/size_class_test prints the table).
//
// A small-object span is a power-of-two number of bytes, aligned to its
// size, holding objects of one class laid out from its start.  So for an
// object pointer p:  span base = p & ~span_mask,  and p is a valid object
// start iff (p - base) is a multiple of size below limit, which one
// multiplication and one comparison decide (IsObjectStart below, after
// Lemire's divisibility test).
#ifndef CIDMALLOC_ALLOCATOR_CENTRAL_SIZE_CLASSES_H_
#define CIDMALLOC_ALLOCATOR_CENTRAL_SIZE_CLASSES_H_

#include <stddef.h>
#include <stdint.h>

namespace cidmalloc::central {

inline constexpr size_t kMinAlign = 16;
inline constexpr size_t kMaxSmallSize = 128 * 1024;
inline constexpr int kNumClasses = 90;  // Including class 0.
// The most objects moved in one batch between a front-end cache and a
// central list (SizeClassInfo::batch); callers size batch buffers with it.
inline constexpr uint32_t kMaxBatch = 32;

struct SizeClassInfo {
  uint32_t size;         // Object size in bytes (multiple of 16).
  uint32_t span_bytes;   // Power of two in [64 KiB, 2 MiB].
  uint32_t limit;        // objects_per_span * size.
  uint16_t batch;        // Objects moved per front-end <-> central transfer.
  uint16_t max_capacity; // The most objects a front-end stack holds.
};

// 1 KiB and a header of up to 16 bytes: a class of its own.  sqlite3's
// 1032-byte blocks took 1152 bytes each (87,401 of them live at the bench
// runner's peak: its peak RSS 1.10x glibc's, 1.04x with this class;
// docs/benchmarks/tuning_log.md).
inline constexpr uint32_t kKiBAndHeader = 1024 + 16;

// The two indexes from a size to its class: sizes up to kMaxSmallIndexed
// by 16-byte steps, larger ones (to kMaxSmallSize) by 128-byte steps.  An
// entry names the class of the largest size that maps to it, the smallest
// class at least that large.  The first reaches kKiBAndHeader: the
// second's 128-byte steps cannot tell it from 1152.
inline constexpr size_t kMaxSmallIndexed = kKiBAndHeader;
constexpr size_t SmallIndexOf(size_t size) { return (size + 15) >> 4; }
constexpr size_t LargeIndexOf(size_t size) { return (size + 127) >> 7; }
inline constexpr size_t kSmallIndexEntries = SmallIndexOf(kMaxSmallIndexed) + 1;
inline constexpr size_t kLargeIndexEntries = LargeIndexOf(kMaxSmallSize) + 1;

namespace internal {

// The class after 1 KiB's: kKiBAndHeader; the doublings' steps resume
// after it.
inline constexpr int kKiBAndHeaderClass = 33;
constexpr uint32_t ClassSize(int cls) {
  if (cls <= 8) return static_cast<uint32_t>(cls * 16);
  if (cls == kKiBAndHeaderClass) return kKiBAndHeader;
  if (cls > kKiBAndHeaderClass) --cls;
  const int k = 7 + (cls - 9) / 8;  // Doubling [2^k, 2^(k+1)].
  const int j = 1 + (cls - 9) % 8;
  return (1u << k) + static_cast<uint32_t>(j) * (1u << (k - 3));
}
static_assert(ClassSize(kKiBAndHeaderClass - 1) == 1024);

constexpr SizeClassInfo MakeClass(int cls) {
  SizeClassInfo c{};
  if (cls == 0) return c;
  c.size = ClassSize(cls);
  uint32_t span = 64 * 1024;
  // At least 8 objects, and at most 1/32 of the span left over at its end;
  // above 64 KiB at least 4 and at most 1/16 (spans of 512 KiB to 2 MiB).
  // A span goes back to the page heap only once all its objects are free:
  // with 8 objects and 1/32 (spans of 1-2 MiB) realloc_growth's peak RSS
  // was 1.09x and the fragmentation workload's 1.02x what they were before
  // these classes existed (as page runs), with these 1.02x and 0.98x.
  const bool big = c.size > 64 * 1024;
  const uint32_t min_objects = big ? 4 : 8;
  const uint32_t max_waste_share = big ? 16 : 32;
  while (span < (2u << 20) && (span / c.size < min_objects ||
                               (span % c.size) * max_waste_share > span)) {
    span *= 2;
  }
  c.span_bytes = span;
  c.limit = (span / c.size) * c.size;
  // 16 KiB of objects a batch (32 at most, 2 at least): 32 KiB batches
  // held 0.5-1.2 MB more in the caches of small two-thread programs for no
  // measurable speed (docs/benchmarks/tuning_log.md).
  uint32_t batch = 16 * 1024 / c.size;
  batch = batch < 2 ? 2 : (batch > kMaxBatch ? kMaxBatch : batch);
  c.batch = static_cast<uint16_t>(batch);
  // A front-end stack may grow (with demand, within CIDMALLOC_CACHE_BYTES,
  // which bounds the ID's whole cache) to 1 MiB of objects, 8192 at most
  // (gperftools' longest thread-cache list), and at least 4 batches and 8
  // objects: a thread that keeps thousands of objects of a class in flight
  // (allocate them, free them all) then stays in its cache instead of going
  // through the central list a batch at a time, which cost 2.4x a pair at
  // 64 KiB / 1024 (docs/benchmarks/tuning_log.md).
  uint32_t cap = 1024 * 1024 / c.size;
  cap = cap > 8192 ? 8192 : cap;
  if (cap < 4 * batch) cap = 4 * batch;
  c.max_capacity = static_cast<uint16_t>(cap < 8 ? 8 : cap);
  return c;
}

struct ClassTable {
  SizeClassInfo info[kNumClasses];
  uint8_t small_index[kSmallIndexEntries];  // SmallIndexOf(size)
  uint8_t large_index[kLargeIndexEntries];  // LargeIndexOf(size)
};

constexpr ClassTable MakeTable() {
  ClassTable t{};
  for (int c = 0; c < kNumClasses; ++c) t.info[c] = MakeClass(c);
  int c = 1;
  for (uint32_t i = 0; i < kSmallIndexEntries; ++i) {
    const uint32_t size = i * 16;
    while (t.info[c].size < size) ++c;
    t.small_index[i] = static_cast<uint8_t>(c);
  }
  c = 1;
  for (uint32_t i = 0; i < kLargeIndexEntries; ++i) {
    const uint32_t size = i * 128;
    while (t.info[c].size < size) ++c;
    t.large_index[i] = static_cast<uint8_t>(c);
  }
  return t;
}

}  // namespace internal

inline constexpr internal::ClassTable kClasses = internal::MakeTable();
static_assert(internal::ClassSize(kNumClasses - 1) == kMaxSmallSize);

constexpr const SizeClassInfo& Class(int cls) { return kClasses.info[cls]; }

// The class of a request of `size` bytes (size <= kMaxSmallSize).  malloc(0)
// gets the smallest class.
constexpr int ClassOf(size_t size) {
  if (size <= kMaxSmallIndexed) return kClasses.small_index[SmallIndexOf(size)];
  return kClasses.large_index[LargeIndexOf(size)];
}

// free()'s object-start test, one multiplication and one comparison: for
// an offset `off` in the span, off * magic (mod 2^64) is j * e for the
// start of object j, where e = size * magic - 2^64 is in [1, size], and at
// least magic (about 2^64 / size, far above any j * e) for any other
// offset.  So off is the start of one of the span's `objects` objects iff
// off * magic < objects * e.  magic is floor(2^64 / size) + 1, so that e
// is not 0 for a power-of-two size.
struct ObjectStartCheck {
  uint64_t magic;
  uint32_t span_mask;  // span_bytes - 1
  uint32_t bound;      // objects * e
};

constexpr ObjectStartCheck MakeObjectStartCheck(const SizeClassInfo& c) {
  ObjectStartCheck k{};
  if (c.size == 0) return k;  // Class 0: bound 0, nothing is a start.
  k.magic = ~uint64_t{0} / c.size + 1 + ((c.size & (c.size - 1)) == 0 ? 1 : 0);
  const uint64_t e = uint64_t{c.size} * k.magic;  // mod 2^64
  k.span_mask = c.span_bytes - 1;
  k.bound = static_cast<uint32_t>((c.limit / c.size) * e);
  return k;
}

// The entries in three arrays of 8-byte elements, so that free() indexes
// them with the class scaled by 8 in the address, from one base register,
// and uses each as a memory operand: `and`, `imul`, and the comparison
// with the bound (a 16-byte entry needed a shift and an add first, and a
// 32-bit bound a load of its own).
struct ObjectStartTable {
  uint64_t magic[kNumClasses];
  uint64_t span_mask[kNumClasses];
  uint64_t bound[kNumClasses];
  constexpr ObjectStartCheck Check(int cls) const {
    return {magic[cls], static_cast<uint32_t>(span_mask[cls]),
            static_cast<uint32_t>(bound[cls])};
  }
};
constexpr ObjectStartTable MakeObjectStartTable() {
  ObjectStartTable t{};
  for (int c = 0; c < kNumClasses; ++c) {
    const ObjectStartCheck k = MakeObjectStartCheck(kClasses.info[c]);
    t.magic[c] = k.magic;
    t.span_mask[c] = k.span_mask;
    t.bound[c] = k.bound;
  }
  return t;
}
inline constexpr ObjectStartTable kObjectStarts = MakeObjectStartTable();

// True iff p is the start of an object of class `cls` in its span.  Never
// for class 0 (bound 0): free() relies on that to reach its slow path for
// a pointer outside the small-object spans without a test of its own.
inline bool IsObjectStart(uintptr_t p, int cls) {
  return (p & kObjectStarts.span_mask[cls]) * kObjectStarts.magic[cls] <
         kObjectStarts.bound[cls];
}

// The index in its span of the object of class `cls` that starts `off`
// bytes into the span (off a multiple of the size): the high half of
// off * magic, since magic is 2^64 / size rounded up (plus 1 for a power of
// two), whose excess times off stays below 2^64 for any offset in a span.
inline uint32_t ObjectIndex(uintptr_t off, int cls) {
  return static_cast<uint32_t>(
      (static_cast<unsigned __int128>(off) * kObjectStarts.magic[cls]) >> 64);
}
constexpr bool ObjectIndexIsExact() {
  for (int c = 1; c < kNumClasses; ++c) {
    const SizeClassInfo& i = kClasses.info[c];
    const uint64_t objects = i.limit / i.size;
    for (uint64_t j = 0; j < objects; j += 1 + j / 8) {
      if (static_cast<uint64_t>(
              (static_cast<unsigned __int128>(j * i.size) *
               kObjectStarts.magic[c]) >> 64) != j) {
        return false;
      }
    }
    if (static_cast<uint64_t>((static_cast<unsigned __int128>(
                                   (objects - 1) * i.size) *
                               kObjectStarts.magic[c]) >> 64) != objects - 1) {
      return false;
    }
  }
  return true;
}
static_assert(ObjectIndexIsExact());

}  // namespace cidmalloc::central

#endif  // CIDMALLOC_ALLOCATOR_CENTRAL_SIZE_CLASSES_H_
