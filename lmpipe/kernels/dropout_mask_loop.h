// The loop of lmpipe's dropout mask (dropout_mask.cc), compiled apart from TensorFlow's
// headers, in baseline, AVX2 and AVX-512 variants (instruction_set.h).

#ifndef LMPIPE_KERNELS_DROPOUT_MASK_LOOP_H_
#define LMPIPE_KERNELS_DROPOUT_MASK_LOOP_H_

#include <cstdint>

#include "instruction_set.h"

namespace lmpipe {

// Philox-4x32-10 under `key` from the 128-bit `counter` (four 32-bit words, the lowest first),
// as TensorFlow's StatelessRandomUniformFullIntV2 draws uint32 words: word k of the stream is
// word k % 4 of the block at counter + k / 4. Element j of the mask reads `bits` (16 or 32)
// of that stream: with 16, the half j % 2 of word j / 2, the low half first (a little-endian
// bitcast to uint16); with 32, word j. It keeps the element (writes `keep`, `width` bytes)
// where those bits are >= threshold, else writes zero bytes. Writes elements
// [first, first + size) of the mask to `out` (which points at element `first`), with the
// variant `instruction_set` (which the CPU must run: see ChooseInstructionSet). Every
// variant writes the same bits.
void DropoutMaskLoop(const uint32_t key[2], const uint32_t counter[4], int bits,
                     uint32_t threshold, int width, uint64_t keep, int64_t first, int64_t size,
                     void* out, InstructionSet instruction_set);

}  // namespace lmpipe

#endif  // LMPIPE_KERNELS_DROPOUT_MASK_LOOP_H_
