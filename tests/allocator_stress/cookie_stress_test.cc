// tests/allocator_stress/cookie_stress_test.cc: many short-lived threads
// over several rounds allocate objects of random sizes, stamp each with a
// cookie derived from its address and size, and hand some of them to other
// threads (of the same round or a later one) through a shared transfer
// array.  Every object's cookie is verified before it is freed, by
// whichever thread frees it; realloc must keep the cookie up to the smaller
// size and calloc must return zeros.
//
// A cookie mismatch means the allocator handed the same memory out twice,
// let two objects overlap, or wrote into a live object (its free-list link,
// its double-free word, a cache slot...).  Each thread has a deterministic
// seed (round, thread index), so a failing interleaving of sizes is
// reproducible even if the thread schedule is not.
//
// Built once per environment (BUILD): default (best mode, glibc
// registration), own registration, cpu mode, none mode (soft IDs; threads
// exiting hand their caches back), and a tiny front-end cache budget that
// drives every object through the central lists.
#include <gtest/gtest.h>
#include <malloc.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "tests/allocator_stress/stress_util.h"

namespace {

using namespace cidmalloc_stress;  // NOLINT

constexpr int kThreads = 12;
constexpr int kRounds = 8;
constexpr int kItersPerRound = 8000;
constexpr int kLocalSlots = 200;
constexpr int kTransferSlots = 1000;

// Objects up to this size get their cookie in every byte; larger ones in
// their first and last kEdgeWords words and one word every kStrideWords.
constexpr size_t kFullCookieLimit = 256 * kKiB;
constexpr size_t kEdgeWords = 32;
constexpr size_t kStrideWords = 512;  // 4 KiB

// Word 0 of every object of at least 8 bytes: its size, keyed.
constexpr uint64_t kSizeKey = 0xC00C1E5172E00000ull;

// Calls f(byte offset, width) for every 8-byte word (width 8) and tail byte
// (width 1) the cookie covers, word 0 (the size word) excluded.
template <typename F>
void ForEachCookiePosition(size_t size, F f) {
  const size_t words = size / 8;
  if (size <= kFullCookieLimit) {
    for (size_t w = 1; w < words; ++w) f(w * 8, 8);
    for (size_t b = words * 8; b < size; ++b) f(b, 1);
    return;
  }
  for (size_t w = 1; w < words; ++w) {
    if (w < kEdgeWords || w + kEdgeWords >= words || w % kStrideWords == 0) {
      f(w * 8, 8);
    } else if (w < words - kEdgeWords) {
      // Skip to the next stride word or the tail edge.
      size_t next = (w / kStrideWords + 1) * kStrideWords;
      if (next > words - kEdgeWords) next = words - kEdgeWords;
      w = next - 1;
    }
  }
  for (size_t b = words * 8; b < size; ++b) f(b, 1);
}

uint64_t CookieWord(uintptr_t addr, size_t size, size_t offset) {
  return Mix(addr ^ (offset << 40), size) ^ offset;
}

void WriteCookie(void* p, size_t size) {
  char* c = static_cast<char*>(p);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (size >= 8) {
    const uint64_t head = size ^ kSizeKey;
    memcpy(c, &head, 8);
  } else {
    for (size_t b = 0; b < size; ++b) c[b] = static_cast<char>(CookieWord(a, size, b));
    return;
  }
  ForEachCookiePosition(size, [&](size_t off, int width) {
    const uint64_t v = CookieWord(a, size, off);
    if (width == 8) {
      memcpy(c + off, &v, 8);
    } else {
      c[off] = static_cast<char>(v);
    }
  });
}

// Checks the cookie that WriteCookie(old_addr, old_size) wrote, now found at
// p, over its first `limit` bytes.  Returns the offset of the first bad
// position, or -1.
long CheckCookieAt(const void* p, uintptr_t old_addr, size_t old_size,
                   size_t limit) {
  const char* c = static_cast<const char*>(p);
  if (old_size < 8) {
    for (size_t b = 0; b < old_size && b < limit; ++b) {
      if (c[b] != static_cast<char>(CookieWord(old_addr, old_size, b))) {
        return static_cast<long>(b);
      }
    }
    return -1;
  }
  if (limit >= 8) {
    uint64_t head;
    memcpy(&head, c, 8);
    if (head != (old_size ^ kSizeKey)) return 0;
  }
  long bad = -1;
  ForEachCookiePosition(old_size, [&](size_t off, int width) {
    if (bad >= 0 || off + static_cast<size_t>(width) > limit) return;
    const uint64_t v = CookieWord(old_addr, old_size, off);
    if (width == 8) {
      uint64_t got;
      memcpy(&got, c + off, 8);
      if (got != v) bad = static_cast<long>(off);
    } else if (c[off] != static_cast<char>(v)) {
      bad = static_cast<long>(off);
    }
  });
  return bad;
}

// The size of an object of at least 8 bytes, from its size word (0 if the
// word is corrupt, which the cookie check then reports).
size_t SizeOf(const void* p) {
  uint64_t head;
  memcpy(&head, p, 8);
  const uint64_t size = head ^ kSizeKey;
  return size >> 40 ? 0 : static_cast<size_t>(size);
}

size_t RandomSize(Rng& rng) {
  const uint64_t r = rng.Below(10000);
  if (r < 4500) return rng.Range(0, 128);
  if (r < 8800) return rng.Range(129, 1024);
  if (r < 9950) return rng.Range(1025, 100 * kKiB);
  if (r < 9996) return rng.Range(100 * kKiB + 1, 2 * kMiB);
  return rng.Range(2 * kMiB + 1, 5 * kMiB);  // A few huge ones.
}

struct Obj {
  void* p = nullptr;
  size_t size = 0;
};

class CookieStress : public ::testing::Test {
 protected:
  std::atomic<void*> transfer_[kTransferSlots] = {};
  std::atomic<long> failures_{0};
  std::atomic<long> allocs_{0};
  std::atomic<long> frees_{0};
  std::atomic<long> transfers_{0};
  std::atomic<long> reallocs_{0};
  std::atomic<long> callocs_{0};

  void Fail(const char* what, const void* p, size_t size, long offset) {
    if (failures_.fetch_add(1) < 20) {
      ADD_FAILURE() << what << ": object " << p << " of " << size
                    << " bytes, first bad byte at offset " << offset;
    }
  }

  void VerifyAndFree(Obj o) {
    if (o.p == nullptr) return;
    const long bad =
        CheckCookieAt(o.p, reinterpret_cast<uintptr_t>(o.p), o.size, o.size);
    if (bad >= 0) Fail("cookie corrupt before free", o.p, o.size, bad);
    if (o.size > 0 && malloc_usable_size(o.p) < o.size) {
      Fail("usable size below the requested size", o.p, o.size, -1);
    }
    free(o.p);
    frees_.fetch_add(1, std::memory_order_relaxed);
  }

  // An object taken out of the transfer array: its size is in word 0.
  void VerifyAndFreeTransferred(void* p) {
    if (p == nullptr) return;
    const size_t size = SizeOf(p);
    if (size < 8) {
      Fail("size word of a transferred object corrupt", p, size, 0);
      return;  // Freeing it could crash the test; leak it.
    }
    VerifyAndFree(Obj{p, size});
  }

  Obj Allocate(Rng& rng) {
    const size_t size = RandomSize(rng);
    Obj o{nullptr, size};
    if (rng.Chance(1, 10)) {
      // calloc, in several shapes of (n, size).
      const size_t n = size >= 16 && rng.Chance(1, 2) ? 16 : 1;
      const size_t total = size / n * n;
      o.size = total;
      o.p = calloc(n, total / n);
      callocs_.fetch_add(1, std::memory_order_relaxed);
      if (o.p == nullptr && total != 0) {
        Fail("calloc returned NULL", nullptr, total, -1);
        return Obj{};
      }
      const unsigned char* c = static_cast<const unsigned char*>(o.p);
      for (size_t b = 0; b < total; ++b) {
        if (c[b] != 0) {
          Fail("calloc memory not zero", o.p, total, static_cast<long>(b));
          break;
        }
      }
    } else {
      o.p = malloc(size);
      if (o.p == nullptr) {
        Fail("malloc returned NULL", nullptr, size, -1);
        return Obj{};
      }
    }
    if (o.p == nullptr) return Obj{};  // calloc(0, ...) may return NULL.
    allocs_.fetch_add(1, std::memory_order_relaxed);
    if ((reinterpret_cast<uintptr_t>(o.p) & 15) != 0) {
      Fail("allocation not 16-byte aligned", o.p, o.size, -1);
    }
    WriteCookie(o.p, o.size);
    return o;
  }

  void Reallocate(Rng& rng, Obj* o) {
    size_t new_size;
    const uint64_t r = rng.Below(4);
    if (r == 0) {
      new_size = o->size / 2;  // Shrink.
    } else if (r == 1) {
      new_size = o->size + rng.Range(1, 64);  // Grow in place, maybe.
    } else if (r == 2) {
      new_size = o->size * 2 + 1;  // Grow out of the class.
    } else {
      new_size = RandomSize(rng);
    }
    if (new_size > 6 * kMiB) new_size = 6 * kMiB;
    if (new_size == 0) new_size = 1;  // realloc(p, 0) frees: not this test.
    const uintptr_t old_addr = reinterpret_cast<uintptr_t>(o->p);
    void* q = realloc(o->p, new_size);
    reallocs_.fetch_add(1, std::memory_order_relaxed);
    if (q == nullptr) {
      Fail("realloc returned NULL", o->p, new_size, -1);
      return;
    }
    const size_t keep = o->size < new_size ? o->size : new_size;
    const long bad = CheckCookieAt(q, old_addr, o->size, keep);
    if (bad >= 0) Fail("realloc lost the cookie", q, new_size, bad);
    o->p = q;
    o->size = new_size;
    WriteCookie(q, new_size);
  }

  void ThreadBody(int round, int index) {
    Rng rng(Mix(static_cast<uint64_t>(round), static_cast<uint64_t>(index)));
    std::vector<Obj> local(kLocalSlots);
    for (int it = 0; it < kItersPerRound; ++it) {
      Obj& slot = local[rng.Below(kLocalSlots)];
      const uint64_t op = rng.Below(100);
      if (op < 50) {
        VerifyAndFree(slot);
        slot = Allocate(rng);
      } else if (op < 60) {
        if (slot.p != nullptr) Reallocate(rng, &slot);
      } else if (op < 80) {
        // Exchange with a random transfer slot; objects below 8 bytes have
        // no room for their size and stay home.
        if (slot.p != nullptr && slot.size < 8) continue;
        void* in = transfer_[rng.Below(kTransferSlots)].exchange(
            slot.p, std::memory_order_acq_rel);
        transfers_.fetch_add(1, std::memory_order_relaxed);
        slot = Obj{};
        if (in == nullptr) continue;
        const size_t size = SizeOf(in);
        const long bad = CheckCookieAt(in, reinterpret_cast<uintptr_t>(in),
                                       size, size);
        if (size < 8 || bad >= 0) {
          Fail("cookie of a transferred object corrupt", in, size, bad);
          continue;
        }
        if (rng.Chance(1, 2)) {
          slot = Obj{in, size};  // Keep it: it moves on later.
        } else {
          VerifyAndFree(Obj{in, size});
        }
      } else {
        VerifyAndFree(slot);
        slot = Obj{};
      }
    }
    // The thread dies: most objects go, a quarter outlives it in the
    // transfer array (freed by a thread of a later round, or by the test).
    for (Obj& o : local) {
      if (o.p == nullptr) continue;
      if (o.size >= 8 && rng.Chance(1, 4)) {
        void* out = transfer_[rng.Below(kTransferSlots)].exchange(
            o.p, std::memory_order_acq_rel);
        VerifyAndFreeTransferred(out);
      } else {
        VerifyAndFree(o);
      }
      o = Obj{};
    }
  }

  void Run() {
    const cidmalloc_stats before = Stats();
    for (int round = 0; round < kRounds; ++round) {
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([this, round, t] { ThreadBody(round, t); });
      }
      for (auto& t : threads) t.join();
      ASSERT_EQ(failures_.load(), 0) << "after round " << round;
    }
    for (auto& slot : transfer_) {
      VerifyAndFreeTransferred(slot.exchange(nullptr));
    }
    EXPECT_EQ(failures_.load(), 0);
    EXPECT_EQ(allocs_.load(), frees_.load()) << "the test lost an object";
    EXPECT_GT(transfers_.load(), kRounds * kThreads * kItersPerRound / 10);
    const cidmalloc_stats after = Stats();
    if (after.counting) {
      // Exact counters: at least the test's own operations were counted.
      EXPECT_GE(after.mallocs - before.mallocs,
                static_cast<unsigned long long>(allocs_.load()));
      EXPECT_GE(after.frees - before.frees,
                static_cast<unsigned long long>(frees_.load()));
    }
    printf("allocs %ld (calloc %ld), reallocs %ld, transfers %ld; mode %s, "
           "registration %s, slabs %u (highest ID %u)\n",
           allocs_.load(), callocs_.load(), reallocs_.load(),
           transfers_.load(), after.mode, after.registration, after.slabs,
           after.max_slab_id);
  }
};

TEST_F(CookieStress, ModeIsWhatTheTargetAskedFor) { CheckTargetMode(); }

TEST_F(CookieStress, CookiesSurviveThreadsRoundsAndTransfers) { Run(); }

}  // namespace
