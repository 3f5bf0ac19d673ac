// 2-D pooling on plain tensors (no autograd): x [N, C, H, W] -> [N, C, OH, OW] with
// OH = floor((H + 2 padding - kernel) / stride) + 1. The stride defaults to the kernel size.
// Padding is at most half the kernel (as in PyTorch), so every window holds an input element.
// max_pool2d treats padding as -inf; avg_pool2d counts padded zeros (count_include_pad).
#pragma once

#include "tensor/tensor.h"

namespace mixtape {

struct PoolWithIndices {
  Tensor out;
  Tensor indices;  // i64, out's shape: the first maximum's flat position h * W + w in its plane
};

Tensor max_pool2d(const Tensor& x, Size2 kernel);
Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0);
PoolWithIndices max_pool2d_with_indices(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0);
// dx of x_shape: each dy element goes to its window's argmax (overlapping windows add up).
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);

Tensor avg_pool2d(const Tensor& x, Size2 kernel);
Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0);
// dx of x_shape: each dy / (kernel_h * kernel_w) goes to every input element of its window.
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding);

}  // namespace mixtape
