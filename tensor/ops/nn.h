// Normalization, regularization and lookup ops on plain tensors (no autograd): batch norm,
// dropout, embedding. Forward and backward side by side; the differentiable versions are in
// autograd/functions/nn.h.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

// ---- batch norm --------------------------------------------------------------------------
//
// x: [N, C, ...] (at least 2 dims; [N, C], [N, C, L] and [N, C, H, W] are the usual ones).
// Statistics are per channel (dim 1) over every other dim, accumulated in double on the CPU
// whatever x's dtype (DESIGN.md: batchnorm statistics run in at least fp32).
// weight, bias: [C], optional (undefined = no affine part); one floating dtype for both, either
//   x's dtype or f32 (fp32 parameters with a 16-bit input).
// running_mean, running_var: [C] floating buffers (f32 in practice), optional in training mode,
//   required in eval mode. Training mode updates them in place with PyTorch's rule
//     running = (1 - momentum) * running + momentum * batch_stat,
//   using the unbiased batch variance for running_var (the biased one normalizes).
// Eval mode normalizes with the running statistics.
//
//   y = (x - mean) * invstd * weight + bias,   invstd = 1 / sqrt(var + eps)

struct BatchNormOutput {
  Tensor y;       // x's shape and dtype
  Tensor mean;    // [C], the mean used for normalization: f32 (f64 for f64 inputs)
  Tensor invstd;  // [C], 1 / sqrt(var + eps) used for normalization, same dtype as mean
};

BatchNormOutput batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var, bool training,
                                   double momentum = 0.1, double eps = 1e-5);

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

// ---- dropout -----------------------------------------------------------------------------
//
// Inverted dropout: y = x * mask / (1 - p), mask_i ~ Bernoulli(1 - p). The mask comes from the
// Philox stream of `gen` (Note [Dropout mask]), so it depends only on the seed, the generator's
// offset and the element's row-major index: reproducible and independent of threads or device.
// Identity (and no random numbers drawn) when !training or p == 0. p must be in [0, 1).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// Note [Dropout mask]
// Element i (row-major) is kept when uniform01_f64(philox_words(seed, offset + i)[0..1]) < 1 - p,
// the same draw as bernoulli(x.shape(), 1 - p, gen) from the same generator state. A draw
// reserves numel counters (gen.advance). The backward pass regenerates the mask from
// (seed, offset) instead of storing it, by applying the same function to dy:
//   dx = dy * mask / (1 - p) = dropout_apply(dy, p, seed, offset).
Tensor dropout_apply(const Tensor& x, double p, uint64_t seed, uint64_t offset);

// ---- embedding ---------------------------------------------------------------------------
//
// indices: i64 of any shape, values in [0, V); weight: [V, D]. Returns weight rows gathered
// into indices.shape() + [D]. An index out of range throws naming it and V.
Tensor embedding(const Tensor& indices, const Tensor& weight);

// dW [num_rows, D] = scatter-add of dy's rows at `indices` (repeated indices accumulate),
// accumulated in double and rounded once to dy's dtype.
Tensor embedding_backward(const Tensor& indices, const Tensor& dy, int64_t num_rows);

}  // namespace mixtape
