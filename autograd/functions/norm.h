// Differentiable layer norm and group norm (tensor-level kernels and formulas: tensor/ops/norm.h).
// Each node passes the incoming gradient scale through: its backward is linear in dy.
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace mixtape {

// weight and bias may be undefined Variables (no affine part); their gradients come in the
// parameters' dtype (f32 parameters with a 16-bit input: f32 gradients).
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight = Variable(),
                    const Variable& bias = Variable(), double eps = 1e-5);
Variable group_norm(const Variable& x, int64_t num_groups, const Variable& weight = Variable(),
                    const Variable& bias = Variable(), double eps = 1e-5);

}  // namespace mixtape
