// The op side of instruction_set.h, for kernels whose loops have vector variants: the
// `instruction_set` attribute their ops take, and an op that says which variant runs on this
// CPU (`lmpipe kernels status` prints it; the tests check each cap). Each library registers
// that op under its own name: an op's name is global to the process.

#ifndef LMPIPE_KERNELS_INSTRUCTION_SET_OP_H_
#define LMPIPE_KERNELS_INSTRUCTION_SET_OP_H_

#include <string>

#include "instruction_set.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

#define LMPIPE_INSTRUCTION_SET_ATTR \
  "instruction_set: {'auto', 'avx512', 'avx2', 'baseline'} = 'auto'"

// Registers op `name` (with its CPU kernel), which gives the variant op `of` runs here.
#define LMPIPE_REGISTER_INSTRUCTION_SET_OP(name, of)                                   \
  REGISTER_OP(name)                                                                    \
      .Attr(LMPIPE_INSTRUCTION_SET_ATTR)                                               \
      .Output("chosen: string")                                                        \
      .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {             \
        c->set_output(0, c->Scalar());                                                 \
        return absl::OkStatus();                                                       \
      })                                                                               \
      .Doc("The vector instructions " of " runs with on this CPU for instruction_set."); \
  REGISTER_KERNEL_BUILDER(Name(name).Device(::tensorflow::DEVICE_CPU),                 \
                          ::lmpipe::InstructionSetOp)

namespace lmpipe {

// The variant an op's `instruction_set` attribute chooses on this CPU.
inline ::tensorflow::Status GetInstructionSet(::tensorflow::OpKernelConstruction* context,
                                              InstructionSet* chosen) {
  std::string instruction_set;
  TF_RETURN_IF_ERROR(context->GetAttr("instruction_set", &instruction_set));
  *chosen = ChooseInstructionSet(instruction_set.c_str());
  return absl::OkStatus();
}

class InstructionSetOp : public ::tensorflow::OpKernel {
 public:
  explicit InstructionSetOp(::tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    InstructionSet chosen;
    OP_REQUIRES_OK(context, GetInstructionSet(context, &chosen));
    chosen_ = InstructionSetName(chosen);
  }

  void Compute(::tensorflow::OpKernelContext* context) override {
    ::tensorflow::Tensor* chosen = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, ::tensorflow::TensorShape({}), &chosen));
    chosen->scalar<::tensorflow::tstring>()() = chosen_;
  }

 private:
  std::string chosen_;
};

}  // namespace lmpipe

#endif  // LMPIPE_KERNELS_INSTRUCTION_SET_OP_H_
