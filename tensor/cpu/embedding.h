// CPU kernels for embedding, forward and backward side by side. Inputs may have any strides;
// outputs are allocated by the front-end (tensor/ops/embedding.cpp), which has already validated
// shapes and dtypes.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape::cpu {

// out[..., :] = weight[indices[...], :]. Throws on an index outside [0, V).
void embedding(const Tensor& indices, const Tensor& weight, Tensor& out);
// dweight [V, D] = scatter-add of dy's rows; dy: indices.shape() + [D].
void embedding_backward(const Tensor& indices, const Tensor& dy, Tensor& dweight);

}  // namespace mixtape::cpu
