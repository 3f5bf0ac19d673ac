// Indexing ops on plain tensors (no autograd), forward and backward side by side: gather,
// index_select, where, masked_fill. The differentiable versions are in
// autograd/functions/index.h.
//
// Note [Masks without a bool dtype]
// mixtape has no bool dtype, so the condition of where and the mask of masked_fill may be i64 or
// any floating dtype: an element is true when it is not zero (so a NaN is true, as bool(nan) is
// in PyTorch). A 0/1 tensor from bernoulli, rand_labels or a comparison written as arithmetic
// serves directly. PyTorch requires a bool tensor there; that is the one difference.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

// As torch.gather: out[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (likewise for other dims).
// index: i64 with as many dims as x and index.size(d) <= x.size(d) for d != dim; out has
// index's shape. An index outside [0, x.size(dim)) throws naming the op, its position and value.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// dx of gather for an input of shape x_shape: a scatter-add of dy (index's shape) into zeros,
// accumulated in f64 and rounded once (Note [Gather backward] in tensor/cpu/index.h).
Tensor gather_backward(const Tensor& dy, int64_t dim, const Tensor& index, const Shape& x_shape);

// As torch.index_select: the entries index[0], index[1], ... of x along dim; index is i64 with
// one dim (or none: one entry). out has x's shape with size(dim) = index.numel().
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// dx of index_select: dy's slices added into zeros at index (repeated entries accumulate).
Tensor index_select_backward(const Tensor& dy, int64_t dim, const Tensor& index, const Shape& x_shape);

// As torch.where(cond, a, b): a where cond is true, else b, with cond, a and b broadcast
// together. a and b share a floating dtype; cond is i64 or floating (Note [Masks without a bool
// dtype]).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// As torch.masked_fill: x with `value` (rounded to x's dtype) where mask is true; mask is
// broadcast with x (Note [Masks without a bool dtype]). A value beyond the range of a 16-bit x
// rounds to +-inf (PyTorch refuses it; -inf is what an attention mask wants anyway).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace mixtape
