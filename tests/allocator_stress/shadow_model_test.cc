// tests/allocator_stress/shadow_model_test.cc: random sequences of malloc,
// calloc, realloc (grow and shrink), memalign / posix_memalign /
// aligned_alloc, free, malloc_usable_size and the occasional malloc_trim,
// checked against a shadow model: the expected contents of every live block
// (a std::vector<uint8_t> per block, the test's own memory).
//
// After every operation the block it touched is compared with its shadow;
// every few thousand operations all live blocks are.  Asserted besides the
// contents: alignment (16 bytes, or the requested one), usable size >=
// requested size, calloc's zeros, and that no two live blocks overlap (an
// interval map keyed by address, shared by the threads, over the usable
// extent of each block).
//
// Deterministic seeds; each seed is one run of kOpsPerSeed operations.  Two
// threads run seeds concurrently (their blocks share the interval map), so
// the model also covers cross-thread reuse of freed memory.
#include <gtest/gtest.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kSeeds = 6;
constexpr long kOpsPerSeed = 250000;  // 1.5 M operations per target.
constexpr int kMaxLive = 1500;
constexpr long kFullCheckEvery = 20000;

// Live blocks of every thread: address -> end of usable extent.
class IntervalMap {
 public:
  // Inserts [start, end); returns a description of the overlapped block,
  // or "" if none.
  std::string Insert(uintptr_t start, uintptr_t end) {
    std::lock_guard<std::mutex> l(mu_);
    auto next = map_.lower_bound(start);
    if (next != map_.end() && next->first < end) return Describe(*next, start, end);
    if (next != map_.begin()) {
      auto prev = std::prev(next);
      if (prev->second > start) return Describe(*prev, start, end);
    }
    map_.emplace(start, end);
    return "";
  }
  bool Erase(uintptr_t start) {
    std::lock_guard<std::mutex> l(mu_);
    return map_.erase(start) == 1;
  }

 private:
  static std::string Describe(const std::pair<const uintptr_t, uintptr_t>& b,
                              uintptr_t start, uintptr_t end) {
    char buf[160];
    snprintf(buf, sizeof buf, "[%#lx, %#lx) overlaps live [%#lx, %#lx)",
             static_cast<unsigned long>(start), static_cast<unsigned long>(end),
             static_cast<unsigned long>(b.first),
             static_cast<unsigned long>(b.second));
    return buf;
  }
  std::mutex mu_;
  std::map<uintptr_t, uintptr_t> map_;
};

IntervalMap* g_intervals;

struct Shadow {
  std::vector<uint8_t> bytes;  // Expected contents of [0, bytes.size()).
  size_t usable = 0;
  size_t align = 16;
};

class Model {
 public:
  explicit Model(uint64_t seed) : rng_(seed), seed_(seed) {}

  ~Model() {
    for (auto& [p, s] : live_) {
      g_intervals->Erase(reinterpret_cast<uintptr_t>(p));
      free(p);
    }
  }

  // Runs n operations; returns the number of failures (the first few are
  // reported through gtest).
  long Run(long n) {
    for (long i = 0; i < n && failures_ < 10; ++i) {
      ops_ = i;
      Step();
      if (i % kFullCheckEvery == kFullCheckEvery - 1) CheckAll();
    }
    CheckAll();
    return failures_;
  }

  long trims() const { return trims_; }

 private:
  void Fail(const std::string& what) {
    if (++failures_ <= 5) {
      ADD_FAILURE() << "seed " << seed_ << ", op " << ops_ << ": " << what;
    }
  }

  size_t RandomSize() {
    const uint64_t r = rng_.Below(10000);
    if (r < 7000) return rng_.Range(0, 256);
    if (r < 9500) return rng_.Range(257, 2048);
    if (r < 9980) return rng_.Range(2049, 32 * kKiB);
    if (r < 9998) return rng_.Range(32 * kKiB + 1, 300 * kKiB);
    return rng_.Range(2 * kMiB - 100, 3 * kMiB);  // Own mappings.
  }

  // Random bytes into [from, to) of both the block and its shadow.
  void RandomFill(uint8_t* dst, std::vector<uint8_t>& shadow, size_t from,
                  size_t to) {
    size_t i = from;
    for (; i + 8 <= to; i += 8) {
      const uint64_t v = rng_.Next();
      memcpy(dst + i, &v, 8);
      memcpy(shadow.data() + i, &v, 8);
    }
    const uint64_t v = rng_.Next();
    for (size_t k = 0; i < to; ++i, ++k) {
      dst[i] = shadow[i] = static_cast<uint8_t>(v >> (k * 8));
    }
  }

  void* PickLive() {
    if (live_.empty()) return nullptr;
    // Random element: an unordered_map has no random access, so walk from
    // a random bucket.
    const size_t buckets = live_.bucket_count();
    for (size_t tries = 0; tries < 64; ++tries) {
      const size_t b = rng_.Below(buckets);
      if (live_.bucket_size(b) > 0) return live_.begin(b)->first;
    }
    return live_.begin()->first;
  }

  // Registers a new block: checks alignment, usable size, no overlap.
  bool Admit(void* p, size_t size, size_t align) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a % align != 0) Fail("block " + Hex(p) + " not aligned to " + std::to_string(align));
    const size_t usable = malloc_usable_size(p);
    if (usable < size) {
      Fail("usable size " + std::to_string(usable) + " < requested " +
           std::to_string(size));
    }
    const std::string overlap = g_intervals->Insert(a, a + std::max<size_t>(usable, 1));
    if (!overlap.empty()) {
      Fail("new block " + overlap);
      return false;  // Do not track (or free) a block we do not own.
    }
    Shadow& s = live_[p];
    s.bytes.assign(size, 0);
    s.usable = usable;
    s.align = align;
    return true;
  }

  void Check(void* p, const Shadow& s) {
    if (memcmp(p, s.bytes.data(), s.bytes.size()) == 0) return;
    const uint8_t* c = static_cast<const uint8_t*>(p);
    size_t i = 0;
    while (c[i] == s.bytes[i]) ++i;
    Fail("contents of " + Hex(p) + " (" + std::to_string(s.bytes.size()) +
         " bytes) differ at offset " + std::to_string(i));
  }

  void CheckAll() {
    for (auto& [p, s] : live_) Check(p, s);
  }

  void Release(void* p) {
    auto it = live_.find(p);
    Check(p, it->second);
    if (!g_intervals->Erase(reinterpret_cast<uintptr_t>(p))) {
      Fail("interval of " + Hex(p) + " missing");
    }
    live_.erase(it);
    free(p);
  }

  void Step() {
    const uint64_t op = rng_.Below(1000);
    const bool full = live_.size() >= kMaxLive;
    if (op < 300 && !full) {
      const size_t size = RandomSize();
      void* p = malloc(size);
      if (p == nullptr) return Fail("malloc(" + std::to_string(size) + ") failed");
      if (!Admit(p, size, 16)) return;
      RandomFill(static_cast<uint8_t*>(p), live_[p].bytes, 0, size);
    } else if (op < 380 && !full) {
      const size_t n = rng_.Range(1, 8);
      const size_t each = RandomSize() / n;
      void* p = calloc(n, each);
      if (p == nullptr) return Fail("calloc failed");
      const uint8_t* c = static_cast<const uint8_t*>(p);
      for (size_t i = 0; i < n * each; ++i) {
        if (c[i] != 0) {
          Fail("calloc(" + std::to_string(n) + ", " + std::to_string(each) +
               ") byte " + std::to_string(i) + " not zero");
          break;
        }
      }
      Admit(p, n * each, 16);  // Shadow: zeros.
    } else if (op < 430 && !full) {
      size_t align = size_t{1} << rng_.Range(3, 14);  // 8 .. 16 KiB
      if (rng_.Chance(1, 50)) align = size_t{1} << rng_.Range(15, 22);
      const size_t size = RandomSize();
      void* p = nullptr;
      const uint64_t how = rng_.Below(3);
      if (how == 0) {
        p = memalign(align, size);
      } else if (how == 1) {
        if (posix_memalign(&p, align, size) != 0) p = nullptr;
      } else {
        p = aligned_alloc(align, size);
      }
      if (p == nullptr) return Fail("aligned allocation failed");
      if (!Admit(p, size, std::max<size_t>(align, 16) == 16 ? 16 : align)) return;
      RandomFill(static_cast<uint8_t*>(p), live_[p].bytes, 0, size);
    } else if (op < 600) {
      void* p = PickLive();
      if (p != nullptr) Release(p);
    } else if (op < 750) {
      // realloc: grow, shrink, or anything.
      void* p = PickLive();
      if (p == nullptr) return;
      Shadow old = std::move(live_[p]);
      const size_t old_size = old.bytes.size();
      size_t size;
      const uint64_t how = rng_.Below(4);
      if (how == 0) {
        size = old_size / 2;
      } else if (how == 1) {
        size = old_size + rng_.Range(1, 100);
      } else if (how == 2) {
        size = old_size * 2 + 1;
      } else {
        size = RandomSize();
      }
      if (size > 4 * kMiB) size = 4 * kMiB;
      if (size == 0) size = 1;
      Check(p, old);
      live_.erase(p);
      g_intervals->Erase(reinterpret_cast<uintptr_t>(p));
      void* q = realloc(p, size);
      if (q == nullptr) return Fail("realloc failed");
      if (!Admit(q, size, 16)) return;
      Shadow& s = live_[q];
      const size_t keep = std::min(old_size, size);
      memcpy(s.bytes.data(), old.bytes.data(), keep);
      // The kept prefix must have moved with the block.
      if (memcmp(q, s.bytes.data(), keep) != 0) {
        Fail("realloc(" + std::to_string(old_size) + " -> " +
             std::to_string(size) + ") lost contents");
        memcpy(s.bytes.data(), q, keep);  // Resynchronise.
      }
      RandomFill(static_cast<uint8_t*>(q), s.bytes, keep, size);
    } else if (op < 850) {
      // Rewrite part of a live block.
      void* p = PickLive();
      if (p == nullptr) return;
      Shadow& s = live_[p];
      Check(p, s);
      if (s.bytes.empty()) return;
      const size_t from = rng_.Below(s.bytes.size());
      const size_t to = std::min(s.bytes.size(), from + rng_.Range(1, 512));
      RandomFill(static_cast<uint8_t*>(p), s.bytes, from, to);
    } else if (op < 950) {
      // Usable size: stable, >= the size; the block may be used up to it.
      void* p = PickLive();
      if (p == nullptr) return;
      Shadow& s = live_[p];
      const size_t usable = malloc_usable_size(p);
      if (usable != s.usable) {
        Fail("malloc_usable_size changed from " + std::to_string(s.usable) +
             " to " + std::to_string(usable));
      }
      if (usable < s.bytes.size()) Fail("usable size below the contents");
      if (usable > s.bytes.size() && usable - s.bytes.size() < 64 * kKiB &&
          rng_.Chance(1, 2)) {
        const size_t old = s.bytes.size();
        s.bytes.resize(usable);
        RandomFill(static_cast<uint8_t*>(p), s.bytes, old, usable);
      }
      Check(p, s);
    } else if (op < 952) {
      malloc_trim(0);
      ++trims_;
    } else {
      // Free a run of blocks (drives spans empty).
      for (int i = 0; i < 8; ++i) {
        void* p = PickLive();
        if (p == nullptr) break;
        Release(p);
      }
    }
  }

  static std::string Hex(const void* p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", p);
    return buf;
  }

  Rng rng_;
  uint64_t seed_;
  long ops_ = 0;
  long failures_ = 0;
  long trims_ = 0;
  std::unordered_map<void*, Shadow> live_;
};

TEST(ShadowModel, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST(ShadowModel, RandomOperationsMatchTheModel) {
  g_intervals = new IntervalMap;
  std::atomic<int> next_seed{0};
  std::atomic<long> failures{0}, trims{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int seed; (seed = next_seed.fetch_add(1)) < kSeeds;) {
        Model m(0x5eed0000u + static_cast<uint64_t>(seed));
        failures += m.Run(kOpsPerSeed);
        trims += m.trims();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(trims.load(), 0);
  delete g_intervals;
  g_intervals = nullptr;
  printf("%d seeds x %ld operations, %ld malloc_trim calls\n", kSeeds,
         kOpsPerSeed, trims.load());
}

// An aligned allocation of 0 bytes with an alignment above the largest size
// class (64 KiB) goes to the page heap with a length of 0 pages.  It must
// still be a live block: its usable size can be queried, it is distinct
// from other blocks, and it can be freed and reallocated.  (It used to get
// a 0-page run, i.e. free memory, and abort in free; fixed by 35e3ca8.)  Run
// in a subprocess: the failure mode is an abort.
TEST(ShadowModel, ZeroBytesWithLargeAlignment) {
  if (!InSubprocess()) {
    RunThisTestInSubprocess();
    return;
  }
  for (size_t align : {size_t{128} << 10, size_t{1} << 20, size_t{2} << 20,
                       size_t{4} << 20}) {
    std::vector<void*> blocks;
    for (int i = 0; i < 4; ++i) {
      void* p = memalign(align, 0);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u);
      blocks.push_back(p);
      void* q = nullptr;
      ASSERT_EQ(posix_memalign(&q, align, 0), 0);
      blocks.push_back(q);
      blocks.push_back(aligned_alloc(align, 0));
      ASSERT_NE(blocks.back(), nullptr);
    }
    // Other allocations of the page heap must not land on them.
    std::vector<void*> others;
    for (int i = 0; i < 64; ++i) others.push_back(malloc(100 * kKiB));
    std::vector<void*> sorted = blocks;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end())
        << "two zero-size blocks at the same address (align " << align << ")";
    for (void* p : blocks) {
      for (void* o : others) EXPECT_NE(p, o);
      (void)malloc_usable_size(p);  // Must not abort.
    }
    for (void* o : others) free(o);
    blocks[0] = realloc(blocks[0], 1000);
    ASSERT_NE(blocks[0], nullptr);
    for (void* p : blocks) free(p);
  }
}

}  // namespace
