// BERT's and ALBERT's masked-LM masking of a batch in one op: the random draws, selection and
// corruption that lmpipe.datasets.MaskedLMMasker otherwise computes with TensorFlow's ops
// (Philox, comparisons, top_k or argsort, cumulative sums, segment sums, a while loop over
// rounds of whole words, gathers, a scatter). The draws are TensorFlow's (the Philox generator
// of philox.h, which TensorFlow's stateless ops run, and their distributions, keyed as the
// masker's `_RandomStreams` keys them), so the outputs are the same bytes. Per row:
//
//   maskable        = positions whose id is not special
//   num_to_predict  = min(round_half_even(num_tokens * selection_rate) clipped to [1, P],
//                         number of maskable positions); num_tokens counts the non-padding ids
//   tokens (no whole words, no n-grams):
//     selected      = the num_to_predict maskable positions with the largest select_keys
//                     (ties: the lower position first, as top_k)
//   units (whole words and/or n-grams of 1..N words, cut as the masker documents):
//     the units in ascending order of select_keys[unit index] (ties: the lower unit first, as
//     a stable argsort), walked as BERT's loop: a unit is taken whole when it fits what is
//     left of num_to_predict; else an n-gram is shortened to its longest prefix of whole words
//     that fits (a whole word alone is skipped), and the walk goes on
//   each selected piece, in ascending order of position, with (decide, pick) =
//   corrupt_draw[row, slot]:
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

#include "philox.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace lmpipe {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace shape_inference = ::tensorflow::shape_inference;

REGISTER_OP("LmpipeMaskedLm")
    .Input("token_ids: int32")
    .Input("seed: int64")
    .Input("is_special: bool")
    .Input("replacement_ids: int32")
    .Input("selection_rate: double")
    .Input("continuation: bool")
    .Attr("max_predictions: int >= 1")
    .Attr("pad_token_id: int")
    .Attr("mask_token_id: int")
    .Attr("mask_below: int")
    .Attr("random_below: int")
    .Attr("whole_word: bool")
    .Attr("ngram_thresholds: list(int)")
    .Attr("scramble_key: int")
    .Attr("select_stream: int")
    .Attr("span_stream: int")
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
BERT's and ALBERT's masked-LM selection and 80/10/10 corruption of a batch.

token_ids: [B, S] packed and padded ids.
seed: [2] the stateless seed (as the masker's `_RandomStreams` takes it).
is_special: [V] True for the ids never selected (padding included).
replacement_ids: [R] the ids a random replacement is drawn from.
selection_rate: scalar, the share of the non-padding tokens to predict.
continuation: [V] True for continuation pieces ("##ing"), with whole_word; else empty.
masked_ids: [B, S] the corrupted ids.
mask_positions: [B, P] the selected positions in ascending order, 0 past the selection.
mask_ids: [B, P] the original ids there, 0 past the selection.
mask_weights: [B, P] 1 for a selected slot, else 0.
)doc");

namespace {

// A stream of TensorFlow's StatelessRandomUniformIntV2 over [0, 2**31 - 1) with Philox: the
// values from the counter (stream << 32, counter_high) under `key`, in order.
class UniformInts {
 public:
  UniformInts(uint64_t key, uint64_t stream, uint64_t counter_high) {
    const uint64_t counter[2] = {stream << 32, counter_high};
    base_ = philox::Generator(counter, key);
  }

  // Values [first, first + size) of the stream into `out`.
  void Fill(int64_t first, int64_t size, int32_t* out) const {
    constexpr int64_t kGroup = 4;  // words a Philox block
    philox::Generator generator = base_;
    generator.Skip(static_cast<uint64_t>(first / kGroup));
    int64_t skipped = first % kGroup;
    uint32_t words[kGroup];
    for (int64_t written = 0; written < size; skipped = 0) {
      generator.Next(words);
      for (int64_t i = skipped; i < kGroup && written < size; ++i) {
        out[written++] = Modulo(words[i]);
      }
    }
  }

 private:
  // TensorFlow's UniformDistribution<int32>(0, 2**31 - 1) is `word % (2**31 - 1)`; a Mersenne
  // modulus needs no division: x = 2**31 hi + lo is congruent to hi + lo.
  static int32_t Modulo(uint32_t word) {
    constexpr uint32_t kModulus = 0x7FFFFFFFu;
    uint32_t value = (word & kModulus) + (word >> 31);
    value -= value >= kModulus ? kModulus : 0;
    return static_cast<int32_t>(value);
  }

  philox::Generator base_;
};

}  // namespace

class MaskedLmOp : public OpKernel {
 public:
  explicit MaskedLmOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("max_predictions", &predictions_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("pad_token_id", &pad_token_id_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mask_token_id", &mask_token_id_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("mask_below", &mask_below_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("random_below", &random_below_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("whole_word", &whole_word_));
    std::vector<int64_t> thresholds;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ngram_thresholds", &thresholds));
    ngram_thresholds_.assign(thresholds.begin(), thresholds.end());
    int64_t key, select, span, corrupt;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scramble_key", &key));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("select_stream", &select));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("span_stream", &span));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("corrupt_stream", &corrupt));
    scramble_key_ = static_cast<uint64_t>(key);
    select_stream_ = static_cast<uint64_t>(select);
    span_stream_ = static_cast<uint64_t>(span);
    corrupt_stream_ = static_cast<uint64_t>(corrupt);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& token_ids = ctx->input(0);
    const Tensor& seed = ctx->input(1);
    const Tensor& is_special = ctx->input(2);
    const Tensor& replacement_ids = ctx->input(3);
    const Tensor& selection_rate = ctx->input(4);
    const Tensor& continuation = ctx->input(5);
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
    OP_REQUIRES(ctx, !whole_word_ || continuation.shape() == is_special.shape(),
                errors::InvalidArgument("continuation must be [V] with whole_word"));
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
    // stateless ops do (StatelessRandomUniformFullIntV2, uint64, two values: words 0 and 1,
    // then 2 and 3, of one block, the low word first).
    const auto seed_values = seed.flat<int64_t>();
    const uint64_t seed_counter[2] = {static_cast<uint64_t>(seed_values(0)),
                                      static_cast<uint64_t>(seed_values(1))};
    uint32_t block[4];
    philox::Generator(seed_counter, scramble_key_).Next(block);
    const uint64_t mixed[2] = {block[0] | static_cast<uint64_t>(block[1]) << 32,
                               block[2] | static_cast<uint64_t>(block[3]) << 32};
    const bool units = whole_word_ || !ngram_thresholds_.empty();
    // The [B, S] select and span draws are read a row at a time, as far as the row needs them.
    const Streams streams{UniformInts(mixed[0], select_stream_, mixed[1]),
                          UniformInts(mixed[0], span_stream_, mixed[1])};
    std::vector<int32_t> draw(batch * predictions * 2);
    UniformInts(mixed[0], corrupt_stream_, mixed[1]).Fill(0, draw.size(), draw.data());

    const Tables tables{is_special.flat<bool>().data(),
                        whole_word_ ? continuation.flat<bool>().data() : nullptr};
    const int32_t* replacements = replacement_ids.flat<int32_t>().data();
    const int64_t num_replacements = replacement_ids.NumElements();
    const double rate = selection_rate.scalar<double>()();
    Scratch scratch(length, predictions);
    for (int64_t row = 0; row < batch; ++row) {
      const int32_t* row_ids = ids + row * length;
      int64_t num_tokens = 0;
      int64_t num_maskable = 0;
      for (int64_t s = 0; s < length; ++s) {
        num_tokens += row_ids[s] != pad_token_id_;
        num_maskable += !tables.special[row_ids[s]];
      }
      // Python's round(n * rate): the float64 product rounded half to even (the default
      // rounding mode), as tf.round does.
      const double share = static_cast<double>(num_tokens) * rate;
      int64_t wanted = static_cast<int64_t>(std::nearbyint(share));
      wanted = std::min<int64_t>(std::max<int64_t>(wanted, 1), predictions);
      const int64_t budget = std::min<int64_t>(wanted, num_maskable);
      if (budget == 0) continue;
      const int64_t count =
          units ? SelectUnits(tables, streams, row, row_ids, length, budget, &scratch)
                : SelectTokens(tables, streams, row, row_ids, length, budget, &scratch);
      int32_t* row_positions = positions + row * predictions;
      std::copy(scratch.chosen.begin(), scratch.chosen.begin() + count, row_positions);
      int32_t* row_masked = masked + row * length;
      for (int64_t slot = 0; slot < count; ++slot) {
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
  // The vocabulary's tables, inputs of the call (a kernel may run several calls at once).
  struct Tables {
    const bool* special;
    const bool* continuation;  // with whole_word only
  };

  struct Streams {
    UniformInts select, span;
  };

  // Per-row work space, sized once per call.
  struct Scratch {
    Scratch(int64_t length, int64_t predictions)
        : candidates(length), boundary(length), chosen(std::max(length, predictions) + 1),
          word_start(length), unit_start(length), marks(length), unit_first(length),
          unit_len(length), unit_words(length + 1), taken(length), keys(length) {}
    std::vector<uint64_t> candidates, boundary;
    std::vector<int32_t> chosen;
    std::vector<char> word_start, unit_start, marks;
    std::vector<int64_t> unit_first, unit_len, unit_words, word_offsets, taken;
    std::vector<int32_t> keys;
  };

  // Tokens: the `budget` maskable positions with the largest keys, ascending, in `chosen`.
  static int64_t SelectTokens(const Tables& tables, const Streams& streams, int64_t row,
                              const int32_t* row_ids, int64_t length, int64_t budget,
                              Scratch* scratch) {
    int32_t* row_keys = scratch->keys.data();
    streams.select.Fill(row * length, length, row_keys);
    // The maskable positions as (key << 32 | ~position): the larger, the earlier top_k takes
    // it (a larger key, or an equal key at a lower position).
    uint64_t* candidates = scratch->candidates.data();
    int64_t num_maskable = 0;
    for (int64_t s = 0; s < length; ++s) {
      const uint64_t key = static_cast<uint32_t>(row_keys[s]);
      candidates[num_maskable] = key << 32 | (0xFFFFFFFFu - static_cast<uint32_t>(s));
      num_maskable += !tables.special[row_ids[s]];
    }
    // The budget-th largest candidate: the keys' top 6 bits (31-bit keys: bits 62-57 of a
    // candidate) count the candidates per bucket; the threshold lies in the bucket where the
    // count from the top reaches the budget, and is found among that bucket's few.
    int64_t histogram[64] = {0};
    for (int64_t i = 0; i < num_maskable; ++i) ++histogram[candidates[i] >> 57];
    int bucket = 63;
    int64_t above = 0;
    while (above + histogram[bucket] < budget) above += histogram[bucket--];
    uint64_t* boundary = scratch->boundary.data();
    int64_t in_bucket = 0;
    for (int64_t i = 0; i < num_maskable; ++i) {
      boundary[in_bucket] = candidates[i];
      in_bucket += static_cast<int>(candidates[i] >> 57) == bucket;
    }
    const int64_t rank = budget - above - 1;
    std::nth_element(boundary, boundary + rank, boundary + in_bucket, std::greater<uint64_t>());
    const uint64_t threshold = boundary[rank];
    // The candidates at or above the threshold, in order of position (written without a
    // branch: `chosen` is one slot longer than the budget).
    int32_t* chosen = scratch->chosen.data();
    int64_t slot = 0;
    for (int64_t i = 0; i < num_maskable; ++i) {
      chosen[slot] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(candidates[i]));
      slot += candidates[i] >= threshold;
    }
    return budget;
  }

  // Whole words and n-grams: BERT's / ALBERT's walk over the row's units in random order;
  // the taken pieces, ascending, in `chosen`. Returns how many (at most `budget`).
  int64_t SelectUnits(const Tables& tables, const Streams& streams, int64_t row,
                      const int32_t* row_ids, int64_t length, int64_t budget,
                      Scratch* scratch) const {
    const bool* special = tables.special;
    char* word_start = scratch->word_start.data();
    int64_t num_words = 0;
    for (int64_t s = 0; s < length; ++s) {
      const bool maskable = !special[row_ids[s]];
      const bool after_special = s == 0 || special[row_ids[s - 1]];
      word_start[s] =
          maskable && (!whole_word_ || !tables.continuation[row_ids[s]] || after_special);
      num_words += word_start[s];
    }
    const char* unit_start = word_start;  // whole words (or tokens) are the units
    if (!ngram_thresholds_.empty()) {
      // Spans of 1 + (the thresholds a draw reaches) words, one after the other from the
      // row's first word; a span also starts at every word right after a special token. The
      // row's draws past its words (at most one span a word) mark nothing and are not read.
      int32_t* row_spans = scratch->keys.data();
      streams.span.Fill(row * length, num_words, row_spans);
      char* marks = scratch->marks.data();
      std::fill(marks, marks + length, 0);
      int64_t start = 0;
      for (int64_t j = 0; j < num_words && start < num_words; ++j) {
        marks[start] = 1;
        int64_t span = 1;
        for (const int32_t threshold : ngram_thresholds_) span += row_spans[j] >= threshold;
        start += span;
      }
      char* span_start = scratch->unit_start.data();
      int64_t word = -1;
      for (int64_t s = 0; s < length; ++s) {
        word += word_start[s];
        const bool after_special = s == 0 || special[row_ids[s - 1]];
        span_start[s] = word_start[s] && (marks[std::max<int64_t>(word, 0)] || after_special);
      }
      unit_start = span_start;
    }
    // The units (contiguous: a maskable piece after a special token starts one), with their
    // first position, length and the offsets of the words after their first.
    int64_t* unit_first = scratch->unit_first.data();
    int64_t* unit_len = scratch->unit_len.data();
    int64_t* unit_words = scratch->unit_words.data();
    std::vector<int64_t>& word_offsets = scratch->word_offsets;
    word_offsets.clear();
    int64_t num_units = 0;
    for (int64_t s = 0; s < length; ++s) {
      if (special[row_ids[s]]) continue;
      if (unit_start[s] || num_units == 0) {
        unit_first[num_units] = s;
        unit_len[num_units] = 0;
        unit_words[num_units] = static_cast<int64_t>(word_offsets.size());
        ++num_units;
      }
      const int64_t unit = num_units - 1;
      const int64_t offset = s - unit_first[unit];
      if (word_start[s] && offset > 0) word_offsets.push_back(offset);
      ++unit_len[unit];
    }
    unit_words[num_units] = static_cast<int64_t>(word_offsets.size());
    // The random order: ascending keys, ties to the lower unit (a stable argsort), taken from
    // a min-heap, since the walk usually ends after a few of the units.
    int32_t* row_keys = scratch->keys.data();
    streams.select.Fill(row * length, num_units, row_keys);  // the units' keys only
    uint64_t* order = scratch->candidates.data();
    for (int64_t u = 0; u < num_units; ++u) {
      order[u] = static_cast<uint64_t>(static_cast<uint32_t>(row_keys[u])) << 32 |
                 static_cast<uint32_t>(u);
    }
    std::make_heap(order, order + num_units, std::greater<uint64_t>());
    int64_t* taken = scratch->taken.data();
    std::fill(taken, taken + num_units, 0);
    int64_t left = budget;
    for (int64_t unvisited = num_units; unvisited > 0 && left > 0; --unvisited) {
      std::pop_heap(order, order + unvisited, std::greater<uint64_t>());
      const int64_t unit = static_cast<int64_t>(order[unvisited - 1] & 0xFFFFFFFFu);
      int64_t pieces = unit_len[unit];
      if (pieces > left) {
        if (ngram_thresholds_.empty()) continue;  // a whole word that does not fit
        // An n-gram shortened to its longest prefix of whole words that fits (0: none; with
        // tokens for words, `left`).
        pieces = 0;
        for (int64_t w = unit_words[unit]; w < unit_words[unit + 1]; ++w) {
          if (word_offsets[w] <= left) pieces = word_offsets[w];
        }
      }
      taken[unit] = pieces;
      left -= pieces;
    }
    int32_t* chosen = scratch->chosen.data();
    int64_t count = 0;
    for (int64_t u = 0; u < num_units; ++u) {
      for (int64_t i = 0; i < taken[u]; ++i) {
        chosen[count++] = static_cast<int32_t>(unit_first[u] + i);
      }
    }
    return count;
  }

  int64_t predictions_;
  int64_t pad_token_id_;
  int64_t mask_token_id_;
  int64_t mask_below_;
  int64_t random_below_;
  bool whole_word_;
  std::vector<int32_t> ngram_thresholds_;
  uint64_t scramble_key_;
  uint64_t select_stream_;
  uint64_t span_stream_;
  uint64_t corrupt_stream_;
};

REGISTER_KERNEL_BUILDER(Name("LmpipeMaskedLm").Device(DEVICE_CPU), MaskedLmOp);

}  // namespace lmpipe
