// allocator/page_heap/bitmap.h: word-at-a-time helpers over the page
// heap's bitmaps (ChunkInfo::free_bits, one bit per buddy block, and
// ChunkInfo::released, one bit per page).  Internal to the page heap.
#ifndef CIDMALLOC_ALLOCATOR_PAGE_HEAP_BITMAP_H_
#define CIDMALLOC_ALLOCATOR_PAGE_HEAP_BITMAP_H_

#include <stdint.h>

namespace cidmalloc::page_heap {

inline bool TestBit(const uint64_t* bits, uint32_t b) {
  return (bits[b / 64] >> (b % 64)) & 1;
}
inline void SetBit(uint64_t* bits, uint32_t b) {
  bits[b / 64] |= uint64_t{1} << (b % 64);
}
inline void ClearBit(uint64_t* bits, uint32_t b) {
  bits[b / 64] &= ~(uint64_t{1} << (b % 64));
}
// How many of the bits [b, end) lie in b's 64-bit word (1-64).
inline uint32_t TakeInWord(uint32_t b, uint32_t end) {
  const uint32_t avail = 64 - b % 64;
  return avail < end - b ? avail : end - b;
}
// The low `take` bits (1-64) set.
inline uint64_t LowBits(uint32_t take) {
  return take == 64 ? ~uint64_t{0} : (uint64_t{1} << take) - 1;
}
// The bits [b, end) of `bits` that lie in b's 64-bit word, shifted down so
// that bit b is bit 0; *take is how many they are.  Every walk over a bit
// range goes a word at a time with it:
//   for (b = from; b < end; b += take) { word = BitsAt(bits, b, end, &take); }
inline uint64_t BitsAt(const uint64_t* bits, uint32_t b, uint32_t end,
                uint32_t* take) {
  *take = TakeInWord(b, end);
  return (bits[b / 64] >> (b % 64)) & LowBits(*take);
}
// Sets or clears the bits [from, from + len), a word at a time: a run's
// pages went one bit at a time before, each read-modify-write waiting for
// the last one's store, 74 % of AllocPages for a 72 or 512 KiB run
// (docs/benchmarks/tuning_log.md).
enum class BitOp : uint8_t { kSet, kClear };
inline void ChangeBits(uint64_t* bits, uint32_t from, uint32_t len, BitOp op) {
  uint32_t take;
  for (uint32_t b = from; b < from + len; b += take) {
    take = TakeInWord(b, from + len);
    const uint64_t mask = LowBits(take) << (b % 64);
    if (op == BitOp::kSet) {
      bits[b / 64] |= mask;
    } else {
      bits[b / 64] &= ~mask;
    }
  }
}
// First set bit in [from, from + len), or -1.
inline int FindFirst(const uint64_t* bits, uint32_t from, uint32_t len) {
  uint32_t take;
  for (uint32_t b = from; b < from + len; b += take) {
    const uint64_t word = BitsAt(bits, b, from + len, &take);
    if (word != 0) return static_cast<int>(b + __builtin_ctzll(word));
  }
  return -1;
}
// First clear bit in [from, from + len), or -1.
inline int FindFirstClear(const uint64_t* bits, uint32_t from, uint32_t len) {
  uint32_t take;
  for (uint32_t b = from; b < from + len; b += take) {
    const uint64_t word = ~BitsAt(bits, b, from + len, &take) & LowBits(take);
    if (word != 0) return static_cast<int>(b + __builtin_ctzll(word));
  }
  return -1;
}
// Set bits of x, inline: the baseline x86-64 target has no popcnt
// instruction, and __builtin_popcountll became a call to libgcc's
// __popcountdi2.
inline uint32_t PopCount(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555u;
  x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
  return static_cast<uint32_t>((x * 0x0101010101010101u) >> 56);
}
// Set bits in [from, from + len).  The words it counts (which pages went
// back to the OS) are nearly always all clear or all set, which need no
// popcount: it had 16 % of a 72 KiB malloc + free
// (docs/benchmarks/tuning_log.md).
inline uint32_t CountBits(const uint64_t* bits, uint32_t from, uint32_t len) {
  uint32_t count = 0, take;
  for (uint32_t b = from; b < from + len; b += take) {
    const uint64_t word = BitsAt(bits, b, from + len, &take);
    if (word == 0) continue;
    count += word == LowBits(take) ? take : PopCount(word);
  }
  return count;
}

}  // namespace cidmalloc::page_heap

#endif  // CIDMALLOC_ALLOCATOR_PAGE_HEAP_BITMAP_H_
