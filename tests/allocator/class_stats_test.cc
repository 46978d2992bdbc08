// The size-class statistics of cidmalloc.h (cidmalloc_get_class_stats,
// cidmalloc_print_class_stats): a process on cidmalloc (malloc =
// "//:cidmalloc") holds objects of one class, frees them on another thread,
// and the class's in-use, cached and free counts follow.  The class is
// 5 KiB objects, which nothing else in the test allocates.
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "allocator/api/cidmalloc.h"
#include "gtest/gtest.h"

namespace {

constexpr size_t kRequest = 5000;

// The smallest class whose objects hold `size` bytes, or 0.
unsigned ClassOf(size_t size) {
  for (unsigned cls = 1; cls < cidmalloc_num_classes(); ++cls) {
    cidmalloc_class_stats s;
    if (cidmalloc_get_class_stats(cls, &s, sizeof s) == sizeof s &&
        s.size >= size) {
      return cls;
    }
  }
  return 0;
}

cidmalloc_class_stats Get(unsigned cls) {
  cidmalloc_class_stats s;
  memset(&s, 0xab, sizeof s);
  EXPECT_EQ(cidmalloc_get_class_stats(cls, &s, sizeof s), sizeof s);
  return s;
}

void ExpectConsistent(const cidmalloc_class_stats& s) {
  EXPECT_EQ(s.in_use_objects + s.cached_objects + s.free_objects, s.objects);
  EXPECT_EQ(s.spans == 0, s.objects == 0);
  EXPECT_GE(s.span_bytes, s.objects * s.size);
}

TEST(ClassStats, ClassesAndBadArguments) {
  ASSERT_GT(cidmalloc_num_classes(), 2u);
  cidmalloc_class_stats s;
  memset(&s, 0x5a, sizeof s);
  EXPECT_EQ(cidmalloc_get_class_stats(0, &s, sizeof s), 0u);
  EXPECT_EQ(cidmalloc_get_class_stats(cidmalloc_num_classes(), &s, sizeof s),
            0u);
  EXPECT_EQ(s.size, 0x5a5a5a5a5a5a5a5aull);  // Untouched.
  // Sizes grow with the class; the first is the smallest request's.
  unsigned long long last = 0;
  for (unsigned cls = 1; cls < cidmalloc_num_classes(); ++cls) {
    const cidmalloc_class_stats c = Get(cls);
    EXPECT_GT(c.size, last) << cls;
    last = c.size;
    ExpectConsistent(c);
  }
}

TEST(ClassStats, ShorterAndLongerStructs) {
  const unsigned cls = ClassOf(kRequest);
  ASSERT_NE(cls, 0u);
  // An older caller's struct: only its fields are written.
  unsigned long long two[3];
  memset(two, 0x77, sizeof two);
  EXPECT_EQ(cidmalloc_get_class_stats(cls, reinterpret_cast<
                                               cidmalloc_class_stats*>(two),
                                      2 * sizeof(unsigned long long)),
            2 * sizeof(unsigned long long));
  EXPECT_EQ(two[0], Get(cls).size);
  EXPECT_EQ(two[2], 0x7777777777777777ull);
  // A newer caller's: this library's fields, then zeros.
  unsigned char big[sizeof(cidmalloc_class_stats) + 16];
  memset(big, 0x77, sizeof big);
  EXPECT_EQ(cidmalloc_get_class_stats(
                cls, reinterpret_cast<cidmalloc_class_stats*>(big), sizeof big),
            sizeof(cidmalloc_class_stats));
  for (size_t i = sizeof(cidmalloc_class_stats); i < sizeof big; ++i) {
    EXPECT_EQ(big[i], 0) << i;
  }
}

TEST(ClassStats, InUseFollowsTheProgramAcrossThreads) {
  const unsigned cls = ClassOf(kRequest);
  ASSERT_NE(cls, 0u);
  constexpr int kObjects = 600;
  // Not a std::vector: 600 pointers are an object of this very class.
  static void* held[kObjects];
  const cidmalloc_class_stats before = Get(cls);
  ExpectConsistent(before);

  std::thread t([&] {
    for (void*& p : held) {
      p = malloc(kRequest);
      memset(p, 1, kRequest);
    }
  });
  t.join();
  const cidmalloc_class_stats mid = Get(cls);
  ExpectConsistent(mid);
  EXPECT_EQ(mid.in_use_objects, before.in_use_objects + kObjects);
  EXPECT_GE(mid.objects, before.objects + kObjects);
  EXPECT_GT(mid.spans, 0u);

  // Freed here, not on the thread that allocated them (which has exited):
  // they go to this thread's cache or back to their spans, not in use.
  for (void* p : held) free(p);
  const cidmalloc_class_stats after = Get(cls);
  ExpectConsistent(after);
  EXPECT_EQ(after.in_use_objects, before.in_use_objects);
  EXPECT_GT(after.cached_objects, 0u);  // This thread's cache took some.
}

TEST(ClassStats, PrintedTable) {
  const unsigned cls = ClassOf(kRequest);
  ASSERT_NE(cls, 0u);
  std::vector<void*> held;
  for (int i = 0; i < 40; ++i) held.push_back(malloc(kRequest));
  const cidmalloc_class_stats s = Get(cls);

  const int fd = static_cast<int>(syscall(SYS_memfd_create, "table", 0));
  ASSERT_GE(fd, 0);
  cidmalloc_print_class_stats(fd);
  std::string text(1 << 16, '\0');
  const ssize_t n = pread(fd, text.data(), text.size(), 0);
  close(fd);
  ASSERT_GT(n, 0);
  text.resize(static_cast<size_t>(n));
  for (void* p : held) free(p);

  EXPECT_EQ(text.rfind("cidmalloc: class   size  spans  span KiB   objects"
                       "    in use    cached      free\n", 0), 0u)
      << text;
  // The class's row: its number, size, spans, KiB and objects; then in use
  // (not compared: the table reads the counts again).
  char row[128];
  snprintf(row, sizeof row, "cidmalloc: %5u%7llu%7llu%10llu%10llu", cls,
           s.size, s.spans, s.span_bytes / 1024, s.objects);
  EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  EXPECT_NE(text.find("cidmalloc: classes: "), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
