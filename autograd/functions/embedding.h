// Differentiable embedding lookup (tensor-level kernels: tensor/ops/embedding.h). The node
// passes the incoming gradient scale through.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/variable.h"

namespace mixtape {

// weight [V, D] rows at i64 `indices` (any shape); dW scatter-adds, so repeated indices sum.
// As torch.nn.functional.embedding: row padding_idx gets no gradient (its row of dW is zero); a
// negative padding_idx counts from the end (-1 is the last row), nullopt means none.
Variable embedding(const Tensor& indices, const Variable& weight, std::optional<int64_t> padding_idx = std::nullopt);

// padding_idx in [-V, V) as a row in [0, V), or -1 for nullopt (the kernels' "none"); throws,
// naming `who` and the range, otherwise.
int64_t padding_row(std::optional<int64_t> padding_idx, int64_t rows, const char* who);

}  // namespace mixtape
