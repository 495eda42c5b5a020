// word2vec's negative-sampling SGD, example by example, on two resource variables in place.
//
// The op walks a batch of examples in order and, for each, updates the vectors as the
// reference implementation (word2vec.c, as gensim implements it) does after every example:
//
//   h = the input vector (skip-gram: one word's; CBOW: the mean of the unmasked context
//       words' vectors)
//   for each candidate k (the word to predict first, then the noise words), weight w_k:
//     s = h . c_k;  g = w_k (label_k - sigmoid(s)) lr;  e += g c_k;  c_k += g h
//   each context word's vector += e (undivided, as with cbow_mean=1)
//
// so a row used by many examples of a batch moves as it would in the reference. One thread
// walks the batch, in the widest variant this CPU runs (instruction_set.h): the result depends
// only on the inputs. Built and loaded by lmpipe/kernels/__init__.py.

#include <cstring>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "instruction_set_op.h"
#include "word2vec_sgd_loop.h"

namespace lmpipe {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::Var;
namespace errors = ::tensorflow::errors;
namespace shape_inference = ::tensorflow::shape_inference;

REGISTER_OP("LmpipeWord2vecSgd")
    .Input("input_table: resource")
    .Input("output_table: resource")
    .Input("input_ids: int32")
    .Input("input_mask: float")
    .Input("candidate_ids: int32")
    .Input("candidate_weights: float")
    .Input("learning_rate: float")
    .Attr(LMPIPE_INSTRUCTION_SET_ATTR)
    .Output("loss: double")
    .Output("examples: int64")
    .SetIsStateful()
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Scalar());
      c->set_output(1, c->Scalar());
      return absl::OkStatus();
    })
    .Doc(R"doc(
Negative-sampling SGD on word2vec's tables, one example after the other, in place.

input_table: the input vectors, a float32 resource variable [V, D].
output_table: the output vectors, a float32 resource variable [V, D].
input_ids: [P] (skip-gram) or [P, C] (CBOW) word ids.
input_mask: [P, C], 1 for a real context word; an empty tensor for skip-gram.
candidate_ids: [P, K], the word to predict, then the noise words.
candidate_weights: [P, K], 0 for a candidate to skip.
learning_rate: scalar.
instruction_set: the widest vector instructions to use (those this CPU has, at most these);
  every choice gives the same result.
loss: the summed loss of the examples, each before its own update.
examples: the examples whose word to predict has a weight.
)doc");

LMPIPE_REGISTER_INSTRUCTION_SET_OP("LmpipeWord2vecSgdInstructionSet", "LmpipeWord2vecSgd");

namespace {

// The variable's buffer, made this variable's own first if a reader still holds it (the
// tensor a read returned must not change under it).
tensorflow::Status OwnedBuffer(OpKernelContext* ctx, Var* var, float** data) {
  Tensor* tensor = var->tensor();
  if (tensor->dtype() != tensorflow::DT_FLOAT || tensor->dims() != 2) {
    return errors::InvalidArgument("word2vec tables must be float32 [V, D], got ",
                                   tensor->DebugString());
  }
  if (!tensor->RefCountIsOne()) {
    Tensor copy;
    TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_FLOAT, tensor->shape(), &copy));
    std::memcpy(copy.flat<float>().data(), tensor->flat<float>().data(),
                sizeof(float) * tensor->NumElements());
    *tensor = copy;
  }
  *data = tensor->flat<float>().data();
  return absl::OkStatus();
}

}  // namespace

class Word2vecSgdOp : public OpKernel {
 public:
  explicit Word2vecSgdOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, GetInstructionSet(ctx, &instruction_set_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<Var> input_var, output_var;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &input_var));
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 1), &output_var));
    OP_REQUIRES(ctx, input_var.get() != output_var.get(),
                errors::InvalidArgument("input_table and output_table are the same variable"));
    const Tensor& input_ids = ctx->input(2);
    const Tensor& input_mask = ctx->input(3);
    const Tensor& candidate_ids = ctx->input(4);
    const Tensor& weights = ctx->input(5);
    const Tensor& learning_rate = ctx->input(6);
    OP_REQUIRES(ctx, candidate_ids.dims() == 2,
                errors::InvalidArgument("candidate_ids must be [P, K], got shape ",
                                        candidate_ids.shape().DebugString()));
    OP_REQUIRES(ctx, weights.shape() == candidate_ids.shape(),
                errors::InvalidArgument("candidate_weights must have candidate_ids' shape ",
                                        candidate_ids.shape().DebugString(), ", got ",
                                        weights.shape().DebugString()));
    OP_REQUIRES(ctx, learning_rate.dims() == 0,
                errors::InvalidArgument("learning_rate must be a scalar"));
    const int64_t examples = candidate_ids.dim_size(0);
    const int64_t num_candidates = candidate_ids.dim_size(1);
    const bool cbow = input_ids.dims() == 2;
    OP_REQUIRES(ctx, (input_ids.dims() == 1 || cbow) && input_ids.dim_size(0) == examples,
                errors::InvalidArgument("input_ids must be [P] or [P, C] with P = ", examples,
                                        ", got shape ", input_ids.shape().DebugString()));
    const int64_t contexts = cbow ? input_ids.dim_size(1) : 1;
    if (cbow) {
      OP_REQUIRES(ctx, input_mask.shape() == input_ids.shape(),
                  errors::InvalidArgument("input_mask must have input_ids' shape ",
                                          input_ids.shape().DebugString(), ", got ",
                                          input_mask.shape().DebugString()));
    }

    tensorflow::mutex_lock input_lock(*input_var->mu());
    tensorflow::mutex_lock output_lock(*output_var->mu());
    float* syn0 = nullptr;
    float* syn1 = nullptr;
    OP_REQUIRES_OK(ctx, OwnedBuffer(ctx, input_var.get(), &syn0));
    OP_REQUIRES_OK(ctx, OwnedBuffer(ctx, output_var.get(), &syn1));
    const TensorShape& table_shape = input_var->tensor()->shape();
    OP_REQUIRES(ctx, output_var->tensor()->shape() == table_shape,
                errors::InvalidArgument("input_table and output_table shapes differ: ",
                                        table_shape.DebugString(), " and ",
                                        output_var->tensor()->shape().DebugString()));
    const int64_t vocabulary_size = table_shape.dim_size(0);
    const int dim = static_cast<int>(table_shape.dim_size(1));

    const int32_t* ids = input_ids.flat<int32_t>().data();
    const float* mask = cbow ? input_mask.flat<float>().data() : nullptr;
    const int32_t* candidates = candidate_ids.flat<int32_t>().data();
    const float* candidate_weights = weights.flat<float>().data();
    for (int64_t i = 0; i < input_ids.NumElements(); ++i) {
      OP_REQUIRES(ctx, ids[i] >= 0 && ids[i] < vocabulary_size,
                  errors::InvalidArgument("input_ids[", i, "] = ", ids[i], " is not in [0, ",
                                          vocabulary_size, ")"));
    }
    for (int64_t i = 0; i < candidate_ids.NumElements(); ++i) {
      OP_REQUIRES(ctx, candidates[i] >= 0 && candidates[i] < vocabulary_size,
                  errors::InvalidArgument("candidate_ids[", i, "] = ", candidates[i],
                                          " is not in [0, ", vocabulary_size, ")"));
    }
    const float lr = learning_rate.scalar<float>()();

    int64_t counted = 0;
    const double loss = Word2vecSgd(syn0, syn1, dim, ids, mask, contexts, candidates,
                                    candidate_weights, examples, num_candidates, lr, &counted,
                                    instruction_set_);

    Tensor* loss_out = nullptr;
    Tensor* examples_out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &loss_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &examples_out));
    loss_out->scalar<double>()() = loss;
    examples_out->scalar<int64_t>()() = counted;
  }

 private:
  InstructionSet instruction_set_;
};

REGISTER_KERNEL_BUILDER(Name("LmpipeWord2vecSgd").Device(DEVICE_CPU), Word2vecSgdOp);

}  // namespace lmpipe
