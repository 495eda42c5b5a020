// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) for
// kLanes consecutive counters at once, in AVX-512 or AVX2 registers where the CPU has them
// (a 32 x 32 -> 64-bit multiply of every other lane, twice), else lane by lane; then the
// dropout mask's comparisons. See dropout_mask_loop.h.

#include "dropout_mask_loop.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace lmpipe {
namespace {

constexpr int kLanes = 16;
constexpr int kRounds = 10;
constexpr uint32_t kMultiplierA = 0xD2511F53;
constexpr uint32_t kMultiplierB = 0xCD9E8D57;
constexpr uint32_t kKeyStepA = 0x9E3779B9;
constexpr uint32_t kKeyStepB = 0xBB67AE85;

// The counters of the kLanes blocks from counter + first_block: c[w][lane] is word w.
void Counters(const uint32_t counter[4], uint64_t first_block, uint32_t c[4][kLanes]) {
  const uint64_t low = counter[0] | static_cast<uint64_t>(counter[1]) << 32;
  const uint64_t high = counter[2] | static_cast<uint64_t>(counter[3]) << 32;
  for (int lane = 0; lane < kLanes; ++lane) {
    const uint64_t step = first_block + lane;
    const uint64_t sum = low + step;
    const uint64_t carried = high + (sum < step);
    c[0][lane] = static_cast<uint32_t>(sum);
    c[1][lane] = static_cast<uint32_t>(sum >> 32);
    c[2][lane] = static_cast<uint32_t>(carried);
    c[3][lane] = static_cast<uint32_t>(carried >> 32);
  }
}

#if defined(__AVX512F__)

// 16 lanes of 32 bits: the high and low halves of each lane's product with `multiplier`.
inline void MultiplyHighLow(__m512i value, __m512i multiplier, __m512i* high, __m512i* low) {
  const __m512i even = _mm512_mul_epu32(value, multiplier);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(value, 32), multiplier);
  *high = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  *low = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// words[w][lane]: word w of the Philox block at counter + first_block + lane.
void PhiloxBlocks(const uint32_t key[2], const uint32_t counter[4], uint64_t first_block,
                  uint32_t words[4][kLanes]) {
  Counters(counter, first_block, words);
  __m512i c0 = _mm512_loadu_si512(words[0]), c1 = _mm512_loadu_si512(words[1]);
  __m512i c2 = _mm512_loadu_si512(words[2]), c3 = _mm512_loadu_si512(words[3]);
  const __m512i multiplier_a = _mm512_set1_epi64(kMultiplierA);
  const __m512i multiplier_b = _mm512_set1_epi64(kMultiplierB);
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < kRounds; ++round) {
    __m512i high_a, low_a, high_b, low_b;
    MultiplyHighLow(c0, multiplier_a, &high_a, &low_a);
    MultiplyHighLow(c2, multiplier_b, &high_b, &low_b);
    c0 = _mm512_xor_si512(_mm512_xor_si512(high_b, c1), _mm512_set1_epi32(k0));
    c2 = _mm512_xor_si512(_mm512_xor_si512(high_a, c3), _mm512_set1_epi32(k1));
    c1 = low_b;
    c3 = low_a;
    k0 += kKeyStepA;
    k1 += kKeyStepB;
  }
  _mm512_storeu_si512(words[0], c0);
  _mm512_storeu_si512(words[1], c1);
  _mm512_storeu_si512(words[2], c2);
  _mm512_storeu_si512(words[3], c3);
}

#elif defined(__AVX2__)

// 8 lanes of 32 bits: the high and low halves of each lane's product with `multiplier`.
inline void MultiplyHighLow(__m256i value, __m256i multiplier, __m256i* high, __m256i* low) {
  const __m256i even = _mm256_mul_epu32(value, multiplier);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(value, 32), multiplier);
  *high = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *low = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

void PhiloxBlocks(const uint32_t key[2], const uint32_t counter[4], uint64_t first_block,
                  uint32_t words[4][kLanes]) {
  Counters(counter, first_block, words);
  const __m256i multiplier_a = _mm256_set1_epi64x(kMultiplierA);
  const __m256i multiplier_b = _mm256_set1_epi64x(kMultiplierB);
  for (int half = 0; half < kLanes; half += 8) {
    auto load = [&](int w) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words[w] + half));
    };
    __m256i c0 = load(0), c1 = load(1), c2 = load(2), c3 = load(3);
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < kRounds; ++round) {
      __m256i high_a, low_a, high_b, low_b;
      MultiplyHighLow(c0, multiplier_a, &high_a, &low_a);
      MultiplyHighLow(c2, multiplier_b, &high_b, &low_b);
      c0 = _mm256_xor_si256(_mm256_xor_si256(high_b, c1), _mm256_set1_epi32(k0));
      c2 = _mm256_xor_si256(_mm256_xor_si256(high_a, c3), _mm256_set1_epi32(k1));
      c1 = low_b;
      c3 = low_a;
      k0 += kKeyStepA;
      k1 += kKeyStepB;
    }
    const __m256i result[4] = {c0, c1, c2, c3};
    for (int w = 0; w < 4; ++w) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[w] + half), result[w]);
    }
  }
}

#else

void PhiloxBlocks(const uint32_t key[2], const uint32_t counter[4], uint64_t first_block,
                  uint32_t words[4][kLanes]) {
  Counters(counter, first_block, words);
  for (int lane = 0; lane < kLanes; ++lane) {
    uint32_t c0 = words[0][lane], c1 = words[1][lane], c2 = words[2][lane], c3 = words[3][lane];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < kRounds; ++round) {
      const uint64_t product_a = static_cast<uint64_t>(kMultiplierA) * c0;
      const uint64_t product_b = static_cast<uint64_t>(kMultiplierB) * c2;
      c0 = static_cast<uint32_t>(product_b >> 32) ^ c1 ^ k0;
      c2 = static_cast<uint32_t>(product_a >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(product_b);
      c3 = static_cast<uint32_t>(product_a);
      k0 += kKeyStepA;
      k1 += kKeyStepB;
    }
    words[0][lane] = c0;
    words[1][lane] = c1;
    words[2][lane] = c2;
    words[3][lane] = c3;
  }
}

#endif

template <typename Element>
void Fill(const uint32_t key[2], const uint32_t counter[4], int bits, uint32_t threshold,
          Element keep, int64_t first, int64_t size, Element* out) {
  const int per_block = bits == 16 ? 8 : 4;
  const int64_t per_chunk = per_block * kLanes;
  uint32_t words[4][kLanes];
  Element chunk_mask[8 * kLanes];
  const int64_t end = first + size;
  for (int64_t element = first; element < end;) {
    const int64_t chunk = element / per_chunk;
    PhiloxBlocks(key, counter, static_cast<uint64_t>(chunk) * kLanes, words);
    if (bits == 16) {
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int w = 0; w < 4; ++w) {
          const uint32_t word = words[w][lane];
          chunk_mask[lane * 8 + 2 * w] = (word & 0xFFFF) >= threshold ? keep : Element(0);
          chunk_mask[lane * 8 + 2 * w + 1] = (word >> 16) >= threshold ? keep : Element(0);
        }
      }
    } else {
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int w = 0; w < 4; ++w) {
          chunk_mask[lane * 4 + w] = words[w][lane] >= threshold ? keep : Element(0);
        }
      }
    }
    const int64_t offset = element - chunk * per_chunk;
    const int64_t count = std::min(per_chunk - offset, end - element);
    std::memcpy(out + (element - first), chunk_mask + offset, count * sizeof(Element));
    element += count;
  }
}

}  // namespace

void DropoutMaskLoop(const uint32_t key[2], const uint32_t counter[4], int bits,
                     uint32_t threshold, int width, uint64_t keep, int64_t first, int64_t size,
                     void* out) {
  switch (width) {
    case 2:
      Fill(key, counter, bits, threshold, static_cast<uint16_t>(keep), first, size,
           static_cast<uint16_t*>(out));
      break;
    case 4:
      Fill(key, counter, bits, threshold, static_cast<uint32_t>(keep), first, size,
           static_cast<uint32_t*>(out));
      break;
    default:
      Fill(key, counter, bits, threshold, keep, first, size, static_cast<uint64_t*>(out));
  }
}

}  // namespace lmpipe
