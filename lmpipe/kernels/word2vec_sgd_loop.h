// The loop of lmpipe's word2vec SGD op (word2vec_sgd.cc), compiled apart from TensorFlow's
// headers, in baseline, AVX2 and AVX-512 variants (instruction_set.h).

#ifndef LMPIPE_KERNELS_WORD2VEC_SGD_LOOP_H_
#define LMPIPE_KERNELS_WORD2VEC_SGD_LOOP_H_

#include <cstdint>

#include "instruction_set.h"

namespace lmpipe {

// One pass of example-by-example SGD over `examples` examples (see word2vec_sgd.cc). `ids` is
// [examples, contexts]; `mask` is [examples, contexts] for CBOW and null for skip-gram
// (contexts 1). Returns the summed loss; `counted` gets the examples whose word to predict
// has a weight. Ids must be valid rows of both tables [*, dim]. Runs the variant
// `instruction_set` (which the CPU must run: see ChooseInstructionSet); every variant gives
// the same bits.
double Word2vecSgd(float* syn0, float* syn1, int dim, const int32_t* ids, const float* mask,
                   int64_t contexts, const int32_t* candidates, const float* candidate_weights,
                   int64_t examples, int64_t num_candidates, float lr, int64_t* counted,
                   InstructionSet instruction_set);

}  // namespace lmpipe

#endif  // LMPIPE_KERNELS_WORD2VEC_SGD_LOOP_H_
