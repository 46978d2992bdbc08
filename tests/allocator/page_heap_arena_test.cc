// tests/allocator/page_heap_arena_test.cc: the page heap's arenas under two
// threads that take and give back page runs at once, each asking for its
// own arena, and hand some of their runs to the other thread to free.
//
// This binary is not linked with cidmalloc: it drives layer 3 directly.
// Each run holds its owner's byte in the first and last word of every page:
// a run handed out twice, or pages shared by two runs, show up as a wrong
// byte.  A run may come from any arena of the node (its thread's own, arena
// 0, or the free blocks of another: page_heap.cc, AllocFromArenas); each
// must go back to the heap it came from, whichever thread frees it, and
// leave the buddy invariants of every heap intact
// (page_heap::CheckInvariants) with every page free at the end.
#include <stdint.h>
#include <stdio.h>

#include <atomic>
#include <thread>
#include <vector>

#include "allocator/os/config.h"
#include "allocator/page_heap/page_heap.h"
#include "gtest/gtest.h"

namespace {

namespace ph = ::cidmalloc::page_heap;

constexpr size_t kPage = ph::kPageSize;

struct Run {
  uintptr_t p;
  uint32_t pages;
  uint8_t byte;
};

uint64_t Pattern(uint8_t byte) { return 0x0101010101010101u * byte; }

void Mark(const Run& r) {
  for (uint32_t i = 0; i < r.pages; ++i) {
    uint64_t* page = reinterpret_cast<uint64_t*>(r.p + i * kPage);
    page[0] = page[kPage / 8 - 1] = Pattern(r.byte);
  }
}

bool Intact(const Run& r) {
  for (uint32_t i = 0; i < r.pages; ++i) {
    const uint64_t* page = reinterpret_cast<const uint64_t*>(r.p + i * kPage);
    if (page[0] != Pattern(r.byte) || page[kPage / 8 - 1] != Pattern(r.byte)) {
      return false;
    }
  }
  return true;
}

// A one-slot mailbox per direction: runs the other thread is to free.
struct Mailbox {
  std::atomic<uintptr_t> p{0};
  uint32_t pages = 0;  // Written before the release store of p.
  uint8_t byte = 0;
};

struct Outcome {
  int bad_content = 0;
  int null = 0;
  int from_arena[ph::kArenasPerNode] = {};
};

void Worker(int arena, uint8_t byte, Mailbox* out, Mailbox* in,
            Outcome* result) {
  uint64_t s = 0x9e3779b97f4a7c15u * static_cast<uint64_t>(arena + 1);
  std::vector<Run> live;
  for (int step = 0; step < 30000; ++step) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    // Free what the other thread handed over.
    const uintptr_t q = in->p.load(std::memory_order_acquire);
    if (q != 0) {
      const Run r{q, in->pages, in->byte};
      if (!Intact(r)) ++result->bad_content;
      ph::FreeLarge(ph::LookupChunk(q), q);
      // Release: pairs with the sender's acquire load of an empty slot.
      in->p.store(0, std::memory_order_release);
    }
    if (live.size() < 6 || (s & 1)) {
      const uint32_t pages = 9 + static_cast<uint32_t>((s >> 8) % 56);
      bool zeroed = false;
      void* v = ph::AllocLarge(0, arena, pages * kPage, kPage, &zeroed);
      if (v == nullptr) {
        ++result->null;
        continue;
      }
      const uintptr_t p = reinterpret_cast<uintptr_t>(v);
      ++result->from_arena[ph::LookupChunk(p)->arena];
      live.push_back({p, pages, byte});
      Mark(live.back());
    } else {
      const size_t i = (s >> 16) % live.size();
      const Run r = live[i];
      live[i] = live.back();
      live.pop_back();
      if (!Intact(r)) ++result->bad_content;
      // Acquire: pairs with the receiver's release store that emptied it.
      if ((s & 6) == 0 && out->p.load(std::memory_order_acquire) == 0) {
        out->pages = r.pages;
        out->byte = r.byte;
        // Release: the run's marks and the fields above before the pointer.
        out->p.store(r.p, std::memory_order_release);
      } else {
        ph::FreeLarge(ph::LookupChunk(r.p), r.p);
      }
    }
  }
  for (const Run& r : live) {
    if (!Intact(r)) ++result->bad_content;
    ph::FreeLarge(ph::LookupChunk(r.p), r.p);
  }
}

TEST(PageHeapArenas, TwoThreadsTakeAndFreeRunsAtOnce) {
  static cidmalloc::os::Config config;
  config.release_threshold = size_t{1} << 20;
  config.release_delay_ms = 0;
  ph::Init(&config);

  Mailbox to_second, to_first;
  Outcome first, second;
  std::thread t1(Worker, 0, uint8_t{0x11}, &to_second, &to_first, &first);
  std::thread t2(Worker, 1, uint8_t{0x22}, &to_first, &to_second, &second);
  t1.join();
  t2.join();
  for (Mailbox* m : {&to_first, &to_second}) {
    const uintptr_t q = m->p.load(std::memory_order_acquire);
    if (q != 0) ph::FreeLarge(ph::LookupChunk(q), q);
  }
  ph::CheckInvariants();
  EXPECT_EQ(first.null + second.null, 0);
  EXPECT_EQ(first.bad_content + second.bad_content, 0)
      << "a run was handed out twice or overlapped another";
  // Whether the threads met on arena 0 (and arena 1 grew) depends on the
  // scheduler; reported, not asserted.
  printf("runs of the first thread from arenas 0/1: %d/%d; of the second: "
         "%d/%d\n",
         first.from_arena[0], first.from_arena[1], second.from_arena[0],
         second.from_arena[1]);
  // Everything went back: each heap's free pages cover all it reserved.
  ph::NodeStats stats;
  ph::GetNodeStats(0, &stats);
  EXPECT_EQ(stats.free_bytes, stats.mapped_bytes - stats.huge_bytes);
}

}  // namespace
