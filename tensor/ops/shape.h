// Shape ops on plain tensors (no autograd): concat, split, stack. Every input must be defined,
// on one device and of one dtype (any dtype, i64 included). Casts are Tensor::to(dtype).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape {

// Joins tensors along `dim`: their shapes must match except in `dim`. Always a fresh
// contiguous tensor (also for a single input).
Tensor concat(const std::vector<Tensor>& xs, int64_t dim = 0);

// Views of consecutive pieces of x along `dim`, of the given sizes (which must sum to x's size
// there), or of `chunk_size` each with a smaller last piece. The pieces share x's storage.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t chunk_size, int64_t dim = 0);

// Joins equal-shaped tensors along a new dim `dim` (in [0, ndim]; negative counts from the back).
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);

// The piece sizes that split(x, chunk_size, dim) uses for a dim of size n.
std::vector<int64_t> split_sizes(int64_t n, int64_t chunk_size, const char* op);

}  // namespace mixtape
