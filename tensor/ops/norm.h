// Layer norm and group norm on plain tensors (no autograd), forward and backward side by side;
// the differentiable versions are in autograd/functions/norm.h. One kernel serves both
// (tensor/cpu/norm.h): each normalizes groups of elements with their own mean and biased
// variance, then applies a per-channel affine map:
//
//   y = (x - mean) * invstd * weight + bias,   invstd = 1 / sqrt(var + eps)
//
// Statistics are accumulated in double and saved in fp32 (f64 for f64 inputs), whatever x's
// dtype, as batch norm's (Note [Norm statistics] in tensor/cpu/norm.cpp); a 16-bit x gives a
// 16-bit y, rounded once. weight and bias are optional (undefined = no affine part), share one
// floating dtype, either x's dtype or f32 (fp32 parameters with a 16-bit input), and their
// gradients come back in param_dtype. x may have any strides (the kernels see a contiguous copy).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

struct NormOutput {
  Tensor y;       // x's shape and dtype
  Tensor mean;    // one per group (shapes below): f32 (f64 for f64 inputs)
  Tensor invstd;  // same shape and dtype as mean
};

struct NormGrads {
  Tensor dx;       // x's dtype and shape
  Tensor dweight;  // param_dtype, the weight's shape
  Tensor dbias;    // param_dtype, the bias's shape
};

// ---- layer norm (Ba, Kiros, Hinton 2016), as torch.nn.functional.layer_norm -------------------
// Statistics over the last normalized_shape.size() dims of x, which must equal normalized_shape;
// weight and bias have shape normalized_shape. mean / invstd: x's leading dims.
NormOutput layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                              double eps = 1e-5);
inline Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                         const Tensor& bias = Tensor(), double eps = 1e-5) {
  return layer_norm_forward(x, normalized_shape, weight, bias, eps).y;
}

// ---- group norm (Wu & He 2018), as torch.nn.functional.group_norm ------------------------------
// x: [N, C, ...] (at least 2 dims); the C channels in num_groups groups of C / num_groups
// consecutive channels; statistics per sample and group over its channels and every position.
// weight and bias: [C]. mean / invstd: [N, num_groups].
NormOutput group_norm_forward(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                              double eps = 1e-5);
inline Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                         const Tensor& bias = Tensor(), double eps = 1e-5) {
  return group_norm_forward(x, num_groups, weight, bias, eps).y;
}

// Gradients from the saved mean and invstd, through the statistics (with g = dy * weight and
// xhat = (x - mean) * invstd, means over each group):
//   dx = invstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dweight = sum(dy * xhat),  dbias = sum(dy)   (sums over every element of the channel).
// Only the requested gradients are computed (the others stay undefined). Every formula is linear
// in dy, so a power-of-two gradient scale passes through exactly.
NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                              const Tensor& mean, const Tensor& invstd, bool need_dx, bool need_dweight,
                              bool need_dbias, DType param_dtype);
NormGrads group_norm_backward(const Tensor& dy, const Tensor& x, int64_t num_groups, const Tensor& weight,
                              const Tensor& mean, const Tensor& invstd, bool need_dx, bool need_dweight,
                              bool need_dbias, DType param_dtype);

}  // namespace mixtape
