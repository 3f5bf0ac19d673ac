// CPU kernels for embedding, forward and backward side by side. Inputs may have any strides;
// outputs are allocated by the front-end (tensor/ops/embedding.cpp), which has already validated
// shapes and dtypes.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// out[..., :] = weight[indices[...], :]. Throws on an index outside [0, V).
void embedding(const Strided& indices, const Strided& weight, const Strided& out);
// dweight [V, D] = scatter-add of dy's rows; dy: indices.shape() + [D]. Row padding_idx (in
// [0, V), or -1 for none) receives nothing: it stays zero.
void embedding_backward(const Strided& indices, const Strided& dy, int64_t padding_idx, const Strided& dweight);

}  // namespace mixtape::cpu
