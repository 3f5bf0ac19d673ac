// Differentiable indexing: gather, index_select, where, masked_fill (tensor-level kernels:
// tensor/ops/index.h). Each backward selects or scatters dy and nothing else, so every node
// passes the incoming gradient scale through. Indices, conditions and masks are plain tensors
// (never differentiated).
#pragma once

#include <cstdint>

#include "autograd/variable.h"

namespace mixtape {

// torch.gather: dx scatter-adds dy at index (repeated entries sum).
Variable gather(const Variable& x, int64_t dim, const Tensor& index);
// torch.index_select with a 1-dim i64 index: dx adds dy's slices at index.
Variable index_select(const Variable& x, int64_t dim, const Tensor& index);
// torch.where(cond, a, b), broadcast: da = dy where cond (else 0), db = dy where not, each summed
// back to its input's shape.
Variable where(const Tensor& cond, const Variable& a, const Variable& b);
// torch.masked_fill: dx = dy where the mask is false, 0 where it is true.
Variable masked_fill(const Variable& x, const Tensor& mask, double value);

}  // namespace mixtape
