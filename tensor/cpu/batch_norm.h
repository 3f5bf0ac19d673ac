// CPU kernels for batch norm, forward and backward side by side. Inputs may have any strides;
// outputs are allocated by the front-end (tensor/ops/batch_norm.cpp), which has already
// validated shapes and dtypes.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape::cpu {

// mean, invstd: contiguous [C] of compute_t<x dtype> (f32, or f64 for f64 x), written here.
// weight, bias, running_mean, running_var may be undefined (see batch_norm_forward).
void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                        Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                        Tensor& mean, Tensor& invstd);
// dx, dweight, dbias: outputs, each undefined when not wanted.
void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& invstd, bool training, Tensor& dx, Tensor& dweight, Tensor& dbias);

}  // namespace mixtape::cpu
