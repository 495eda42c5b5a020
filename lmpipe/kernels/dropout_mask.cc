// lmpipe.layers.Dropout's mask in one op: the scaled keep mask that the layer otherwise builds
// from TensorFlow's ops (StatelessRandomGetKeyCounter, StatelessRandomUniformFullIntV2, a
// bitcast to 16-bit halves, a comparison, a cast and a multiply), the same values for every
// seed and shape:
//
//   words   = Philox uint32 words of `seed` as tf.random.stateless_uniform draws them
//             (dtype uint32, full range)
//   bits(j) = with bits 16, the half j % 2 of word j / 2 (the low half first); with bits 32,
//             word j
//   mask[j] = scale where bits(j) >= threshold, else 0
//
// The words come from a vectorized Philox (dropout_mask_loop.cc, in the widest variant this
// CPU runs: instruction_set.h), the op's range split across the CPU's threads. Built and
// loaded by lmpipe/kernels/__init__.py.

#include <cstdint>
#include <cstring>

#include "dropout_mask_loop.h"
#include "instruction_set_op.h"
#include "philox.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_util.h"

namespace lmpipe {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace shape_inference = ::tensorflow::shape_inference;

REGISTER_OP("LmpipeDropoutMask")
    .Input("shape: Tshape")
    .Input("seed: int32")
    .Input("scale: T")
    .Attr("threshold: int >= 0")
    .Attr("bits: int")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tshape: {int32, int64}")
    .Attr(LMPIPE_INSTRUCTION_SET_ATTR)
    .Output("mask: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle seed, scale, out;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &seed));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &scale));
      TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(0, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
The scaled keep mask of lmpipe.layers.Dropout.

shape: the mask's shape.
seed: [2] the stateless seed, as tf.random.stateless_uniform takes it.
scale: 1 / (1 - rate) in the mask's dtype.
threshold: an element is kept where its random bits are >= threshold.
bits: 16 (two elements a Philox word) or 32 (one).
instruction_set: the widest vector instructions to use (those this CPU has, at most these);
  every choice gives the same mask.
mask: scale where kept, else 0.
)doc");

LMPIPE_REGISTER_INSTRUCTION_SET_OP("LmpipeDropoutMaskInstructionSet", "LmpipeDropoutMask");

namespace {

// The key TensorFlow's stateless random ops scramble a seed with (the value is TensorFlow's
// choice, not Philox's: tf.random.stateless_* streams follow from it, so the mask's must too).
constexpr uint64_t kSeedScrambleKey = 0x02461e293ec8f720;

// The key and counter that StatelessRandomGetKeyCounter gives an int32 seed: the seed pair
// (each sign-extended to 64 bits) as a counter under kSeedScrambleKey, one Philox block of
// which is the stream's key (its words 0 and 1) and counter (words 2 and 3 above two zeros).
void KeyAndCounter(int32_t seed0, int32_t seed1, uint32_t key[2], uint32_t counter[4]) {
  const uint64_t seeds[2] = {static_cast<uint64_t>(static_cast<int64_t>(seed0)),
                             static_cast<uint64_t>(static_cast<int64_t>(seed1))};
  uint32_t mix[4];
  philox::Generator(seeds, kSeedScrambleKey).Next(mix);
  key[0] = mix[0];
  key[1] = mix[1];
  counter[0] = counter[1] = 0;
  counter[2] = mix[2];
  counter[3] = mix[3];
}

template <typename T>
class DropoutMaskOp : public OpKernel {
 public:
  explicit DropoutMaskOp(OpKernelConstruction* context) : OpKernel(context) {
    int64_t threshold;
    OP_REQUIRES_OK(context, context->GetAttr("threshold", &threshold));
    OP_REQUIRES_OK(context, context->GetAttr("bits", &bits_));
    OP_REQUIRES(context, bits_ == 16 || bits_ == 32,
                errors::InvalidArgument("bits must be 16 or 32, got ", bits_));
    OP_REQUIRES(context, threshold <= (int64_t{1} << bits_),
                errors::InvalidArgument("threshold ", threshold, " exceeds 2**", bits_));
    threshold_ = threshold;
    OP_REQUIRES_OK(context, GetInstructionSet(context, &instruction_set_));
  }

  void Compute(OpKernelContext* context) override {
    TensorShape shape;
    OP_REQUIRES_OK(context, ::tensorflow::tensor::MakeShape(context->input(0), &shape));
    const Tensor& seed = context->input(1);
    OP_REQUIRES(context, seed.NumElements() == 2,
                errors::InvalidArgument("seed must have 2 elements, got ", seed.NumElements()));
    const Tensor& scale = context->input(2);
    OP_REQUIRES(context, scale.NumElements() == 1,
                errors::InvalidArgument("scale must be a scalar, got shape ",
                                        scale.shape().DebugString()));
    Tensor* mask = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, shape, &mask));
    const int64_t size = shape.num_elements();
    if (size == 0) return;
    uint32_t key[2], counter[4];
    const auto seeds = seed.flat<int32_t>();
    KeyAndCounter(seeds(0), seeds(1), key, counter);
    // A threshold of 2**bits keeps nothing: no draw reaches it.
    if (threshold_ >= (int64_t{1} << bits_)) {
      std::memset(mask->flat<T>().data(), 0, size * sizeof(T));
      return;
    }
    uint64_t keep = 0;
    const T scale_value = scale.flat<T>()(0);
    std::memcpy(&keep, &scale_value, sizeof(T));
    char* out = reinterpret_cast<char*>(mask->flat<T>().data());
    const int bits = bits_;
    const uint32_t threshold = static_cast<uint32_t>(threshold_);
    const InstructionSet instruction_set = instruction_set_;
    // Units of 128 elements: whole Philox blocks in either width.
    constexpr int64_t kUnit = 128;
    const auto work = [&](int64_t begin, int64_t end) {
      const int64_t first = begin * kUnit;
      const int64_t count = std::min(end * kUnit, size) - first;
      DropoutMaskLoop(key, counter, bits, threshold, sizeof(T), keep, first, count,
                      out + first * sizeof(T), instruction_set);
    };
    // Every unit's words follow from its position alone: any split gives the same mask.
    context->device()->tensorflow_cpu_worker_threads()->workers->ParallelFor(
        (size + kUnit - 1) / kUnit, /*cost_per_unit=*/kUnit * 40, work);
  }

 private:
  int bits_;
  int64_t threshold_;
  InstructionSet instruction_set_;
};

#define REGISTER(T)                                          \
  REGISTER_KERNEL_BUILDER(Name("LmpipeDropoutMask")          \
                              .Device(DEVICE_CPU)            \
                              .HostMemory("shape")           \
                              .TypeConstraint<T>("T"),       \
                          DropoutMaskOp<T>)

REGISTER(::Eigen::half);
REGISTER(::tensorflow::bfloat16);
REGISTER(float);
REGISTER(double);

#undef REGISTER

}  // namespace
}  // namespace lmpipe
