// Embedding lookup on plain tensors (no autograd), forward and backward side by side; the
// differentiable version is in autograd/functions/embedding.h.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

// indices: i64 of any shape, values in [0, V); weight: [V, D]. Returns weight rows gathered
// into indices.shape() + [D]. An index out of range throws naming it and V.
Tensor embedding(const Tensor& indices, const Tensor& weight);

// dW [num_rows, D] = scatter-add of dy's rows at `indices` (repeated indices accumulate),
// accumulated in double and rounded once to dy's dtype. Row `padding_idx` (in [0, num_rows), or
// -1 for none; nn::Embedding resolves torch's negative values before) gets no gradient: its row
// of dW is zero.
Tensor embedding_backward(const Tensor& indices, const Tensor& dy, int64_t num_rows, int64_t padding_idx = -1);

}  // namespace mixtape
