// Batch normalization on plain tensors (no autograd), forward and backward side by side; the
// differentiable version is in autograd/functions/batch_norm.h.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

// x: [N, C, ...] (at least 2 dims; [N, C], [N, C, L] and [N, C, H, W] are the usual ones).
// Statistics are per channel (dim 1) over every other dim, accumulated in double on the CPU
// whatever x's dtype (docs/design.md: batchnorm statistics run in at least fp32).
// weight, bias: [C], optional (undefined = no affine part); one floating dtype for both, either
//   x's dtype or f32 (fp32 parameters with a 16-bit input).
// running_mean, running_var: [C] floating buffers (f32 in practice), optional in training mode,
//   required in eval mode. Training mode updates them in place with PyTorch's rule
//     running = (1 - momentum) * running + momentum * batch_stat,
//   using the unbiased batch variance for running_var (the biased one normalizes).
// Eval mode normalizes with the running statistics.
// cumulative_count: optional i64 0-dim counter on x's device (BatchNorm's num_batches_tracked,
//   already advanced for this batch). When given, the running statistics take the cumulative
//   moving average of every batch so far, as PyTorch's momentum = None: momentum = 1 / count,
//   read by the kernel from the counter (no host round trip on a GPU; a count below 1 counts
//   as 1).
//
//   y = (x - mean) * invstd * weight + bias,   invstd = 1 / sqrt(var + eps)

struct BatchNormOutput {
  Tensor y;       // x's shape and dtype
  Tensor mean;    // [C], the mean used for normalization: f32 (f64 for f64 inputs)
  Tensor invstd;  // [C], 1 / sqrt(var + eps) used for normalization, same dtype as mean
};

BatchNormOutput batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var, bool training,
                                   double momentum = 0.1, double eps = 1e-5, const Tensor& cumulative_count = Tensor());

inline Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5) {
  return batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps).y;
}

struct BatchNormGrads {
  Tensor dx;       // x's dtype
  Tensor dweight;  // param_dtype
  Tensor dbias;    // param_dtype
};

// Gradients of batch_norm_forward from its saved mean and invstd. Training mode differentiates
// through the batch statistics:
//   xhat = (x - mean) * invstd,  g = dy * weight
//   dx = invstd * (g - mean_over_positions(g) - xhat * mean_over_positions(g * xhat))
// eval mode treats the statistics as constants: dx = dy * weight * invstd. In both modes
//   dweight = sum(dy * xhat),  dbias = sum(dy)  (sums over every dim but C).
// Only the requested gradients are computed (the others stay undefined). Every formula is
// linear in dy, so a power-of-two gradient scale passes through exactly.
BatchNormGrads batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& invstd, bool training, bool need_dx, bool need_dweight,
                                   bool need_dbias, DType param_dtype);

}  // namespace mixtape
