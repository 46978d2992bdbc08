// prodcons: producers allocate, consumers on other threads free
// (bench/workloads/README.md).
//
// T/2 producers (at least 1) allocate objects of random sizes (16 B..1 KiB,
// one time in 32 up to 8 KiB), stamp them (common.h) and push them, a small
// batch at a time, through one bounded FIFO queue (mutex + condition
// variables) to T - T/2 consumers (at least 1), which check and free them.
// Every object is therefore freed on a thread other than the one that
// allocated it.
//
// Checks: each object's stamp; per producer, the serials a consumer sees
// increase (the queue is FIFO); the number and checksum of the objects
// consumed equal those produced, per producer.
//
//   --threads=N   producers + consumers (default 2: one of each)
//   --quick       1/20 of the objects
#include <stdint.h>
#include <stdlib.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;

constexpr size_t kCapacity = 4096;  // queue slots
constexpr size_t kBatch = 16;       // objects moved per lock acquisition
constexpr size_t kWakeConsumers = 512;          // queued objects
constexpr size_t kWakeProducers = kCapacity / 2;

class Queue {
 public:
  explicit Queue(size_t producers) : ring_(kCapacity), live_(producers) {}

  // Appends items[0, n), n <= kBatch, waiting while the queue is full.
  void Push(void* const* items, size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    while (kCapacity - count_ < n) {
      ++waiting_producers_;
      not_full_.wait(lock);
      --waiting_producers_;
    }
    for (size_t i = 0; i < n; ++i) {
      ring_[(head_ + count_ + i) % kCapacity] = items[i];
    }
    count_ += n;
    // Wake sleeping consumers only once there is a fair amount of work, so
    // that a consumer faster than the producers does not sleep and wake
    // once per batch.
    if (waiting_consumers_ > 0 && count_ >= kWakeConsumers) {
      not_empty_.notify_all();
    }
  }

  // Takes up to kBatch items into out[]; returns how many, 0 once every
  // producer has finished and the queue is empty.
  size_t Pop(void** out) {
    std::unique_lock<std::mutex> lock(mu_);
    while (count_ == 0) {
      if (live_ == 0) return 0;
      ++waiting_consumers_;
      not_empty_.wait(lock);
      --waiting_consumers_;
    }
    size_t n = std::min(count_, kBatch);
    for (size_t i = 0; i < n; ++i) out[i] = ring_[(head_ + i) % kCapacity];
    head_ = (head_ + n) % kCapacity;
    count_ -= n;
    // The same for producers blocked on a full queue: wake them once half
    // of it is free.
    if (waiting_producers_ > 0 && count_ <= kWakeProducers) {
      not_full_.notify_all();
    }
    return n;
  }

  // The last producer to finish wakes every consumer: they drain the queue
  // (whatever its length) and return.
  void ProducerDone() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--live_ == 0) not_empty_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::vector<void*> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
  size_t live_;  // producers still running
  size_t waiting_producers_ = 0;
  size_t waiting_consumers_ = 0;
};

struct alignas(64) ProducerStats {
  uint64_t sum = 0;  // sum of IdSum(id) over the objects produced
};

struct alignas(64) ConsumerStats {
  std::vector<uint64_t> count;  // per producer
  std::vector<uint64_t> sum;    // per producer
};

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "prodcons";
  wl::Args args(argc, argv, "");
  const int threads = args.Threads(2);
  const size_t producers = std::max<size_t>(1, static_cast<size_t>(threads) / 2);
  const size_t consumers =
      std::max<size_t>(1, static_cast<size_t>(threads) - producers);
  // Full size: 2-4 s under glibc malloc on the 2-vCPU reference machine.
  uint64_t total = 12'000'000;
  if (args.quick()) total /= 20;
  const uint64_t per_producer = total / producers;

  Queue queue(producers);
  std::vector<ProducerStats> pstats(producers);
  std::vector<ConsumerStats> cstats(consumers);

  double t0 = wl::NowSeconds();
  std::vector<std::thread> pool;
  for (size_t p = 0; p < producers; ++p) {
    pool.emplace_back([&, p] {
      wl::Rng rng(2000 + p);
      void* batch[kBatch];
      size_t n = 0;
      uint64_t sum = 0;
      for (uint64_t serial = 0; serial < per_producer; ++serial) {
        size_t size = rng.Chance(1, 32) ? rng.Range(1025, 8192)
                                        : rng.Range(16, 1024);
        void* obj = malloc(size);
        if (obj == nullptr) Fail("malloc(%zu) returned NULL", size);
        uint64_t id = serial * producers + p;
        if (id > wl::kIdMask) Fail("object id overflow");
        wl::Stamp(obj, size, id);
        sum += wl::IdSum(id);
        batch[n++] = obj;
        if (n == kBatch) {
          queue.Push(batch, n);
          n = 0;
        }
      }
      if (n > 0) queue.Push(batch, n);
      pstats[p].sum = sum;
      queue.ProducerDone();
    });
  }
  for (size_t c = 0; c < consumers; ++c) {
    pool.emplace_back([&, c] {
      std::vector<uint64_t> count(producers, 0);
      std::vector<uint64_t> sum(producers, 0);
      // Next serial expected at least, per producer (FIFO order).
      std::vector<uint64_t> next(producers, 0);
      void* batch[kBatch];
      size_t n;
      while ((n = queue.Pop(batch)) > 0) {
        for (size_t i = 0; i < n; ++i) {
          uint64_t id;
          size_t size;
          wl::CheckStamp(batch[i], "consumer", &id, &size);
          uint64_t p = id % producers;
          uint64_t serial = id / producers;
          if (serial < next[p]) {
            Fail("consumer %zu: producer %llu's object %llu after %llu "
                 "(duplicate or out of order)", c,
                 static_cast<unsigned long long>(p),
                 static_cast<unsigned long long>(serial),
                 static_cast<unsigned long long>(next[p] - 1));
          }
          next[p] = serial + 1;
          count[p]++;
          sum[p] += wl::IdSum(id);
          free(batch[i]);
        }
      }
      cstats[c].count = std::move(count);
      cstats[c].sum = std::move(sum);
    });
  }
  for (auto& t : pool) t.join();
  double secs = wl::NowSeconds() - t0;

  for (size_t p = 0; p < producers; ++p) {
    uint64_t count = 0, sum = 0;
    for (const ConsumerStats& cs : cstats) {
      count += cs.count[p];
      sum += cs.sum[p];
    }
    if (count != per_producer) {
      Fail("producer %zu: %llu objects consumed, %llu produced", p,
           static_cast<unsigned long long>(count),
           static_cast<unsigned long long>(per_producer));
    }
    if (sum != pstats[p].sum) {
      Fail("producer %zu: checksum consumed 0x%016llx != produced 0x%016llx",
           p, static_cast<unsigned long long>(sum),
           static_cast<unsigned long long>(pstats[p].sum));
    }
  }
  uint64_t objects = per_producer * producers;
  uint64_t checksum = 0;
  for (const ProducerStats& ps : pstats) checksum += ps.sum;
  printf("metric objects_per_s=%.0f\n", static_cast<double>(objects) / secs);
  wl::Ok(secs, "producers=%zu consumers=%zu objects=%llu checksum=%016llx",
         producers, consumers, static_cast<unsigned long long>(objects),
         static_cast<unsigned long long>(checksum));
  return 0;
}
