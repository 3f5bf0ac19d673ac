// CPU kernels for batch norm, forward and backward side by side. Inputs may have any strides;
// outputs are allocated by the front-end (tensor/ops/batch_norm.cpp), which has already
// validated shapes and dtypes.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// mean, invstd: contiguous [C] of compute_t<x dtype> (f32, or f64 for f64 x), written here.
// weight, bias, running_mean, running_var, count may be undefined (see batch_norm_forward; a
// defined count replaces momentum by 1 / count).
void batch_norm_forward(const Strided& x, const Strided& weight, const Strided& bias, const Strided& running_mean,
                        const Strided& running_var, bool training, double momentum, double eps, const Strided& count,
                        const Strided& y, const Strided& mean, const Strided& invstd);
// dx, dweight, dbias: outputs, each undefined when not wanted.
void batch_norm_backward(const Strided& dy, const Strided& x, const Strided& weight, const Strided& mean,
                         const Strided& invstd, bool training, const Strided& dx, const Strided& dweight,
                         const Strided& dbias);

}  // namespace mixtape::cpu
