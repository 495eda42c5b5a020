// The loop of lmpipe's word2vec SGD op: see word2vec_sgd.cc and word2vec_sgd_loop.h. It is
// compiled once for each variant of instruction_set.h; built without contracting a multiply
// and an add into one rounding (-ffp-contract=off), every variant gives the same bits.

#include "word2vec_sgd_loop.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace lmpipe {
namespace {

// Sums of 16 lanes, then of the lanes in a fixed order: vectorized without reassociating
// anything, so the result is the same with any vector width.
inline float Dot(const float* a, const float* b, int n) {
  float lanes[16] = {0};
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    for (int j = 0; j < 16; ++j) lanes[j] += a[d + j] * b[d + j];
  }
  for (; d < n; ++d) lanes[d & 15] += a[d] * b[d];
  float sum = 0;
  for (int j = 0; j < 16; ++j) sum += lanes[j];
  return sum;
}

inline void Axpy(float alpha, const float* __restrict x, float* __restrict y, int n) {
  for (int d = 0; d < n; ++d) y[d] += alpha * x[d];
}

// log(1 + exp(x)) without overflow.
inline double Softplus(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

inline double Sgd(float* syn0, float* syn1, int dim, const int32_t* ids, const float* mask,
                  int64_t contexts, const int32_t* candidates, const float* candidate_weights,
                  int64_t examples, int64_t num_candidates, float lr, int64_t* counted) {
  const bool cbow = mask != nullptr;
  std::vector<float> hidden(dim), error(dim);
  double loss = 0;
  for (int64_t p = 0; p < examples; ++p) {
    const int32_t* context = ids + p * contexts;
    const float* context_mask = cbow ? mask + p * contexts : nullptr;
    const int32_t* candidate = candidates + p * num_candidates;
    const float* weight = candidate_weights + p * num_candidates;
    if (weight[0] > 0) ++*counted;
    float* h;
    if (cbow) {
      float count = 0;
      std::fill(hidden.begin(), hidden.end(), 0.0f);
      for (int64_t c = 0; c < contexts; ++c) {
        if (context_mask[c] == 0) continue;
        Axpy(context_mask[c], syn0 + static_cast<int64_t>(context[c]) * dim, hidden.data(), dim);
        count += context_mask[c];
      }
      if (count == 0) continue;  // no context: nothing to learn from
      const float inverse = 1.0f / count;
      for (int d = 0; d < dim; ++d) hidden[d] *= inverse;
      h = hidden.data();
    } else {
      h = syn0 + static_cast<int64_t>(context[0]) * dim;
    }
    std::fill(error.begin(), error.end(), 0.0f);
    bool moved = false;
    for (int64_t k = 0; k < num_candidates; ++k) {
      if (weight[k] == 0) continue;
      float* c = syn1 + static_cast<int64_t>(candidate[k]) * dim;
      const float score = Dot(h, c, dim);
      const float label = k == 0 ? 1.0f : 0.0f;
      const float probability = 1.0f / (1.0f + std::exp(-score));
      loss += weight[k] * Softplus(k == 0 ? -score : score);
      const float g = weight[k] * (label - probability) * lr;
      Axpy(g, c, error.data(), dim);
      Axpy(g, h, c, dim);
      moved = true;
    }
    if (!moved) continue;
    if (cbow) {
      for (int64_t c = 0; c < contexts; ++c) {
        if (context_mask[c] == 0) continue;
        Axpy(context_mask[c], error.data(), syn0 + static_cast<int64_t>(context[c]) * dim, dim);
      }
    } else {
      Axpy(1.0f, error.data(), h, dim);
    }
  }

  return loss;
}

// The whole loop inlined into one function for each wider variant (`flatten`), so that it is
// vectorized with that variant's instructions and shares no code with the baseline path.
#if LMPIPE_X86_VARIANTS
LMPIPE_TARGET_AVX512 __attribute__((flatten)) double SgdAvx512(
    float* syn0, float* syn1, int dim, const int32_t* ids, const float* mask, int64_t contexts,
    const int32_t* candidates, const float* candidate_weights, int64_t examples,
    int64_t num_candidates, float lr, int64_t* counted) {
  return Sgd(syn0, syn1, dim, ids, mask, contexts, candidates, candidate_weights, examples,
             num_candidates, lr, counted);
}

LMPIPE_TARGET_AVX2 __attribute__((flatten)) double SgdAvx2(
    float* syn0, float* syn1, int dim, const int32_t* ids, const float* mask, int64_t contexts,
    const int32_t* candidates, const float* candidate_weights, int64_t examples,
    int64_t num_candidates, float lr, int64_t* counted) {
  return Sgd(syn0, syn1, dim, ids, mask, contexts, candidates, candidate_weights, examples,
             num_candidates, lr, counted);
}
#endif

}  // namespace

double Word2vecSgd(float* syn0, float* syn1, int dim, const int32_t* ids, const float* mask,
                   int64_t contexts, const int32_t* candidates, const float* candidate_weights,
                   int64_t examples, int64_t num_candidates, float lr, int64_t* counted,
                   InstructionSet instruction_set) {
#if LMPIPE_X86_VARIANTS
  if (instruction_set == InstructionSet::kAvx512) {
    return SgdAvx512(syn0, syn1, dim, ids, mask, contexts, candidates, candidate_weights,
                     examples, num_candidates, lr, counted);
  }
  if (instruction_set == InstructionSet::kAvx2) {
    return SgdAvx2(syn0, syn1, dim, ids, mask, contexts, candidates, candidate_weights,
                   examples, num_candidates, lr, counted);
  }
#endif
  return Sgd(syn0, syn1, dim, ids, mask, contexts, candidates, candidate_weights, examples,
             num_candidates, lr, counted);
}

}  // namespace lmpipe
