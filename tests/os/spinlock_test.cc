// tests/os/spinlock_test.cc: os::SpinLock, with one thread (a plain load
// and store, os::SingleThreaded) and across the process's first
// pthread_create, and with several threads.
//
// One test: the process is single-threaded only until its first thread, so
// the order of the steps matters.  This binary uses glibc's malloc.
#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include "allocator/os/spinlock.h"
#include "gtest/gtest.h"

namespace {

namespace os = ::cidmalloc::os;

os::SpinLock g_lock;
std::atomic<bool> g_taken{false};
uint64_t g_counter = 0;  // Guarded by g_lock.

void* TakeOnce(void*) {
  g_lock.Lock();
  g_taken.store(true, std::memory_order_relaxed);
  g_lock.Unlock();
  return nullptr;
}

void* Count(void*) {
  for (int i = 0; i < 200000; ++i) {
    os::SpinLockHolder h(&g_lock);
    ++g_counter;
  }
  return nullptr;
}

TEST(SpinLock, OneThreadThenTheFirstThreadThenSeveral) {
  // gtest_main starts no thread: glibc still counts one.
  ASSERT_TRUE(os::SingleThreaded());
  g_lock.Lock();
  EXPECT_TRUE(g_lock.IsHeld());
  EXPECT_EQ(os::t_spinlocks_held, 1u);
  EXPECT_FALSE(g_lock.TryLock()) << "TryLock took a held lock";
  g_lock.Unlock();
  EXPECT_FALSE(g_lock.IsHeld());
  EXPECT_EQ(os::t_spinlocks_held, 0u);
  ASSERT_TRUE(g_lock.TryLock());
  g_lock.Unlock();

  // Taken by the single-thread path; the first thread must wait for it.
  g_lock.Lock();
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, TakeOnce, nullptr), 0);
  EXPECT_FALSE(os::SingleThreaded());
  usleep(100 * 1000);
  EXPECT_FALSE(g_taken.load(std::memory_order_relaxed))
      << "a thread took the lock the only thread held when it was created";
  g_lock.Unlock();
  ASSERT_EQ(pthread_join(t, nullptr), 0);
  EXPECT_TRUE(g_taken.load(std::memory_order_relaxed));

  // Several threads: no increment lost.
  pthread_t threads[3];
  for (pthread_t& th : threads) {
    ASSERT_EQ(pthread_create(&th, nullptr, Count, nullptr), 0);
  }
  Count(nullptr);
  for (pthread_t& th : threads) ASSERT_EQ(pthread_join(th, nullptr), 0);
  EXPECT_EQ(g_counter, 4u * 200000u);
}

}  // namespace
