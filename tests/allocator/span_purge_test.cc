// tests/allocator/span_purge_test.cc: the free pages of sparse spans go
// back to the OS (allocator/central/span_purge.cc) on malloc_trim and,
// once the spans settle, on the idle scan, without touching an object in
// use, and a fork child gets back the spans a purge had off the lists.  Driven through RemoveBatch and InsertBatch in a process that runs
// on cidmalloc, with CIDMALLOC_CACHE_IDLE_MS=0 so that only the test runs
// the idle scan.  Each test uses a class of page-multiple objects (each
// object owns its pages) that nothing else in the process uses.
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "allocator/api/cidmalloc.h"
#include "allocator/central/central_list.h"
#include "allocator/central/size_classes.h"
#include "gtest/gtest.h"
#include "tests/allocator/test_util.h"

namespace {

namespace c = ::cidmalloc::central;

// A class of `size` bytes (a multiple of the page size) and its span.
struct ClassShape {
  int cls;
  uintptr_t span_bytes;
  uint32_t per_span;  // Objects in a span.
};
// Initialises the allocator first; `size` must be a class's own size.
ClassShape Shape(size_t size) {
  free(malloc(16));
  const int cls = c::ClassOf(size);
  const c::SizeClassInfo& info = c::Class(cls);
  EXPECT_EQ(info.size, size) << "not a class size";
  return {cls, info.span_bytes, info.limit / info.size};
}

uintptr_t SpanOf(const void* p, const ClassShape& s) {
  return reinterpret_cast<uintptr_t>(p) & ~(s.span_bytes - 1);
}

// Whether every page of [p, p+size) is resident (all) or none is.
enum class Resident : uint8_t { kAll, kNone, kSome };
Resident Residency(const void* p, size_t size) {
  const size_t pages = size / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t in = cidmalloc_test::ResidentPages(p, size);
  if (in == pages) return Resident::kAll;
  return in == 0 ? Resident::kNone : Resident::kSome;
}

// Takes the n objects of one fresh span of the class (the first refill
// of a class nobody used carves a new span in ascending order).
std::vector<void*> TakeSpan(const ClassShape& s) {
  std::vector<void*> objs(s.per_span);
  EXPECT_EQ(c::RemoveBatch(0, s.cls, objs.data(), s.per_span), s.per_span);
  for (void* p : objs) EXPECT_EQ(SpanOf(p, s), SpanOf(objs[0], s));
  return objs;
}

void Fill(void* p, size_t size, int i) { memset(p, 0x40 + i % 64, size); }
bool Holds(const void* p, size_t size, int i) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t k = 0; k < size; k += 512) {
    if (b[k] != 0x40 + i % 64) return false;
  }
  return b[size - 1] == 0x40 + i % 64;
}

TEST(SpanPurge, TrimReturnsThePagesOfFreeObjectsAndKeepsTheOthers) {
  constexpr size_t kSize = 12288;
  const ClassShape s = Shape(kSize);
  ASSERT_GE(s.per_span, 8u);
  std::vector<void*> objs = TakeSpan(s);
  for (uint32_t i = 0; i < s.per_span; ++i) Fill(objs[i], kSize, i);

  // All but three go back to their span, which stays (3 in use).
  const uint32_t kept[] = {0, 4, s.per_span - 1};
  std::vector<void*> back;
  for (uint32_t i = 0; i < s.per_span; ++i) {
    if (i != kept[0] && i != kept[1] && i != kept[2]) back.push_back(objs[i]);
  }
  c::InsertBatch(s.cls, back.data(), back.size(), c::Via::kSpans);
  for (void* p : back) ASSERT_EQ(Residency(p, kSize), Resident::kAll);

  const uint64_t before = c::PurgedSpanBytes();
  malloc_trim(0);
  EXPECT_GE(c::PurgedSpanBytes() - before, back.size() * kSize);
  struct cidmalloc_stats stats;
  ASSERT_EQ(cidmalloc_get_stats(&stats), 0);
  EXPECT_EQ(stats.span_bytes_purged, c::PurgedSpanBytes());
  for (void* p : back) EXPECT_EQ(Residency(p, kSize), Resident::kNone);
  for (uint32_t i : kept) {
    EXPECT_EQ(Residency(objs[i], kSize), Resident::kAll) << "object " << i;
    EXPECT_TRUE(Holds(objs[i], kSize, i)) << "object " << i;
  }
  c::CheckInvariants();

  // The purged objects are handed out again, reading as zero (the default
  // CIDMALLOC_RELEASE_METHOD), and work.
  std::vector<void*> again(back.size());
  ASSERT_EQ(c::RemoveBatch(0, s.cls, again.data(), again.size()),
            again.size());
  for (void* p : again) {
    EXPECT_EQ(SpanOf(p, s), SpanOf(objs[0], s));
    const unsigned char* b = static_cast<const unsigned char*>(p);
    EXPECT_EQ(b[0] | b[kSize / 2] | b[kSize - 1], 0);
    Fill(p, kSize, 7);
  }
  c::CheckInvariants();
  c::InsertBatch(s.cls, again.data(), again.size(), c::Via::kSpans);
  for (uint32_t i : kept) c::InsertBatch(s.cls, &objs[i], 1, c::Via::kSpans);
  c::CheckInvariants();
}

TEST(SpanPurge, IdleScanPurgesASpanOnceNoFreeReachedItForAPeriod) {
  constexpr size_t kSize = 28672;
  const ClassShape s = Shape(kSize);
  std::vector<void*> objs = TakeSpan(s);
  for (uint32_t i = 0; i < s.per_span; ++i) Fill(objs[i], kSize, i);
  const uint32_t half = s.per_span / 2;
  c::InsertBatch(s.cls, objs.data() + 1, half - 1, c::Via::kSpans);

  // The first scan passes over the list: a refill took from it.
  c::ReleaseIdleLists();
  EXPECT_EQ(Residency(objs[1], kSize), Resident::kAll);
  // The second finds the span freed into since the list was last scanned.
  c::ReleaseIdleLists();
  EXPECT_EQ(Residency(objs[1], kSize), Resident::kAll);
  // A free in between makes the span wait one more period.
  c::InsertBatch(s.cls, objs.data() + half, half, c::Via::kSpans);
  c::ReleaseIdleLists();
  EXPECT_EQ(Residency(objs[1], kSize), Resident::kAll);
  c::CheckInvariants();
  // Settled: its free objects' pages go.
  c::ReleaseIdleLists();
  for (uint32_t i = 1; i < 2 * half; ++i) {
    EXPECT_EQ(Residency(objs[i], kSize), Resident::kNone) << "object " << i;
  }
  EXPECT_EQ(Residency(objs[0], kSize), Resident::kAll);
  EXPECT_TRUE(Holds(objs[0], kSize, 0));
  c::CheckInvariants();
  c::InsertBatch(s.cls, objs.data(), 1, c::Via::kSpans);
  for (uint32_t i = 2 * half; i < s.per_span; ++i) {
    c::InsertBatch(s.cls, &objs[i], 1, c::Via::kSpans);
  }
  c::CheckInvariants();
}

// Purges racing with frees into and refills from the same spans, through
// the public API: objects of a few classes get a cookie over their whole
// length, each thread keeps a random live set, and another thread trims
// (which purges every span freed into) all the while.  A purge that
// advised a page of a live object would zero its cookie.
TEST(SpanPurge, PurgesRacingWithFreesAndRefillsKeepLiveObjects) {
  constexpr size_t kSizes[] = {48, 700, 3000, 12288};
  constexpr int kThreads = 2;
  constexpr int kRounds = 300000;
  const uint64_t purged_before = c::PurgedSpanBytes();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> bad{0};
  std::thread trimmer([&] {
    while (!done.load(std::memory_order_relaxed)) {
      malloc_trim(0);
      c::ReleaseIdleLists();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      struct Live {
        unsigned char* p;
        size_t size;
        unsigned char cookie;
      };
      std::vector<Live> live(2000, Live{nullptr, 0, 0});
      const auto check_and_free = [&](Live& l) {
        bool ok = l.p[l.size - 1] == l.cookie;
        for (size_t k = 0; k < l.size; k += 64) ok &= l.p[k] == l.cookie;
        if (!ok) bad.fetch_add(1);
        free(l.p);
        l.p = nullptr;
      };
      for (int r = 0; r < kRounds; ++r) {
        Live& slot = live[rng() % live.size()];
        if (slot.p != nullptr) check_and_free(slot);
        slot.size = kSizes[rng() % 4];
        slot.cookie = static_cast<unsigned char>(1 + rng() % 255);
        slot.p = static_cast<unsigned char*>(malloc(slot.size));
        ASSERT_NE(slot.p, nullptr);
        memset(slot.p, slot.cookie, slot.size);
        // Half the time, free another at once: sparse spans.
        if (rng() % 2 == 0) {
          Live& other = live[rng() % live.size()];
          if (other.p != nullptr && &other != &slot) check_and_free(other);
        }
      }
      for (Live& l : live) {
        if (l.p != nullptr) check_and_free(l);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done.store(true);
  trimmer.join();
  EXPECT_EQ(bad.load(), 0u) << "live objects lost their cookies";
  EXPECT_GT(c::PurgedSpanBytes(), purged_before) << "no purge raced";
  c::CheckInvariants();
}

// fork while another thread purges: a purge that had spans off the lists
// when the child was made is finished in the child (ForkChild), where the
// purging thread does not exist; otherwise those spans' free objects were
// lost to the child.  The parent makes sparse spans before each fork, and
// a thread trims (purges) all the while.
TEST(SpanPurge, AForkChildGetsBackTheSpansAPurgeHadOffTheLists) {
  constexpr size_t kSize = 12288;
  std::atomic<bool> done{false};
  std::thread trimmer([&] {
    while (!done.load(std::memory_order_relaxed)) malloc_trim(0);
  });
  int bad_children = 0;
  for (int round = 0; round < 200; ++round) {
    // A span of objects of which all but one are freed: a purge's work.
    std::vector<void*> objs(21);
    for (void*& p : objs) {
      p = malloc(kSize);
      memset(p, 1, kSize);
    }
    for (size_t i = 1; i < objs.size(); ++i) free(objs[i]);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = c::SpansBeingPurged() == 0 ? 0 : 1;
      c::CheckInvariants();
      void* again = malloc(kSize);
      memset(again, 2, kSize);
      free(again);
      _exit(status);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++bad_children;
    free(objs[0]);
  }
  done.store(true);
  trimmer.join();
  EXPECT_EQ(bad_children, 0) << "children with a purge left unfinished";
  c::CheckInvariants();
}

}  // namespace
