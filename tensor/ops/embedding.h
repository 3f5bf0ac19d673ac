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
// accumulated in double and rounded once to dy's dtype.
Tensor embedding_backward(const Tensor& indices, const Tensor& dy, int64_t num_rows);

}  // namespace mixtape
