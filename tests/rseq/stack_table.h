// tests/rseq/stack_table.h: per-ID data for exercising the rseq layer: a
// region with a Stack for every ID and a per-ID counter array, both fenced
// with canary bytes so that a store outside the documented layout shows up.
#ifndef CIDMALLOC_TESTS_RSEQ_STACK_TABLE_H_
#define CIDMALLOC_TESTS_RSEQ_STACK_TABLE_H_

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "rseq/rseq.h"

namespace cidmalloc_test {

namespace rs = ::cidmalloc::rseq;

// Items used by the tests: 16-byte cells of one static pool (a stack links
// through its items' first words), numbered from 1.
inline constexpr uint32_t kMaxItems = 1u << 16;
struct alignas(16) ItemCell {
  uint64_t words[2];
};
inline ItemCell g_item_pool[kMaxItems + 1];
inline void* ItemFor(uint32_t i) {
  if (i == 0 || i > kMaxItems) abort();  // A test asked for too many.
  return &g_item_pool[i];
}
// The index of an item, or 0 if it is not one.
inline uint32_t IndexOf(const void* item) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(item);
  const uintptr_t base = reinterpret_cast<uintptr_t>(&g_item_pool[0]);
  if (v <= base || v > base + kMaxItems * sizeof(ItemCell) ||
      (v - base) % sizeof(ItemCell) != 0) {
    return 0;
  }
  return static_cast<uint32_t>((v - base) / sizeof(ItemCell));
}

inline constexpr unsigned char kRegionCanary = 0xA5;
inline constexpr unsigned char kCounterCanary = 0x5A;
inline constexpr size_t kTailCanaryBytes = 64;

// Every ID in [0, NumIds()) gets its own region; its Stack lives at byte
// `offset` of the region.  Bytes [0, offset) and the 64 bytes after the
// stack hold a canary.  The table has kWideTableIds entries (null from
// NumIds() on), so that the allocator's sections (PopUnchecked and
// PushUnchecked, which index it with the raw ID unchecked) can use it too.
class StackTable {
 public:
  explicit StackTable(uint32_t capacity, uint32_t offset = 40)
      : ids_(rs::NumIds()), capacity_(capacity), offset_(offset) {
    // NumIds() <= kMaxRseqIds + kMaxSoftIds < kWideTableIds (rseq.h).
    table_.assign(rs::kWideTableIds, nullptr);
    regions_.assign(ids_, nullptr);
    region_bytes_ = offset_ + sizeof(rs::Stack) + kTailCanaryBytes;
    region_bytes_ = (region_bytes_ + 63) & ~size_t{63};
    for (uint32_t id = 0; id < ids_; ++id) {
      char* r = static_cast<char*>(aligned_alloc(64, region_bytes_));
      memset(r, kRegionCanary, region_bytes_);
      regions_[id] = r;
      table_[id] = r;
      rs::Stack* s = stack(id);
      memset(s, 0, sizeof *s);
      s->capacity = static_cast<uint16_t>(capacity_);
    }
  }
  ~StackTable() {
    for (char* r : regions_) free(r);
  }
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;

  void* const* table() const { return table_.data(); }
  // For unpublishing / republishing an ID (atomic stores by the caller).
  void** mutable_table() { return table_.data(); }
  uintptr_t offset() const { return offset_; }
  uint32_t ids() const { return ids_; }
  uint32_t capacity() const { return capacity_; }
  char* region(uint32_t id) const { return regions_[id]; }
  rs::Stack* stack(uint32_t id) const {
    return reinterpret_cast<rs::Stack*>(regions_[id] + offset_);
  }
  // Racy-but-atomic read of a count, for monitors running beside workers.
  uint32_t CountRelaxed(uint32_t id) const {
    return stack(id)->Count();
  }

  // Only while no operation runs.
  void Clear() {
    for (uint32_t id = 0; id < ids_; ++id) stack(id)->top = 0;
  }
  void UnpublishAll() {
    for (uint32_t id = 0; id < ids_; ++id) table_[id] = nullptr;
  }
  void PublishAll() {
    for (uint32_t id = 0; id < ids_; ++id) table_[id] = regions_[id];
  }

  // Empty string if every canary and every capacity is intact and every
  // stack's chain is well formed: as many items as the top word's count,
  // each link one count lower, ending in 0.  With `capacity_may_change`
  // (AdjustCapacity in use) a capacity may be anything up to the one the
  // table was built with, and a count may exceed it (but not that one).
  std::string CheckLayout(bool capacity_may_change = false) const {
    for (uint32_t id = 0; id < ids_; ++id) {
      const unsigned char* r =
          reinterpret_cast<const unsigned char*>(regions_[id]);
      for (uint32_t i = 0; i < offset_; ++i) {
        if (r[i] != kRegionCanary) {
          return "id " + std::to_string(id) + ": byte " + std::to_string(i) +
                 " before the stack was overwritten";
        }
      }
      const size_t tail = offset_ + sizeof(rs::Stack);
      for (size_t i = tail; i < tail + kTailCanaryBytes; ++i) {
        if (r[i] != kRegionCanary) {
          return "id " + std::to_string(id) + ": byte " + std::to_string(i) +
                 " after the stack was overwritten";
        }
      }
      const rs::Stack* s = stack(id);
      for (unsigned char b : s->reserved) {
        if (b != 0) return "id " + std::to_string(id) + ": reserved byte set";
      }
      if (capacity_may_change ? s->capacity > capacity_
                              : s->capacity != capacity_) {
        return "id " + std::to_string(id) + ": capacity changed to " +
               std::to_string(s->capacity);
      }
      const std::string chain = CheckChain(id);
      if (!chain.empty()) return chain;
    }
    return "";
  }

  // Empty string if the stack of `id` is a well-formed chain of at most
  // capacity() items.  Only while no operation runs on it.
  std::string CheckChain(uint32_t id) const {
    const char* bad =
        stack(id)->CheckHeld(capacity_, [](void* p) -> const char* {
          return IndexOf(p) == 0 ? "a link points outside the items" : nullptr;
        });
    return bad == nullptr ? "" : "id " + std::to_string(id) + ": " + bad;
  }

  // Appends the items of every stack, bottom first.  Only while no
  // operation runs.
  void CollectAll(std::vector<void*>* out) const {
    for (uint32_t id = 0; id < ids_; ++id) {
      const std::vector<void*> v = Items(id);
      out->insert(out->end(), v.begin(), v.end());
    }
  }

  // Items on one ID's stack, bottom first (at most capacity(), in case the
  // chain is broken: CheckLayout reports that).
  std::vector<void*> Items(uint32_t id) const {
    std::vector<void*> v;
    uint64_t w = stack(id)->top;
    while (rs::Stack::ItemOf(w) != nullptr && v.size() < capacity_) {
      void* p = rs::Stack::ItemOf(w);
      v.push_back(p);
      if (IndexOf(p) == 0) break;  // Not an item: do not follow it.
      w = rs::Stack::Link(p);
    }
    std::reverse(v.begin(), v.end());
    return v;
  }

  // IDs whose stack is not empty.
  std::vector<uint32_t> NonEmptyIds() const {
    std::vector<uint32_t> v;
    for (uint32_t id = 0; id < ids_; ++id) {
      if (stack(id)->Count() != 0) v.push_back(id);
    }
    return v;
  }

 private:
  const uint32_t ids_;
  const uint32_t capacity_;
  const uint32_t offset_;
  size_t region_bytes_ = 0;
  std::vector<void*> table_;
  std::vector<char*> regions_;
};

// The per-ID counter array of CounterAdd: counter(id) is the int64 at
// base + (id << 6).  Bytes 8..63 of every line hold a canary.
class Counters {
 public:
  Counters() : ids_(rs::NumIds()) {
    bytes_ = size_t{ids_} << 6;
    mem_ = static_cast<char*>(aligned_alloc(64, bytes_));
    Clear();
  }
  ~Counters() { free(mem_); }
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;

  uintptr_t base() const { return reinterpret_cast<uintptr_t>(mem_); }
  uint32_t ids() const { return ids_; }
  int64_t Get(uint32_t id) const {
    int64_t v;
    memcpy(&v, mem_ + (size_t{id} << 6), sizeof v);
    return v;
  }
  int64_t Sum() const {
    int64_t s = 0;
    for (uint32_t id = 0; id < ids_; ++id) s += Get(id);
    return s;
  }
  // IDs whose counter is not zero.
  std::vector<uint32_t> NonZeroIds() const {
    std::vector<uint32_t> v;
    for (uint32_t id = 0; id < ids_; ++id) {
      if (Get(id) != 0) v.push_back(id);
    }
    return v;
  }
  void Clear() {
    memset(mem_, kCounterCanary, bytes_);
    for (uint32_t id = 0; id < ids_; ++id) {
      memset(mem_ + (size_t{id} << 6), 0, sizeof(int64_t));
    }
  }
  // Empty string if the bytes around every counter are intact.
  std::string CheckCanaries() const {
    for (uint32_t id = 0; id < ids_; ++id) {
      const unsigned char* line =
          reinterpret_cast<const unsigned char*>(mem_ + (size_t{id} << 6));
      for (int i = 8; i < 64; ++i) {
        if (line[i] != kCounterCanary) {
          return "counter line " + std::to_string(id) + ": byte " +
                 std::to_string(i) + " overwritten";
        }
      }
    }
    return "";
  }

 private:
  const uint32_t ids_;
  size_t bytes_ = 0;
  char* mem_ = nullptr;
};


// Every item 1..m must appear exactly once in `items`.  Empty string if so,
// else a description of what is missing, duplicated or foreign.
inline std::string CheckConservation(const std::vector<void*>& items,
                                     uint32_t m) {
  std::vector<uint32_t> seen(m + 1, 0);
  std::string bad;
  size_t foreign = 0, missing = 0, dups = 0;
  for (void* it : items) {
    const uint32_t i = IndexOf(it);
    if (i == 0 || i > m) {
      if (++foreign <= 5) {
        char buf[64];
        snprintf(buf, sizeof buf, " foreign item %p;", it);
        bad += buf;
      }
      continue;
    }
    ++seen[i];
  }
  for (uint32_t i = 1; i <= m; ++i) {
    if (seen[i] == 0) {
      if (++missing <= 5) bad += " item " + std::to_string(i) + " lost;";
    } else if (seen[i] > 1) {
      if (++dups <= 5) {
        bad += " item " + std::to_string(i) + " present " +
               std::to_string(seen[i]) + " times;";
      }
    }
  }
  if (bad.empty()) return "";
  return "conservation broken: " + std::to_string(missing) + " lost, " +
         std::to_string(dups) + " duplicated, " + std::to_string(foreign) +
         " foreign (of " + std::to_string(m) + " items, " +
         std::to_string(items.size()) + " found):" + bad;
}

}  // namespace cidmalloc_test

#endif  // CIDMALLOC_TESTS_RSEQ_STACK_TABLE_H_
