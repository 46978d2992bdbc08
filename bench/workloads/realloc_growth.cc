// realloc_growth: growing buffers and strings, as a JSON builder or a log
// formatter grows its output (bench/workloads/README.md).
//
// Each thread keeps 4 documents under construction and appends pieces of
// random length (mostly 1-32 bytes, some up to 512, a few up to 8 KiB) to a
// random one of them.  Each document grows by one of five policies:
//   exact    realloc to exactly the new length on every append (<= 64 KiB)
//   chunk    realloc in steps of 256 bytes (<= 256 KiB)
//   double   capacity doubles (<= 4 MiB)
//   grow1.5  capacity grows by half (<= 1 MiB)
//   string   std::string::append (<= 1 MiB)
// When a document reaches its target length, half of the raw buffers are
// first shrunk to their length with realloc; then the content is compared
// with what was appended and the document is freed.
//
// Document content is a function of the position: byte i of a document
// with phase f is text[(f + i) % kPeriod] for a fixed pseudo-random text,
// so the check is a memcmp against the text.
//
//   --threads=N   independent builder threads (default 1)
//   --quick       1/20 of the documents
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "bench/workloads/common.h"

namespace {

using wl::Fail;

constexpr size_t kPeriod = 65521;   // the text repeats with this period
constexpr size_t kMaxPiece = 8192;  // longest append
constexpr size_t kBuilders = 4;     // documents under construction per thread

// kPeriod + kMaxPiece bytes, text[i] == text[i % kPeriod]: any piece of up
// to kMaxPiece bytes starting below kPeriod is contiguous.
std::vector<char> MakeText() {
  static const char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
      " {}[]:,\"\"  \n";
  constexpr size_t kAlphabetSize = sizeof(kAlphabet) - 1;
  wl::Rng rng(5000);
  std::vector<char> text(kPeriod + kMaxPiece);
  for (size_t i = 0; i < kPeriod; ++i) {
    text[i] = kAlphabet[rng.Below(kAlphabetSize)];
  }
  for (size_t i = kPeriod; i < text.size(); ++i) text[i] = text[i - kPeriod];
  return text;
}

enum Policy { kExact, kChunk, kDouble, kGrowHalf, kString, kNumPolicies };
const char* const kPolicyName[] = {"exact", "chunk", "double", "grow1.5",
                                   "string"};

struct Builder {
  Policy policy = kExact;
  size_t target = 0;
  size_t phase = 0;
  bool shrink = false;
  char* buf = nullptr;
  size_t len = 0;
  size_t cap = 0;
  std::string str;
};

struct Stats {
  uint64_t docs = 0;
  uint64_t bytes = 0;     // bytes appended
  uint64_t appends = 0;
  uint64_t reallocs = 0;
  uint64_t moved = 0;     // reallocs that returned a new address
  uint64_t checksum = 0;
  uint64_t per_policy[kNumPolicies] = {};
};

class Worker {
 public:
  Worker(const char* text, uint64_t stream) : text_(text), rng_(stream) {}

  Stats Run(uint64_t docs) {
    Builder b[kBuilders];
    for (Builder& x : b) Start(x);
    while (stats_.docs < docs) {
      Builder& x = b[rng_.Below(kBuilders)];
      Append(x, PieceLength());
      if (Length(x) >= x.target) {
        Finish(x);
        Start(x);
      }
    }
    for (Builder& x : b) Finish(x);
    return stats_;
  }

 private:
  size_t PieceLength() {
    uint64_t r = rng_.Below(100);
    if (r < 70) return rng_.Range(1, 32);
    if (r < 95) return rng_.Range(33, 512);
    return rng_.Range(513, kMaxPiece);
  }

  static size_t Length(const Builder& b) {
    return b.policy == kString ? b.str.size() : b.len;
  }

  void Start(Builder& b) {
    b.policy = static_cast<Policy>(rng_.Below(kNumPolicies));
    switch (b.policy) {
      case kExact: b.target = rng_.LogRange(64, 64 << 10); break;
      case kChunk: b.target = rng_.LogRange(256, 256 << 10); break;
      case kDouble: b.target = rng_.LogRange(256, 4 << 20); break;
      case kGrowHalf: b.target = rng_.LogRange(256, 1 << 20); break;
      case kString: b.target = rng_.LogRange(64, 1 << 20); break;
      case kNumPolicies: break;
    }
    b.phase = rng_.Below(kPeriod);
    b.shrink = rng_.Chance(1, 2);
    b.buf = nullptr;
    b.len = 0;
    b.cap = 0;
  }

  void Append(Builder& b, size_t n) {
    const char* src = text_ + (b.phase + Length(b)) % kPeriod;
    stats_.appends++;
    stats_.bytes += n;
    if (b.policy == kString) {
      b.str.append(src, n);
      return;
    }
    size_t need = b.len + n;
    if (need > b.cap) {
      size_t cap = need;
      switch (b.policy) {
        case kChunk: cap = (need + 255) & ~size_t{255}; break;
        case kDouble: cap = std::max(need, std::max<size_t>(64, 2 * b.cap));
          break;
        case kGrowHalf:
          cap = std::max(need, std::max<size_t>(64, b.cap + b.cap / 2));
          break;
        default: break;
      }
      Realloc(b, cap);
    }
    memcpy(b.buf + b.len, src, n);
    b.len = need;
  }

  void Realloc(Builder& b, size_t cap) {
    char* p = static_cast<char*>(realloc(b.buf, cap));
    if (p == nullptr) Fail("realloc(%p, %zu) returned NULL",
                           static_cast<void*>(b.buf), cap);
    stats_.reallocs++;
    if (b.buf != nullptr && p != b.buf) stats_.moved++;
    b.buf = p;
    b.cap = cap;
  }

  void Check(const Builder& b, const char* data, size_t len) {
    for (size_t off = 0; off < len; off += kMaxPiece) {
      size_t n = std::min(kMaxPiece, len - off);
      const char* want = text_ + (b.phase + off) % kPeriod;
      if (memcmp(data + off, want, n) != 0) {
        size_t i = 0;
        while (data[off + i] == want[i]) ++i;
        Fail("document %llu (%s, %zu bytes): content differs at byte %zu",
             static_cast<unsigned long long>(stats_.docs),
             kPolicyName[b.policy], len, off + i);
      }
    }
  }

  void Finish(Builder& b) {
    size_t len = Length(b);
    if (b.policy == kString) {
      Check(b, b.str.data(), len);
      std::string().swap(b.str);  // give the memory back
    } else {
      if (b.shrink && len > 0 && len < b.cap) Realloc(b, len);
      Check(b, b.buf, len);
      free(b.buf);
      b.buf = nullptr;
    }
    stats_.checksum += wl::Mix64((uint64_t{b.phase} << 32) ^ len ^
                                 (uint64_t{b.policy} << 60));
    stats_.per_policy[b.policy]++;
    stats_.docs++;
  }

  const char* text_;
  wl::Rng rng_;
  Stats stats_;
};

}  // namespace

int main(int argc, char** argv) {
  wl::g_name = "realloc_growth";
  wl::Args args(argc, argv, "");
  const int threads = args.Threads(1);
  // Full size: 2-4 s under glibc malloc on the 2-vCPU reference machine.
  uint64_t docs = 20'000;
  if (args.quick()) docs /= 20;
  const uint64_t per_thread = docs / static_cast<uint64_t>(threads);

  std::vector<char> text = MakeText();
  std::vector<Stats> stats(static_cast<size_t>(threads));

  double t0 = wl::NowSeconds();
  if (threads == 1) {
    stats[0] = Worker(text.data(), 6000).Run(per_thread);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        stats[t] = Worker(text.data(), 6000 + t).Run(per_thread);
      });
    }
    for (auto& th : pool) th.join();
  }
  double secs = wl::NowSeconds() - t0;

  Stats total;
  for (const Stats& s : stats) {
    total.docs += s.docs;
    total.bytes += s.bytes;
    total.appends += s.appends;
    total.reallocs += s.reallocs;
    total.moved += s.moved;
    total.checksum += s.checksum;
    for (int p = 0; p < kNumPolicies; ++p) total.per_policy[p] += s.per_policy[p];
  }
  // Run() finishes its last kBuilders documents after reaching the count.
  uint64_t expect = (per_thread + kBuilders) * static_cast<uint64_t>(threads);
  if (total.docs != expect) {
    Fail("%llu documents finished, expected %llu",
         static_cast<unsigned long long>(total.docs),
         static_cast<unsigned long long>(expect));
  }
  printf("metric appends=%llu\n", static_cast<unsigned long long>(total.appends));
  printf("metric reallocs=%llu\n",
         static_cast<unsigned long long>(total.reallocs));
  printf("metric realloc_moved=%llu\n",
         static_cast<unsigned long long>(total.moved));
  printf("metric mib_appended=%.1f\n",
         static_cast<double>(total.bytes) / (1 << 20));
  wl::Ok(secs, "threads=%d docs=%llu checksum=%016llx", threads,
         static_cast<unsigned long long>(total.docs),
         static_cast<unsigned long long>(total.checksum));
  return 0;
}
