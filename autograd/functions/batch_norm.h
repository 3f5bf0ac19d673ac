// Differentiable batch norm (tensor-level kernels: tensor/ops/batch_norm.h). The node passes the
// incoming gradient scale through.
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace mixtape {

// weight and bias may be undefined Variables (no affine part). running_mean / running_var are
// plain buffers, updated in place in training mode and used for normalization in eval mode (see
// batch_norm_forward; a cumulative_count counter makes their update the cumulative average).
// Training-mode backward runs through the batch statistics; eval-mode
// backward is the affine map's. Gradients of weight and bias come in the parameters' dtype.
Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                    const Tensor& cumulative_count = Tensor());

}  // namespace mixtape
