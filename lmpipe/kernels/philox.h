// Philox-4x32-10, the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3" (SC 2011), written out here so that lmpipe's kernels
// need no TensorFlow header for it. The multipliers and key increments are the constants the
// paper publishes for Philox-4x32 (the increments are the fractional bits of the golden ratio
// and of sqrt(3) - 1). TensorFlow's CPU random ops run the same generator with the same word
// order (the counter's lowest 32-bit word first, a block's words in order), which is what lets
// the kernels reproduce their bits; the tests compare the two bit for bit.

#ifndef LMPIPE_KERNELS_PHILOX_H_
#define LMPIPE_KERNELS_PHILOX_H_

#include <cstdint>

namespace lmpipe {
namespace philox {

constexpr int kRounds = 10;
constexpr uint32_t kMultiplierA = 0xD2511F53;
constexpr uint32_t kMultiplierB = 0xCD9E8D57;
constexpr uint32_t kKeyStepA = 0x9E3779B9;
constexpr uint32_t kKeyStepB = 0xBB67AE85;

// The ten rounds on one counter (four words, in place) under `key`: the block's words.
inline void Rounds(const uint32_t key[2], uint32_t c[4]) {
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t product_a = static_cast<uint64_t>(kMultiplierA) * c[0];
    const uint64_t product_b = static_cast<uint64_t>(kMultiplierB) * c[2];
    const uint32_t c1 = c[1], c3 = c[3];
    c[0] = static_cast<uint32_t>(product_b >> 32) ^ c1 ^ k0;
    c[2] = static_cast<uint32_t>(product_a >> 32) ^ c3 ^ k1;
    c[1] = static_cast<uint32_t>(product_b);
    c[3] = static_cast<uint32_t>(product_a);
    k0 += kKeyStepA;
    k1 += kKeyStepB;
  }
}

// The blocks from a 128-bit counter under a 64-bit key, in order: each call gives the next
// block's four words and steps the counter by one.
class Generator {
 public:
  Generator() = default;

  // The counter and key as two and one 64-bit numbers (the low half of each the first word).
  Generator(const uint64_t counter[2], uint64_t key) {
    counter_[0] = static_cast<uint32_t>(counter[0]);
    counter_[1] = static_cast<uint32_t>(counter[0] >> 32);
    counter_[2] = static_cast<uint32_t>(counter[1]);
    counter_[3] = static_cast<uint32_t>(counter[1] >> 32);
    key_[0] = static_cast<uint32_t>(key);
    key_[1] = static_cast<uint32_t>(key >> 32);
  }

  // Four words of counter and two of key, the lowest first.
  Generator(const uint32_t counter[4], const uint32_t key[2]) {
    for (int i = 0; i < 4; ++i) counter_[i] = counter[i];
    key_[0] = key[0];
    key_[1] = key[1];
  }

  // The next block's words into `out`.
  void Next(uint32_t out[4]) {
    for (int i = 0; i < 4; ++i) out[i] = counter_[i];
    Rounds(key_, out);
    for (int i = 0; i < 4 && ++counter_[i] == 0; ++i) {
    }
  }

  // Steps the counter by `blocks` (the 128-bit counter plus a 64-bit count).
  void Skip(uint64_t blocks) {
    uint64_t carry = blocks;
    for (int i = 0; i < 4 && carry != 0; ++i) {
      const uint64_t sum = static_cast<uint64_t>(counter_[i]) + static_cast<uint32_t>(carry);
      counter_[i] = static_cast<uint32_t>(sum);
      carry = (carry >> 32) + (sum >> 32);
    }
  }

 private:
  uint32_t counter_[4] = {0, 0, 0, 0};
  uint32_t key_[2] = {0, 0};
};

}  // namespace philox
}  // namespace lmpipe

#endif  // LMPIPE_KERNELS_PHILOX_H_
