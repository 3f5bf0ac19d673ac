// Differentiable embedding lookup (tensor-level kernels: tensor/ops/embedding.h). The node
// passes the incoming gradient scale through.
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace mixtape {

// weight [V, D] rows at i64 `indices` (any shape); dW scatter-adds, so repeated indices sum.
// Row padding_idx (in [0, V), or -1 for none) gets no gradient: its row of dW is zero.
Variable embedding(const Tensor& indices, const Variable& weight, int64_t padding_idx = -1);

}  // namespace mixtape
