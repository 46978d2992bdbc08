// tests/allocator/api_conformance_glibc_test.cc: glibc's extensions
// (mallopt, mallinfo, malloc_trim, malloc_stats, free_sized), the
// __libc_* names, and cidmalloc.h's statistics (part of the
// api_conformance_*_test binaries; see api_conformance_test.cc).

#include <sched.h>

#include <thread>

#include "tests/allocator/api_conformance.h"

namespace {

using namespace cidmalloc_conformance;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------
// glibc extensions.

TEST(Glibc, MalloptAcceptsGlibcParametersAndRejectsUnknownOnes) {
  for (int param : {M_MXFAST, M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD,
                    M_MMAP_MAX, M_CHECK_ACTION, M_PERTURB, M_ARENA_TEST,
                    M_ARENA_MAX}) {
    EXPECT_EQ(mallopt(param, 1 << 20), 1) << param;
  }
  EXPECT_EQ(mallopt(12345, 1), 0);
  EXPECT_EQ(mallopt(0, 1), 0);
}

TEST(Glibc, MallinfoTracksTenMebibytes) {
  malloc_trim(0);
  const struct mallinfo2 before = mallinfo2();
  EXPECT_GT(before.arena, 0u);
  EXPECT_GT(before.uordblks, 0u);
  EXPECT_EQ(before.fordblks, before.arena - before.uordblks);

  // 10 MiB as page runs and 10 MiB as one huge block.
  std::vector<void*> runs;
  for (int i = 0; i < 10; ++i) {
    void* p = malloc(kMiB);
    ASSERT_NE(p, nullptr);
    Dirty(p, 1, kMiB);
    runs.push_back(p);
  }
  void* huge = malloc(10 * kMiB);
  ASSERT_NE(huge, nullptr);
  Dirty(huge, 1, 10 * kMiB);
  const struct mallinfo2 during = mallinfo2();
  EXPECT_GE(during.uordblks, before.uordblks + 19 * kMiB);
  EXPECT_GE(during.arena, before.arena + 10 * kMiB);

  // The int interface reports the same numbers (they fit in an int here).
  const struct mallinfo2 m2 = mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const struct mallinfo m1 = mallinfo();  // Deprecated, still exported.
#pragma GCC diagnostic pop
  EXPECT_EQ(static_cast<size_t>(m1.arena), m2.arena);
  EXPECT_EQ(static_cast<size_t>(m1.uordblks), m2.uordblks);
  EXPECT_EQ(static_cast<size_t>(m1.fordblks), m2.fordblks);

  for (void* p : runs) free(p);
  free(huge);
  EXPECT_EQ(malloc_trim(0), 1) << "10 MiB of dirty free pages to release";
  const struct mallinfo2 after = mallinfo2();
  EXPECT_LE(after.uordblks + 19 * kMiB, during.uordblks);
  EXPECT_LE(after.arena + 10 * kMiB, during.arena);  // The huge mapping.
  EXPECT_GE(after.keepcost, 10 * kMiB);  // Free pages returned to the OS.
}

TEST(Glibc, MallocTrimReportsWhetherItReleasedAndMemoryStillWorks) {
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) {
    void* p = malloc(512 * kKiB);
    ASSERT_NE(p, nullptr);
    Dirty(p, 0xab, 512 * kKiB);
    v.push_back(p);
  }
  for (void* p : v) free(p);
  EXPECT_EQ(malloc_trim(0), 1);
  EXPECT_EQ(malloc_trim(0), 0) << "nothing left to release";
  // Everything works afterwards, and released pages come back usable.
  for (size_t size : {size_t{10}, size_t{1000}, size_t{60000},
                      512 * kKiB, 3 * kMiB}) {
    for (int i = 0; i < 8; ++i) {
      void* p = malloc(size);
      ASSERT_NE(p, nullptr);
      FillPattern(p, size, 9);
      ASSERT_EQ(FirstPatternMismatch(p, size, 9), size);
      v[i] = p;
    }
    for (int i = 0; i < 8; ++i) free(v[i]);
  }
  EXPECT_GE(malloc_trim(1 << 30), 0);  // A pad larger than the heap.
}

TEST(Glibc, MallocStatsWritesASummaryToStderr) {
  cidmalloc_test::FdCapture capture(2);
  ASSERT_TRUE(capture.ok());
  malloc_stats();
  const std::string text = capture.Finish();
  EXPECT_NE(text.find("cidmalloc: mode "), std::string::npos) << text;
  EXPECT_NE(text.find("cidmalloc: node 0: mapped "), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

// The unsigned value of attribute `name` in the XML element that starts at
// `at`.
uint64_t XmlAttr(const std::string& text, size_t at, const char* name) {
  const std::string key = std::string(" ") + name + "=\"";
  const size_t end = text.find('>', at);
  const size_t k = text.find(key, at);
  if (k == std::string::npos || k > end) return ~uint64_t{0};
  return strtoull(text.c_str() + k + key.size(), nullptr, 10);
}

// Sum of attribute `name` over the elements that start with `prefix`.
uint64_t XmlSum(const std::string& text, const std::string& prefix,
                const char* name, size_t* count) {
  uint64_t sum = 0;
  *count = 0;
  for (size_t at = text.find(prefix); at != std::string::npos;
       at = text.find(prefix, at + 1)) {
    sum += XmlAttr(text, at, name);
    ++*count;
  }
  return sum;
}

std::string MallocInfoText() {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return "open_memstream failed";
  const int rc = malloc_info(0, f);
  fclose(f);
  std::string text(buf, len);
  free(buf);
  return rc == 0 ? text : "malloc_info returned " + std::to_string(rc);
}

TEST(Glibc, MallocInfoDescribesCidmallocsHeapsInGlibcsXml) {
  // 20,000 objects of 100 bytes (class 97..112) freed: more than one ID's
  // cache keeps, so the central lists hold some; a huge block stays live.
  std::vector<void*> v;
  for (int i = 0; i < 20000; ++i) v.push_back(malloc(100));
  for (void* p : v) free(p);
  void* huge = malloc(3 * kMiB);
  ASSERT_NE(huge, nullptr);
  Dirty(huge, 1, 3 * kMiB);
  struct cidmalloc_stats before;
  cidmalloc_get_stats(&before);
  const std::string text = MallocInfoText();
  struct cidmalloc_stats after;
  cidmalloc_get_stats(&after);

  ASSERT_EQ(text.rfind("<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n", 0),
            0u) << text;
  ASSERT_GE(text.size(), 11u);
  EXPECT_EQ(text.substr(text.size() - 10), "</malloc>\n") << text;
  size_t heaps = 0;
  XmlSum(text, "<heap nr=", "nr", &heaps);
  EXPECT_EQ(heaps, static_cast<size_t>(cidmalloc::os::NumNodes()));

  // The 100-byte class's free objects on some node, as glibc lists free
  // chunks by size.
  size_t n = 0;
  const uint64_t free100 =
      XmlSum(text, "<size from=\"97\" to=\"112\"", "count", &n);
  EXPECT_GE(n, 1u) << text;
  EXPECT_GT(free100, 0u) << text;

  // The whole's totals add up the heaps' (the last "rest" is the whole's).
  size_t sizes = 0, rests = 0, currents = 0;
  const uint64_t size_count = XmlSum(text, "<size from=", "count", &sizes);
  const size_t last_rest = text.rfind("<total type=\"rest\"");
  EXPECT_EQ(XmlAttr(text, last_rest, "count"), size_count) << text;
  const uint64_t rest_bytes =
      XmlSum(text, "<total type=\"rest\"", "size", &rests);
  EXPECT_EQ(rests, heaps + 1);
  EXPECT_EQ(XmlAttr(text, last_rest, "size") * 2, rest_bytes) << text;

  // Bytes mapped as cidmalloc_get_stats reports them, the huge block among
  // them.
  uint64_t mapped_before = 0, mapped_after = 0;
  for (unsigned node = 0; node < before.num_nodes; ++node) {
    mapped_before += before.node_mapped[node];
    mapped_after += after.node_mapped[node];
  }
  const size_t last_current = text.rfind("<system type=\"current\"");
  const uint64_t current = XmlAttr(text, last_current, "size");
  EXPECT_GE(current, mapped_before);
  EXPECT_LE(current, mapped_after);
  EXPECT_EQ(XmlSum(text, "<system type=\"current\"", "size", &currents),
            2 * current);
  const size_t mmap_at = text.find("<total type=\"mmap\"");
  ASSERT_NE(mmap_at, std::string::npos) << text;
  EXPECT_GE(XmlAttr(text, mmap_at, "size"), 3 * kMiB) << text;
  free(huge);
}

TEST(Glibc, MallocInfoRejectsOptionsAndReportsAFailingStream) {
  errno = 0;
  EXPECT_EQ(malloc_info(1, stdout), -1);
  EXPECT_EQ(errno, EINVAL);
  FILE* full = fopen("/dev/full", "w");
  ASSERT_NE(full, nullptr);
  setvbuf(full, nullptr, _IONBF, 0);  // Every write reaches the device.
  EXPECT_EQ(malloc_info(0, full), -1);
  fclose(full);
}

TEST(Glibc, FreeSizedAndFreeAlignedSized) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{5000},
                      size_t{300000}, 3 * kMiB}) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr);
    free_sized(p, size);
    EXPECT_TRUE(LooksFreed(p)) << size;
    for (size_t align : {size_t{16}, size_t{64}, size_t{4096}, 2 * kMiB}) {
      void* q = aligned_alloc(align, size);
      ASSERT_NE(q, nullptr);
      free_aligned_sized(q, align, size);
      EXPECT_TRUE(LooksFreed(q)) << size << " " << align;
    }
  }
  free_sized(nullptr, 0);
  free_aligned_sized(nullptr, 64, 0);
}

TEST(Glibc, LibcAliasesAreCidmalloc) {
  // In a static link the aliases are the same functions.
  EXPECT_EQ(reinterpret_cast<void*>(&__libc_malloc),
            reinterpret_cast<void*>(&malloc));
  EXPECT_EQ(reinterpret_cast<void*>(&__libc_free),
            reinterpret_cast<void*>(&free));
  EXPECT_EQ(reinterpret_cast<void*>(&cfree), reinterpret_cast<void*>(&free));

  void* a = __libc_malloc(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(KindOf(a), BlockKind::kSmall);
  EXPECT_GE(malloc_usable_size(a), 100u);
  void* b = __libc_calloc(10, 10);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(FirstNonZero(b, 100), 100u);
  EXPECT_EQ(KindOf(b), BlockKind::kSmall);
  FillPattern(a, 100, 11);
  void* c = __libc_realloc(a, 200000);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(FirstPatternMismatch(c, 100, 11), 100u);
  EXPECT_EQ(KindOf(c), BlockKind::kLarge);
  void* d = __libc_memalign(256, 1000);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(IsAligned(d, 256));
  EXPECT_GE(malloc_usable_size(d), 1000u);
  void* e = __libc_valloc(10);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(IsAligned(e, kPage));
  void* f = __libc_pvalloc(10);
  ASSERT_NE(f, nullptr);
  EXPECT_GE(malloc_usable_size(f), kPage);
  void* g = nullptr;
  ASSERT_EQ(__posix_memalign(&g, 128, 10), 0);
  EXPECT_TRUE(IsAligned(g, 128));
  free(b);
  __libc_free(c);
  free(d);
  cfree(e);
  __libc_free(f);
  free(g);
  for (void* p : {b, c, d, e, f, g}) EXPECT_TRUE(LooksFreed(p));
}

TEST(Glibc, LibcInternalAllocationsComeFromCidmalloc) {
  // glibc's own allocations (strdup, open_memstream...) resolve malloc to
  // the executable's definition: the blocks must be ours.
  char* s = strdup("cidmalloc");
  ASSERT_NE(s, nullptr);
  EXPECT_NE(KindOf(s), BlockKind::kNotOurs);
  EXPECT_GE(malloc_usable_size(s), 10u);
  free(s);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "malloc"), reinterpret_cast<void*>(&malloc));
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "free"), reinterpret_cast<void*>(&free));
}

// ---------------------------------------------------------------------------
// cidmalloc.h.

TEST(CidmallocStats, ModeAndTopology) {
  const cidmalloc_stats s = Stats();
  ASSERT_NE(s.mode, nullptr);
  const std::string mode = s.mode;
  EXPECT_TRUE(mode == "cid" || mode == "cpu" || mode == "none") << mode;
  const cidmalloc::rseq::ProcessState& p = cidmalloc::rseq::Process();
  EXPECT_EQ(mode, cidmalloc::rseq::ModeName(p.mode));
  EXPECT_STREQ(s.registration, cidmalloc::rseq::RegistrationName(p.registration));
  EXPECT_EQ(s.num_rseq_ids, p.num_rseq_ids);
  EXPECT_EQ(s.num_nodes, static_cast<unsigned>(cidmalloc::os::NumNodes()));
  EXPECT_GE(s.num_nodes, 1u);

  // The mode the target asked for, lowered to what the kernel offers.
  const char* want = getenv("CIDMALLOC_RSEQ_MODE");
  if (want != nullptr) {
    const cidmalloc::rseq::Mode asked =
        strcmp(want, "none") == 0  ? cidmalloc::rseq::Mode::kNone
        : strcmp(want, "cpu") == 0 ? cidmalloc::rseq::Mode::kCpu
                                   : cidmalloc::rseq::Mode::kCid;
    const cidmalloc::rseq::Mode expected =
        asked < p.best_mode ? asked : p.best_mode;
    EXPECT_EQ(mode, cidmalloc::rseq::ModeName(expected));
  }
}

TEST(CidmallocStats, SlabsAndMemoryAfterAllocating) {
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) v.push_back(malloc(static_cast<size_t>(i % 500) + 1));
  const cidmalloc_stats s = Stats();
  EXPECT_GE(s.slabs, 1u);
  // Every slab's ID counts once; a cid with slabs on several nodes once.
  EXPECT_GE(s.ids_seen, 1u);
  EXPECT_LE(s.ids_seen, s.slabs);
  if (strcmp(s.mode, "none") != 0) {
    // A cid stays below the cpus allowed, a cpu below the cpus possible.
    EXPECT_LE(s.ids_seen, static_cast<unsigned>(sysconf(_SC_NPROCESSORS_CONF)));
  }
  EXPECT_GE(s.slab_bytes, s.slabs * 1024ull);
  EXPECT_GT(s.meta_bytes, 0u);
  EXPECT_GT(TotalOf(s.node_mapped, s.num_nodes), 0u);
  EXPECT_GT(TotalOf(s.node_in_use, s.num_nodes), 0u);
  for (unsigned n = 0; n < s.num_nodes; ++n) {
    EXPECT_LE(s.node_released[n], s.node_free[n]) << n;
    EXPECT_LE(s.node_free[n] + s.node_in_use[n], s.node_mapped[n]) << n;
  }
  if (s.num_nodes == 1) {
    EXPECT_EQ(s.node_bind_failures[0], 0u);
  }
  for (void* p : v) free(p);
}

TEST(CidmallocStats, CountersFollowCidmallocStats) {
  const bool counting = getenv("CIDMALLOC_STATS") != nullptr &&
                        strcmp(getenv("CIDMALLOC_STATS"), "1") == 0;
  const cidmalloc_stats before = Stats();
  EXPECT_EQ(before.counting, counting ? 1 : 0);
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) v.push_back(malloc(64));
  v.push_back(malloc(300000));
  for (void* p : v) free(p);
  const cidmalloc_stats after = Stats();
  if (!counting) {
    EXPECT_EQ(after.mallocs, 0u);
    EXPECT_EQ(after.cache_hits, 0u);
    EXPECT_EQ(after.frees, 0u);
    EXPECT_EQ(after.remote_frees, 0u);
    EXPECT_EQ(after.local_allocs, 0u);
  } else {
    EXPECT_GE(after.mallocs - before.mallocs, 1001u);
    EXPECT_GE(after.frees - before.frees, 1001u);
    EXPECT_GT(after.cache_hits, before.cache_hits);
    EXPECT_LE(after.cache_hits, after.mallocs);
    EXPECT_LE(after.local_allocs, after.mallocs);
    if (after.num_nodes == 1) {
      EXPECT_EQ(after.remote_frees, 0u);
      EXPECT_EQ(after.local_allocs, after.mallocs);
    }
  }
}

// cache_hits counts only what an ID's cache served (stats.cc CountAlloc):
// right after malloc_trim every cache is empty, so a fresh thread's first
// malloc misses, and its refill serves the next ones.  The thread pins
// itself to the cpu it starts on, so that cpu mode keeps one slab, and is
// the only thread that allocates meanwhile (the main thread waits in join;
// the block array is on its stack).
TEST(CidmallocStats, AFreshThreadMissesFirstThenHits) {
  if (Stats().counting == 0) GTEST_SKIP() << "counting is off (CIDMALLOC_STATS)";
  constexpr int kBlocks = 200;
  cidmalloc_stats s0{}, s1{}, s2{};
  bool pinned = false;
  std::thread t([&] {
    pinned = cidmalloc_test::PinToCpu(sched_getcpu());
    void* blocks[kBlocks];
    malloc_trim(0);
    s0 = Stats();
    blocks[0] = malloc(64);
    s1 = Stats();
    for (int i = 1; i < kBlocks; ++i) blocks[i] = malloc(64);
    s2 = Stats();
    for (void* p : blocks) free(p);
  });
  t.join();
  ASSERT_TRUE(pinned);
  EXPECT_EQ(s1.mallocs - s0.mallocs, 1u);
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 0u)
      << "the first malloc after malloc_trim counted as a cache hit";
  EXPECT_EQ(s2.mallocs - s1.mallocs, uint64_t{kBlocks - 1});
  EXPECT_GE(s2.cache_hits - s1.cache_hits, 1u)
      << "nothing the refill brought was counted as a hit";
  EXPECT_LE(s2.cache_hits - s1.cache_hits, uint64_t{kBlocks - 1});
  if (s2.num_nodes == 1) {
    // One node: every block is node-local.
    EXPECT_EQ(s2.local_allocs - s0.local_allocs, uint64_t{kBlocks});
  }
}

TEST(CidmallocStats, PrintStatsWritesTheSummaryToTheGivenFd) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // ids_seen only grows (an ID that had a slab keeps it), but the thread
  // may move to another cpu between two reads (cpu mode, old_kernel VM):
  // the printed count lies between the counts read before and after.
  const cidmalloc_stats before = Stats();
  cidmalloc_print_stats(fds[1]);
  close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, n);
  close(fds[0]);
  const cidmalloc_stats s = Stats();
  EXPECT_NE(text.find(std::string("cidmalloc: mode ") + s.mode),
            std::string::npos)
      << text;
  const std::string ids = strcmp(s.mode, "cid") == 0   ? "cids"
                          : strcmp(s.mode, "cpu") == 0 ? "cpus"
                                                       : "soft IDs";
  const std::string seen = "cidmalloc: " + ids + " seen ";
  const size_t at = text.find(seen);
  ASSERT_NE(at, std::string::npos) << text;
  char* end = nullptr;
  const unsigned long printed =
      strtoul(text.c_str() + at + seen.size(), &end, 10);
  EXPECT_GE(printed, before.ids_seen) << text;
  EXPECT_LE(printed, s.ids_seen) << text;
  EXPECT_EQ(std::string(end).rfind(", slabs touched ", 0), 0u) << text;
  EXPECT_NE(text.find("cidmalloc: node 0: mapped "), std::string::npos) << text;
  if (s.counting) {
    EXPECT_NE(text.find("cidmalloc: mallocs "), std::string::npos) << text;
  } else {
    EXPECT_NE(text.find("operation counts off"), std::string::npos) << text;
  }
}

// A caller built against an older, shorter struct passes its own size:
// only that much is written, and it matches the full call's fields.  A
// newer, longer struct gets zeros after this library's fields.
TEST(CidmallocStats, SizedStatsWriteOnlyTheCallersStruct) {
  constexpr size_t kOld = offsetof(cidmalloc_stats, idle_drains);
  constexpr size_t kFull = sizeof(cidmalloc_stats);
  alignas(cidmalloc_stats) unsigned char buf[kFull + 64];
  memset(buf, 0xa5, sizeof buf);
  auto* s = reinterpret_cast<cidmalloc_stats*>(buf);
  EXPECT_EQ(cidmalloc_get_stats_sized(s, kOld), kOld);
  for (size_t i = kOld; i < sizeof buf; ++i) {
    ASSERT_EQ(buf[i], 0xa5) << "byte " << i << " written";
  }
  const cidmalloc_stats full = Stats();
  EXPECT_STREQ(s->mode, full.mode);
  EXPECT_EQ(s->num_nodes, full.num_nodes);
  EXPECT_EQ(s->num_rseq_ids, full.num_rseq_ids);
  EXPECT_EQ(s->node_mapped[0] != 0, full.node_mapped[0] != 0);

  memset(buf, 0xa5, sizeof buf);
  EXPECT_EQ(cidmalloc_get_stats_sized(s, sizeof buf), kFull);
  EXPECT_NE(s->background_thread, nullptr);
  EXPECT_STREQ(s->background_thread, full.background_thread);
  for (size_t i = kFull; i < sizeof buf; ++i) {
    ASSERT_EQ(buf[i], 0) << "byte " << i << " past this library's struct";
  }
}

TEST(CidmallocStats, ReleaseFreeMemoryDrainsCachesAndReturnsPages) {
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) {
    void* p = malloc(kMiB);
    ASSERT_NE(p, nullptr);
    Dirty(p, 0xcd, kMiB);
    v.push_back(p);
  }
  for (int i = 0; i < 2000; ++i) v.push_back(malloc(128));
  for (void* p : v) free(p);
  const size_t released = cidmalloc_release_free_memory();
  EXPECT_GE(released, 8 * kMiB);
  const cidmalloc_stats s = Stats();
  if (cidmalloc::rseq::Process().fence_available ||
      cidmalloc::rseq::Process().mode == cidmalloc::rseq::Mode::kNone) {
    EXPECT_EQ(s.cached_bytes, 0u) << "caches not drained";
  }
  for (unsigned n = 0; n < s.num_nodes; ++n) {
    EXPECT_EQ(s.node_free[n], s.node_released[n]) << "node " << n;
  }
  EXPECT_EQ(cidmalloc_release_free_memory(), 0u);
  // Memory works afterwards.
  for (size_t size : {size_t{128}, kMiB}) {
    void* p = malloc(size);
    ASSERT_NE(p, nullptr);
    FillPattern(p, size, 13);
    EXPECT_EQ(FirstPatternMismatch(p, size, 13), size);
    free(p);
  }
}

}  // namespace
