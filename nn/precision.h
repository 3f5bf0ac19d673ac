// Precision policies (docs/design.md section 5) and the fp32 allow-list.
//
//   policy      params stored   compute   master copy   update rounding
//   fp32        f32             f32       -             -
//   fp16        f32             f16       f32           exact (fp32)
//   bf16        f32             bf16      f32           exact (fp32)
//   fp16-pure   f16             f16       none          nearest, stochastic or Kahan
//   bf16-pure   bf16            bf16      none          nearest, stochastic or Kahan
//   fp8         f32             bf16, GEMM operands in 8 bits (autograd/fp8.h)   f32   exact (fp32)
//
// A model never names its precision: layers cast their parameters to the dtype of their input
// (nn/module.h), so casting the model's input to compute_dtype(policy) switches every layer to
// 16-bit compute, with the casts on the tape. A pure policy also stores the parameters in 16
// bits (Module::to(dtype)). optim/trainer.h builds the whole training step from a policy.
//
// Note [The fp32 allow-list]
// Some ops stay in fp32 under every 16-bit policy (Micikevicius et al., section 3.3: "large
// reductions ... should be carried out in fp32"). kFp32AllowList names them, each with the way
// it is kept in fp32:
//   cast_input   the op's input is cast to f32 first, with the differentiable cast (the cast
//                whose backward Zhao's rule may scale), and the op computes and returns f32:
//                softmax, log_softmax and every loss. fp32_input() does the cast; the loss
//                modules and nn::Softmax / nn::LogSoftmax call it. A 16-bit loss could not
//                even hold its own seed: S x ones with S = 2^16 overflows f16.
//   accumulate   the op takes and returns 16-bit tensors but its kernel computes in fp32 (or
//                wider) and rounds once: batch_norm (batch statistics, normalization, and the
//                running statistics, which stay f32 buffers: Module::to leaves buffers alone
//                for 16-bit dtypes), layer_norm and group_norm (the same, without running
//                statistics: Note [Normalization in mixed precision] in nn/norm.cpp), sum
//                and mean (wide accumulators, one rounding), var and
//                std (two passes in f64, one rounding: Note [Variance] in tensor/cpu/reduce.h),
//                and the GEMM-like ops (fp32 accumulation, docs/design.md section 1).
// tests/nn/test_precision.cpp checks every entry.
#pragma once

#include <cstdint>
#include <string>

#include "autograd/op_list.h"
#include "autograd/variable.h"
#include "nn/module.h"

namespace mixtape::nn {

enum class Precision : uint8_t { fp32, fp16, bf16, fp16_pure, bf16_pure, fp8 };

const char* precision_name(Precision p);  // "fp32", "fp16", "bf16", "fp16-pure", "bf16-pure", "fp8"
// Throws, listing the choices, on an unknown name.
Precision precision_from_name(const std::string& name);
DType compute_dtype(Precision p);  // f32, f16, bf16, f16, bf16, bf16 (fp8: the policy under the 8-bit GEMMs)
DType param_dtype(Precision p);    // f32 except for the pure policies
bool is_pure(Precision p);
bool is_16bit(Precision p);  // every policy but fp32

enum class Fp32Rule : uint8_t { cast_input, accumulate };
struct Fp32ListEntry {
  OpId op;
  Fp32Rule rule;
};
inline constexpr Fp32ListEntry kFp32AllowList[] = {
    {OpId::softmax, Fp32Rule::cast_input},
    {OpId::log_softmax, Fp32Rule::cast_input},
    {OpId::cross_entropy, Fp32Rule::cast_input},
    {OpId::bce_with_logits, Fp32Rule::cast_input},
    {OpId::mse_loss, Fp32Rule::cast_input},
    {OpId::nll_loss, Fp32Rule::cast_input},
    {OpId::binary_cross_entropy, Fp32Rule::cast_input},
    {OpId::l1_loss, Fp32Rule::cast_input},
    {OpId::smooth_l1_loss, Fp32Rule::cast_input},
    {OpId::batch_norm, Fp32Rule::accumulate},
    {OpId::layer_norm, Fp32Rule::accumulate},
    {OpId::group_norm, Fp32Rule::accumulate},
    {OpId::sum, Fp32Rule::accumulate},
    {OpId::mean, Fp32Rule::accumulate},
    {OpId::var, Fp32Rule::accumulate},
    {OpId::std, Fp32Rule::accumulate},
    {OpId::matmul, Fp32Rule::accumulate},
    {OpId::bmm, Fp32Rule::accumulate},
    {OpId::linear, Fp32Rule::accumulate},
    {OpId::conv2d, Fp32Rule::accumulate},
    {OpId::conv_transpose2d, Fp32Rule::accumulate},
};
bool on_fp32_allow_list(OpId op);

// The input of a cast_input op as the op must see it: a 16-bit x becomes f32 through the
// differentiable cast; f32 and f64 pass unchanged. Throws for an op that is not a cast_input
// entry of the list.
Variable fp32_input(OpId op, const Variable& x);

// Prepares a model for a policy: the pure policies store every floating parameter in 16 bits
// (buffers such as batch-norm running statistics stay f32); the others leave the model as it is.
void apply_precision(Module& model, Precision p);

// softmax / log_softmax on the allow-list: the result is f32 whatever x's dtype.
class Softmax : public UnaryModule {
 public:
  explicit Softmax(int64_t dim = -1);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

class LogSoftmax : public UnaryModule {
 public:
  explicit LogSoftmax(int64_t dim = -1);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

}  // namespace mixtape::nn
