// Differentiable embedding lookup (tensor-level kernels: tensor/ops/embedding.h). The node
// passes the incoming gradient scale through.
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace mixtape {

// weight [V, D] rows at i64 `indices` (any shape); dW scatter-adds, so repeated indices sum.
Variable embedding(const Tensor& indices, const Variable& weight);

}  // namespace mixtape
