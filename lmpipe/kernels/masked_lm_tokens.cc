// BERT's token-level masked-LM masking of a batch in one op: the random draws, selection and
// corruption that lmpipe.datasets.MaskedLMMasker otherwise computes with some forty TensorFlow
// ops (Philox, comparisons, top_k, sorts, gathers, a scatter). The draws are TensorFlow's
// (its Philox generator and distributions, from its headers, keyed as the masker's
// `_RandomStreams` keys them), so the outputs are the same bytes. Per row:
//
//   maskable        = positions whose id is not special
//   num_to_predict  = min(round_half_even(num_tokens * selection_rate) clipped to [1, P],
//                         number of maskable positions); num_tokens counts the non-padding ids
//   selected        = the num_to_predict maskable positions with the largest select_keys
//                     (ties: the lower position first, as top_k), in ascending order
//   each selected piece, with (decide, pick) = corrupt_draw[row, slot]:
//     decide < mask_below   -> mask_token_id
//     decide < random_below -> replacement_ids[pick % len(replacement_ids)]
//     otherwise             -> unchanged
//
// One thread walks the rows: the result depends only on the inputs. Built and loaded by
// lmpipe/kernels/__init__.py.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/random_ops_util.h"
#include "tensorflow/core/lib/random/philox_random.h"
#include "tensorflow/core/lib/random/random_distributions.h"

namespace lmpipe {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace shape_inference = ::tensorflow::shape_inference;

REGISTER_OP("LmpipeMaskedLmTokens")
    .Input("token_ids: int32")
    .Input("seed: int64")
    .Input("is_special: bool")
    .Input("replacement_ids: int32")
    .Input("selection_rate: double")
    .Attr("max_predictions: int >= 1")
    .Attr("pad_token_id: int")
    .Attr("mask_token_id: int")
    .Attr("mask_below: int")
    .Attr("random_below: int")
    .Attr("scramble_key: int")
    .Attr("select_stream: int")
    .Attr("corrupt_stream: int")
    .Output("masked_ids: int32")
    .Output("mask_positions: int32")
    .Output("mask_ids: int32")
    .Output("mask_weights: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle ids, seed;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &ids));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &seed));
      int64_t predictions;
      TF_RETURN_IF_ERROR(c->GetAttr("max_predictions", &predictions));
      const auto lists = c->Matrix(c->Dim(ids, 0), predictions);
      c->set_output(0, ids);
      for (int i = 1; i < 4; ++i) c->set_output(i, lists);
      return absl::OkStatus();
    })
    .Doc(R"doc(
BERT's token-level masked-LM selection and 80/10/10 corruption of a batch.

token_ids: [B, S] packed and padded ids.
seed: [2] the stateless seed (as the masker's `_RandomStreams` takes it).
is_special: [V] True for the ids never selected (padding included).
replacement_ids: [R] the ids a random replacement is drawn from.
selection_rate: scalar, the share of the non-padding tokens to predict.
masked_ids: [B, S] the corrupted ids.
mask_positions: [B, P] the selected positions in ascending order, 0 past the selection.
mask_ids: [B, P] the original ids there, 0 past the selection.
mask_weights: [B, P] 1 for a selected slot, else 0.
)doc");

namespace {

using ::tensorflow::random::PhiloxRandom;

// TensorFlow's StatelessRandomUniformIntV2 over [0, 2**31 - 1) with Philox: `size` values
// from the counter (stream << 32, counter_high) under `key`, in order.
void UniformInts(uint64_t key, uint64_t stream, uint64_t counter_high, int64_t size,
                 int32_t* out) {
  const uint64_t counter[2] = {stream << 32, counter_high};
  PhiloxRandom generator = ::tensorflow::GetPhiloxRandomFromCounterKeyMem(counter, &key);
  ::tensorflow::random::UniformDistribution<PhiloxRandom, int32_t> uniform(
      0, std::numeric_limits<int32_t>::max());
  constexpr int kGroup = PhiloxRandom::kResultElementCount;
  for (int64_t offset = 0; offset < size; offset += kGroup) {
    const auto group = uniform(&generator);
    const int64_t count = std::min<int64_t>(kGroup, size - offset);
    std::copy(&group[0], &group[0] + count, out + offset);
  }
}

}  // namespace

class MaskedLmTokensOp : public OpKernel {
 public:
  explicit MaskedLmTokensOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_predictions", &predictions_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("pad_token_id", &pad_token_id_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mask_token_id", &mask_token_id_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mask_below", &mask_below_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("random_below", &random_below_));
    int64_t key, select, corrupt;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scramble_key", &key));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("select_stream", &select));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("corrupt_stream", &corrupt));
    scramble_key_ = static_cast<uint64_t>(key);
    select_stream_ = static_cast<uint64_t>(select);
    corrupt_stream_ = static_cast<uint64_t>(corrupt);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& token_ids = ctx->input(0);
    const Tensor& seed = ctx->input(1);
    const Tensor& is_special = ctx->input(2);
    const Tensor& replacement_ids = ctx->input(3);
    const Tensor& selection_rate = ctx->input(4);
    OP_REQUIRES(ctx, token_ids.dims() == 2,
                errors::InvalidArgument("token_ids must be [B, S], got shape ",
                                        token_ids.shape().DebugString()));
    OP_REQUIRES(ctx, seed.dims() == 1 && seed.NumElements() == 2,
                errors::InvalidArgument("seed must be [2], got shape ",
                                        seed.shape().DebugString()));
    OP_REQUIRES(ctx, is_special.dims() == 1 && replacement_ids.dims() == 1 &&
                         replacement_ids.NumElements() > 0 && selection_rate.dims() == 0,
                errors::InvalidArgument("is_special and replacement_ids must be non-empty "
                                        "vectors and selection_rate a scalar"));
    const int64_t batch = token_ids.dim_size(0);
    const int64_t length = token_ids.dim_size(1);
    const int64_t predictions = predictions_;
    const int64_t vocabulary_size = is_special.NumElements();
    const int32_t* ids = token_ids.flat<int32_t>().data();
    for (int64_t i = 0; i < token_ids.NumElements(); ++i) {
      OP_REQUIRES(ctx, ids[i] >= 0 && ids[i] < vocabulary_size,
                  errors::InvalidArgument("token_ids[", i / length, ", ", i % length, "] = ",
                                          ids[i], " is not a token id in [0, vocabulary_size=",
                                          vocabulary_size, ")"));
    }

    Tensor* masked_out = nullptr;
    Tensor* positions_out = nullptr;
    Tensor* ids_out = nullptr;
    Tensor* weights_out = nullptr;
    const TensorShape lists({batch, predictions});
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, token_ids.shape(), &masked_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, lists, &positions_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, lists, &ids_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, lists, &weights_out));
    int32_t* masked = masked_out->flat<int32_t>().data();
    int32_t* positions = positions_out->flat<int32_t>().data();
    int32_t* mask_ids = ids_out->flat<int32_t>().data();
    float* weights = weights_out->flat<float>().data();
    std::copy(ids, ids + token_ids.NumElements(), masked);
    std::fill(positions, positions + batch * predictions, 0);
    std::fill(mask_ids, mask_ids + batch * predictions, 0);
    std::fill(weights, weights + batch * predictions, 0.0f);

    // The seed scrambled into a Philox key and the counter's high word, as TensorFlow's
    // stateless ops do (StatelessRandomUniformFullIntV2, uint64, two values).
    const auto seed_values = seed.flat<int64_t>();
    const uint64_t seed_counter[2] = {static_cast<uint64_t>(seed_values(0)),
                                      static_cast<uint64_t>(seed_values(1))};
    PhiloxRandom scramble =
        ::tensorflow::GetPhiloxRandomFromCounterKeyMem(seed_counter, &scramble_key_);
    const auto mixed =
        ::tensorflow::random::UniformFullIntDistribution<PhiloxRandom, uint64_t>()(&scramble);
    std::vector<int32_t> keys(batch * length);
    std::vector<int32_t> draw(batch * predictions * 2);
    UniformInts(mixed[0], select_stream_, mixed[1], keys.size(), keys.data());
    UniformInts(mixed[0], corrupt_stream_, mixed[1], draw.size(), draw.data());

    const bool* special = is_special.flat<bool>().data();
    const int32_t* replacements = replacement_ids.flat<int32_t>().data();
    const int64_t num_replacements = replacement_ids.NumElements();
    const double rate = selection_rate.scalar<double>()();
    // The maskable positions as (key << 32 | ~position): the larger, the earlier top_k takes
    // it (a larger key, or an equal key at a lower position).
    std::vector<uint64_t> candidates(length);
    std::vector<uint64_t> boundary(length);
    std::vector<int32_t> chosen(predictions + 1);
    for (int64_t row = 0; row < batch; ++row) {
      const int32_t* row_ids = ids + row * length;
      const int32_t* row_keys = keys.data() + row * length;
      int64_t num_tokens = 0;
      int64_t num_maskable = 0;
      for (int64_t s = 0; s < length; ++s) {
        num_tokens += row_ids[s] != pad_token_id_;
        const uint64_t key = static_cast<uint32_t>(row_keys[s]);
        candidates[num_maskable] = key << 32 | (0xFFFFFFFFu - static_cast<uint32_t>(s));
        num_maskable += !special[row_ids[s]];
      }
      // Python's round(n * rate): the float64 product rounded half to even (the default
      // rounding mode), as tf.round does.
      const double share = static_cast<double>(num_tokens) * rate;
      int64_t wanted = static_cast<int64_t>(std::nearbyint(share));
      wanted = std::min<int64_t>(std::max<int64_t>(wanted, 1), predictions);
      const int64_t budget = std::min<int64_t>(wanted, num_maskable);
      if (budget == 0) continue;
      // The budget-th largest candidate: the keys' top 6 bits (31-bit keys: bits 62-57 of a
      // candidate) count the candidates per bucket; the threshold lies in the bucket where the
      // count from the top reaches the budget, and is found among that bucket's few.
      int64_t histogram[64] = {0};
      for (int64_t i = 0; i < num_maskable; ++i) ++histogram[candidates[i] >> 57];
      int bucket = 63;
      int64_t above = 0;
      while (above + histogram[bucket] < budget) above += histogram[bucket--];
      int64_t in_bucket = 0;
      for (int64_t i = 0; i < num_maskable; ++i) {
        boundary[in_bucket] = candidates[i];
        in_bucket += static_cast<int>(candidates[i] >> 57) == bucket;
      }
      const int64_t rank = budget - above - 1;
      std::nth_element(boundary.begin(), boundary.begin() + rank,
                       boundary.begin() + in_bucket, std::greater<uint64_t>());
      const uint64_t threshold = boundary[rank];
      // The selected positions, ascending: the candidates at or above the threshold (written
      // to `chosen`, one slot longer than the budget, without a branch).
      int64_t slot = 0;
      for (int64_t i = 0; i < num_maskable; ++i) {
        chosen[slot] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(candidates[i]));
        slot += candidates[i] >= threshold;
      }
      int32_t* row_positions = positions + row * predictions;
      std::copy(chosen.begin(), chosen.begin() + budget, row_positions);
      int32_t* row_masked = masked + row * length;
      for (slot = 0; slot < budget; ++slot) {
        const int64_t index = row * predictions + slot;
        const int32_t original = row_ids[row_positions[slot]];
        const int32_t decide = draw[2 * index];
        int32_t replaced = original;
        if (decide < mask_below_) {
          replaced = static_cast<int32_t>(mask_token_id_);
        } else if (decide < random_below_) {
          replaced = replacements[draw[2 * index + 1] % num_replacements];
        }
        row_masked[row_positions[slot]] = replaced;
        mask_ids[index] = original;
        weights[index] = 1.0f;
      }
    }
  }

 private:
  int64_t predictions_;
  int64_t pad_token_id_;
  int64_t mask_token_id_;
  int64_t mask_below_;
  int64_t random_below_;
  uint64_t scramble_key_;
  uint64_t select_stream_;
  uint64_t corrupt_stream_;
};

REGISTER_KERNEL_BUILDER(Name("LmpipeMaskedLmTokens").Device(DEVICE_CPU), MaskedLmTokensOp);

}  // namespace lmpipe
