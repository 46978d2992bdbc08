// tests/allocator_stress/per_id_stress_test.cc: many threads (more than
// cpus) allocate and free objects of every size class in patterns that
// move objects between threads, and so between per-ID slabs: batches kept
// locally, batches handed to a shared pool, producers and consumers.
//
// Bookkeeping, the test's own: a registry of live pointers (sharded,
// mutex-protected hash maps).  Asserted:
//   - malloc never returns a pointer that is live (duplicate), free is only
//     called on live pointers, every object keeps the tag written into its
//     first and last word until it is freed;
//   - at the end nothing is lost: every allocation was freed exactly once,
//     and after malloc_trim the allocator's bytes in use are back to what
//     they were before the run;
//   - the slab count is bounded by the IDs that can exist: in cid and cpu
//     mode every thread uses an rseq ID (never a soft ID) and slabs <=
//     NumRseqIds (possible cpus); in none mode soft IDs are compact, so
//     slabs <= the most threads ever alive at once.
// Variants: threads pinned round-robin to the allowed cpus, and unpinned.
// The binary runs in cid, own-registration, cpu and none mode, and with
// CIDMALLOC_STATS=1 (counting paths), as separate targets (BUILD).
#include <gtest/gtest.h>
#include <malloc.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "allocator/central/size_classes.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kThreads = 24;
constexpr int kOpsPerThread = 6000;
constexpr int kShards = 64;

// Request sizes that land in every small size class: each step of 16 bytes
// up to 128, then 8 steps per power of two up to kMaxSmallSize (the
// documented class layout; an exact match does not matter, covering all
// does).
std::vector<size_t> ClassBoundaries() {
  std::vector<size_t> b;
  for (size_t s = 16; s <= 128; s += 16) b.push_back(s);
  for (size_t base = 128; base < cidmalloc::central::kMaxSmallSize;
       base *= 2) {
    for (size_t j = 1; j <= 8; ++j) b.push_back(base + j * (base / 8));
  }
  return b;
}

struct Obj {
  void* p;
  size_t size;
  uint64_t tag;
};

// Live pointers of the whole process (only the test's own objects).
class Registry {
 public:
  Registry() {
    for (Shard& s : shards_) s.live.reserve(4096);
  }
  // False if p was live already.
  bool Add(const Obj& o) {
    Shard& s = ShardOf(o.p);
    std::lock_guard<std::mutex> l(s.mu);
    return s.live.emplace(reinterpret_cast<uintptr_t>(o.p), o).second;
  }
  // False if p was not live.  *out receives the registered object.
  bool Remove(void* p, Obj* out) {
    Shard& s = ShardOf(p);
    std::lock_guard<std::mutex> l(s.mu);
    auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
    if (it == s.live.end()) return false;
    *out = it->second;
    s.live.erase(it);
    return true;
  }
  size_t Size() {
    size_t n = 0;
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> l(s.mu);
      n += s.live.size();
    }
    return n;
  }

 private:
  struct alignas(64) Shard {
    std::mutex mu;
    std::unordered_map<uintptr_t, Obj> live;
  };
  Shard& ShardOf(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return shards_[(a >> 4 ^ a >> 12 ^ a >> 20) % kShards];
  }
  Shard shards_[kShards];
};

class PerIdStress : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { registry_ = new Registry; }
  static void TearDownTestSuite() {
    delete registry_;
    registry_ = nullptr;
  }

  void SetUp() override {
    boundaries_ = ClassBoundaries();
    pool_.reserve(1 << 16);
  }

  size_t RandomSize(Rng& rng, bool* large) {
    const uint64_t r = rng.Below(1000);
    *large = false;
    if (r < 985) {
      // A random class, then a random size inside it.
      const size_t k = rng.Below(boundaries_.size());
      const size_t lo = k == 0 ? 0 : boundaries_[k - 1] + 1;
      return rng.Range(lo, boundaries_[k]);
    }
    *large = true;
    if (r < 999) return rng.Range(64 * kKiB + 1, kMiB);
    return rng.Range(2 * kMiB + 1, 3 * kMiB);
  }

  void Fail(const char* what, const void* p, size_t size) {
    if (failures_.fetch_add(1) < 20) {
      ADD_FAILURE() << what << ": " << p << " (" << size << " bytes)";
    }
  }

  static void Stamp(const Obj& o) {
    if (o.size >= 8) memcpy(o.p, &o.tag, 8);
    if (o.size >= 16) memcpy(static_cast<char*>(o.p) + o.size - 8, &o.tag, 8);
  }
  bool StampIntact(const Obj& o) {
    uint64_t head = o.tag, tail = o.tag;
    if (o.size >= 8) memcpy(&head, o.p, 8);
    if (o.size >= 16) memcpy(&tail, static_cast<char*>(o.p) + o.size - 8, 8);
    return head == o.tag && tail == o.tag;
  }

  bool Allocate(Rng& rng, uint64_t tag, size_t size, Obj* out) {
    void* p;
    const uint64_t how = rng.Below(20);
    if (how == 0) {
      p = calloc(1, size);
    } else if (how == 1) {
      p = operator new(size);
    } else {
      p = malloc(size);
    }
    if (p == nullptr) {
      Fail("allocation failed", nullptr, size);
      return false;
    }
    *out = Obj{p, size, tag};
    if (!registry_->Add(*out)) {
      Fail("allocator returned a pointer that is still live", p, size);
      return false;  // Do not free it twice.
    }
    Stamp(*out);
    allocs_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  void Release(void* p) {
    Obj o;
    if (!registry_->Remove(p, &o)) {
      Fail("freeing a pointer that is not live", p, 0);
      return;
    }
    if (!StampIntact(o)) Fail("live object overwritten", p, o.size);
    if (o.size > 0 && malloc_usable_size(p) < o.size) {
      Fail("usable size below the request", p, o.size);
    }
    free(p);
    frees_.fetch_add(1, std::memory_order_relaxed);
  }

  void PutInPool(std::vector<Obj>* local, size_t n) {
    std::lock_guard<std::mutex> l(pool_mu_);
    for (size_t i = 0; i < n && !local->empty(); ++i) {
      pool_.push_back(local->back());
      local->pop_back();
    }
    if (pool_.size() > pool_peak_) pool_peak_ = pool_.size();
  }
  void TakeFromPool(std::vector<Obj>* into, size_t n) {
    std::lock_guard<std::mutex> l(pool_mu_);
    for (size_t i = 0; i < n && !pool_.empty(); ++i) {
      into->push_back(pool_.back());
      pool_.pop_back();
    }
  }

  void ThreadBody(int index, int cpu) {
    if (cpu >= 0 && !PinToCpu(cpu)) Fail("sched_setaffinity failed", nullptr, 0);
    Rng rng(Mix(0x1d5 + static_cast<uint64_t>(cpu + 1), index));
    std::vector<Obj> local, taken;
    local.reserve(512);
    taken.reserve(64);
    uint64_t serial = 0;
    for (int op = 0; op < kOpsPerThread; ++op) {
      // Roles rotate: a producer phase, a consumer phase, a mixed phase.
      const int phase = (op / 500 + index) % 3;
      const uint64_t r = rng.Below(100);
      const bool produce = phase == 0 ? r < 60 : phase == 1 ? r < 15 : r < 40;
      if (produce) {
        bool large;
        const size_t size = RandomSize(rng, &large);
        const size_t n = large ? 1 : 1 + rng.Below(32);  // A batch of a class.
        for (size_t i = 0; i < n; ++i) {
          Obj o;
          const uint64_t tag =
              Mix(static_cast<uint64_t>(index) << 32 | serial++, 0x7a9);
          if (Allocate(rng, tag, size, &o)) local.push_back(o);
        }
        if (local.size() > 400) PutInPool(&local, local.size() - 200);
      } else if (r < 70 || phase == 1) {
        // Consume: free objects someone else allocated.
        taken.clear();
        TakeFromPool(&taken, 1 + rng.Below(48));
        for (const Obj& o : taken) Release(o.p);
        // And a few of our own, oldest or newest.
        const size_t n = std::min<size_t>(local.size(), rng.Below(16));
        for (size_t i = 0; i < n; ++i) {
          if (rng.Chance(1, 2)) {
            Release(local.back().p);
            local.pop_back();
          } else {
            const size_t k = rng.Below(local.size());
            Release(local[k].p);
            local[k] = local.back();
            local.pop_back();
          }
        }
      } else {
        PutInPool(&local, 1 + rng.Below(64));
      }
    }
    // Leave half to the others.
    PutInPool(&local, local.size() / 2);
    for (const Obj& o : local) Release(o.p);
  }

  enum class Pinning : uint8_t { kUnpinned, kPinned };
  void RunThreads(Pinning pinning) {
    const bool pinned = pinning == Pinning::kPinned;
    const std::vector<int> cpus = AllowedCpus();
    ASSERT_FALSE(cpus.empty());
    malloc_trim(0);
    const size_t in_use_before = InUseBytes(Stats());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      const int cpu = pinned ? cpus[t % cpus.size()] : -1;
      threads.emplace_back([this, t, cpu] { ThreadBody(t, cpu); });
    }
    for (auto& t : threads) t.join();
    for (const Obj& o : pool_) Release(o.p);
    // Back to the footprint the pool had when in_use_before was taken.
    std::vector<Obj>().swap(pool_);
    pool_.reserve(1 << 16);
    EXPECT_EQ(failures_.load(), 0);
    EXPECT_EQ(registry_->Size(), 0u) << "objects never freed";
    EXPECT_EQ(allocs_.load(), frees_.load());
    EXPECT_GT(allocs_.load(), kThreads * kOpsPerThread / 2);

    // Nothing lost inside the allocator either: with every object freed
    // and the caches drained, the bytes in use are what they were.
    malloc_trim(0);
    const cidmalloc_stats s = Stats();
    const size_t in_use_after = InUseBytes(s);
    EXPECT_LE(in_use_after, in_use_before + 2 * kMiB)
        << "in use before " << in_use_before << ", after " << in_use_after;

    CheckSlabs(s);
    printf("%s: %ld allocations; mode %s (registration %s), %u rseq IDs, "
           "slabs %u (highest ID %u), in use %.1f -> %.1f MiB, pool peak "
           "%zu\n",
           pinned ? "pinned" : "unpinned", allocs_.load(), s.mode,
           s.registration, s.num_rseq_ids, s.slabs, s.max_slab_id,
           ToMiB(in_use_before), ToMiB(in_use_after), pool_peak_);
  }

  void CheckSlabs(const cidmalloc_stats& s) {
    const std::string mode = s.mode;
    if (mode == "cid" || mode == "cpu") {
      EXPECT_GT(s.num_rseq_ids, 0u);
      // Every thread ran on its rseq ID (no soft-ID fallback), and there
      // are no more slabs than IDs.
      EXPECT_LT(s.max_slab_id, s.num_rseq_ids)
          << "a thread fell back to a soft ID";
      if (s.max_slab_id < s.num_rseq_ids) {
        EXPECT_LE(s.slabs, s.num_rseq_ids);
      } else {
        // Soft IDs used anyway: at most one per thread alive at once.
        EXPECT_LE(s.slabs, s.num_rseq_ids + kThreads + 2);
      }
    } else {
      EXPECT_EQ(s.num_rseq_ids, 0u);
      // Soft IDs are the lowest free ones and freed at thread exit: no
      // more slabs than threads ever alive at once (the workers, main, and
      // a margin for gtest's or libc's own threads).
      EXPECT_LE(s.slabs, static_cast<unsigned>(kThreads + 1 + 2));
      EXPECT_LE(s.max_slab_id, static_cast<unsigned>(kThreads + 2));
    }
  }

  void CheckCounters(const cidmalloc_stats& before,
                     const cidmalloc_stats& after) {
    if (!after.counting) return;
    EXPECT_GE(after.mallocs - before.mallocs,
              static_cast<unsigned long long>(allocs_.load()));
    EXPECT_GE(after.frees - before.frees,
              static_cast<unsigned long long>(frees_.load()));
    EXPECT_LE(after.cache_hits - before.cache_hits,
              after.mallocs - before.mallocs);
  }

  static Registry* registry_;
  std::vector<size_t> boundaries_;
  std::mutex pool_mu_;
  std::vector<Obj> pool_;
  size_t pool_peak_ = 0;
  std::atomic<long> failures_{0};
  std::atomic<long> allocs_{0};
  std::atomic<long> frees_{0};
};

Registry* PerIdStress::registry_ = nullptr;

TEST_F(PerIdStress, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST_F(PerIdStress, Unpinned) {
  const cidmalloc_stats before = Stats();
  RunThreads(Pinning::kUnpinned);
  CheckCounters(before, Stats());
}

TEST_F(PerIdStress, PinnedRoundRobin) {
  const cidmalloc_stats before = Stats();
  RunThreads(Pinning::kPinned);
  CheckCounters(before, Stats());
}

}  // namespace
