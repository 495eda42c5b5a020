// Philox-4x32-10 (philox.h) for kLanes consecutive counters at once, in AVX-512 or AVX2
// registers where the CPU has them (a 32 x 32 -> 64-bit multiply of every other lane, twice),
// else lane by lane; then the dropout mask's comparisons. Each variant is compiled into the
// same library (instruction_set.h) and gives the same bits. See dropout_mask_loop.h.

#include "dropout_mask_loop.h"

#include <algorithm>
#include <cstring>

#include "philox.h"

#if LMPIPE_X86_VARIANTS
#include <immintrin.h>
#endif

namespace lmpipe {
namespace {

constexpr int kLanes = 16;

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

// Each variant's Blocks(key, counter, first_block, words): words[w][lane] is word w of the
// Philox block at counter + first_block + lane.

struct Baseline {
  static void Blocks(const uint32_t key[2], const uint32_t counter[4], uint64_t first_block,
                     uint32_t words[4][kLanes]) {
    Counters(counter, first_block, words);
    for (int lane = 0; lane < kLanes; ++lane) {
      uint32_t block[4] = {words[0][lane], words[1][lane], words[2][lane], words[3][lane]};
      philox::Rounds(key, block);
      for (int w = 0; w < 4; ++w) words[w][lane] = block[w];
    }
  }
};

#if LMPIPE_X86_VARIANTS

// 16 lanes of 32 bits: the high and low halves of each lane's product with `multiplier`.
LMPIPE_TARGET_AVX512 inline void MultiplyHighLow(__m512i value, __m512i multiplier,
                                                 __m512i* high, __m512i* low) {
  const __m512i even = _mm512_mul_epu32(value, multiplier);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(value, 32), multiplier);
  *high = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  *low = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

struct Avx512 {
  LMPIPE_TARGET_AVX512 static void Blocks(const uint32_t key[2], const uint32_t counter[4],
                                          uint64_t first_block, uint32_t words[4][kLanes]) {
    Counters(counter, first_block, words);
    __m512i c0 = _mm512_loadu_si512(words[0]), c1 = _mm512_loadu_si512(words[1]);
    __m512i c2 = _mm512_loadu_si512(words[2]), c3 = _mm512_loadu_si512(words[3]);
    const __m512i multiplier_a = _mm512_set1_epi64(philox::kMultiplierA);
    const __m512i multiplier_b = _mm512_set1_epi64(philox::kMultiplierB);
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < philox::kRounds; ++round) {
      __m512i high_a, low_a, high_b, low_b;
      MultiplyHighLow(c0, multiplier_a, &high_a, &low_a);
      MultiplyHighLow(c2, multiplier_b, &high_b, &low_b);
      c0 = _mm512_xor_si512(_mm512_xor_si512(high_b, c1), _mm512_set1_epi32(k0));
      c2 = _mm512_xor_si512(_mm512_xor_si512(high_a, c3), _mm512_set1_epi32(k1));
      c1 = low_b;
      c3 = low_a;
      k0 += philox::kKeyStepA;
      k1 += philox::kKeyStepB;
    }
    _mm512_storeu_si512(words[0], c0);
    _mm512_storeu_si512(words[1], c1);
    _mm512_storeu_si512(words[2], c2);
    _mm512_storeu_si512(words[3], c3);
  }
};

// 8 lanes of 32 bits: the high and low halves of each lane's product with `multiplier`.
LMPIPE_TARGET_AVX2 inline void MultiplyHighLow(__m256i value, __m256i multiplier,
                                               __m256i* high, __m256i* low) {
  const __m256i even = _mm256_mul_epu32(value, multiplier);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(value, 32), multiplier);
  *high = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  *low = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

struct Avx2 {
  LMPIPE_TARGET_AVX2 static void Blocks(const uint32_t key[2], const uint32_t counter[4],
                                        uint64_t first_block, uint32_t words[4][kLanes]) {
    Counters(counter, first_block, words);
    const __m256i multiplier_a = _mm256_set1_epi64x(philox::kMultiplierA);
    const __m256i multiplier_b = _mm256_set1_epi64x(philox::kMultiplierB);
    for (int half = 0; half < kLanes; half += 8) {
      // (No lambda: it would not carry the function's target.)
      __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words[0] + half));
      __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words[1] + half));
      __m256i c2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words[2] + half));
      __m256i c3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words[3] + half));
      uint32_t k0 = key[0], k1 = key[1];
      for (int round = 0; round < philox::kRounds; ++round) {
        __m256i high_a, low_a, high_b, low_b;
        MultiplyHighLow(c0, multiplier_a, &high_a, &low_a);
        MultiplyHighLow(c2, multiplier_b, &high_b, &low_b);
        c0 = _mm256_xor_si256(_mm256_xor_si256(high_b, c1), _mm256_set1_epi32(k0));
        c2 = _mm256_xor_si256(_mm256_xor_si256(high_a, c3), _mm256_set1_epi32(k1));
        c1 = low_b;
        c3 = low_a;
        k0 += philox::kKeyStepA;
        k1 += philox::kKeyStepB;
      }
      const __m256i result[4] = {c0, c1, c2, c3};
      for (int w = 0; w < 4; ++w) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(words[w] + half), result[w]);
      }
    }
  }
};

#endif  // LMPIPE_X86_VARIANTS

template <typename Variant, typename Element>
void Fill(const uint32_t key[2], const uint32_t counter[4], int bits, uint32_t threshold,
          Element keep, int64_t first, int64_t size, Element* out) {
  const int per_block = bits == 16 ? 8 : 4;
  const int64_t per_chunk = per_block * kLanes;
  uint32_t words[4][kLanes];
  Element chunk_mask[8 * kLanes];
  const int64_t end = first + size;
  for (int64_t element = first; element < end;) {
    const int64_t chunk = element / per_chunk;
    Variant::Blocks(key, counter, static_cast<uint64_t>(chunk) * kLanes, words);
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

template <typename Variant>
inline void Loop(const uint32_t key[2], const uint32_t counter[4], int bits, uint32_t threshold,
                 int width, uint64_t keep, int64_t first, int64_t size, void* out) {
  switch (width) {
    case 2:
      Fill<Variant>(key, counter, bits, threshold, static_cast<uint16_t>(keep), first, size,
                    static_cast<uint16_t*>(out));
      break;
    case 4:
      Fill<Variant>(key, counter, bits, threshold, static_cast<uint32_t>(keep), first, size,
                    static_cast<uint32_t*>(out));
      break;
    default:
      Fill<Variant>(key, counter, bits, threshold, keep, first, size,
                    static_cast<uint64_t*>(out));
  }
}

// Each variant's whole loop, its comparisons included, inlined into one function compiled
// for that variant's instructions (`flatten`): nothing compiled for AVX-512 is shared with
// the baseline path, which runs on any x86-64 CPU.
#if LMPIPE_X86_VARIANTS
LMPIPE_TARGET_AVX512 __attribute__((flatten)) void LoopAvx512(
    const uint32_t key[2], const uint32_t counter[4], int bits, uint32_t threshold, int width,
    uint64_t keep, int64_t first, int64_t size, void* out) {
  Loop<Avx512>(key, counter, bits, threshold, width, keep, first, size, out);
}

LMPIPE_TARGET_AVX2 __attribute__((flatten)) void LoopAvx2(
    const uint32_t key[2], const uint32_t counter[4], int bits, uint32_t threshold, int width,
    uint64_t keep, int64_t first, int64_t size, void* out) {
  Loop<Avx2>(key, counter, bits, threshold, width, keep, first, size, out);
}
#endif

}  // namespace

void DropoutMaskLoop(const uint32_t key[2], const uint32_t counter[4], int bits,
                     uint32_t threshold, int width, uint64_t keep, int64_t first, int64_t size,
                     void* out, InstructionSet instruction_set) {
#if LMPIPE_X86_VARIANTS
  if (instruction_set == InstructionSet::kAvx512) {
    return LoopAvx512(key, counter, bits, threshold, width, keep, first, size, out);
  }
  if (instruction_set == InstructionSet::kAvx2) {
    return LoopAvx2(key, counter, bits, threshold, width, keep, first, size, out);
  }
#endif
  Loop<Baseline>(key, counter, bits, threshold, width, keep, first, size, out);
}

}  // namespace lmpipe
