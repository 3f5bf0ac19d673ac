// 2-D pooling on plain tensors (no autograd): x [N, C, H, W] -> [N, C, OH, OW] with
// OH = floor((H + 2 padding - dilation (kernel - 1) - 1) / stride) + 1, or with ceil_mode the
// ceiling, less one if the last window would start past the input and its left padding (as
// PyTorch). The stride defaults to the kernel size. Padding is at most half the kernel (as in
// PyTorch). max_pool2d treats padding as -inf; avg_pool2d counts padded zeros in the divisor
// unless count_include_pad is false (a ceil_mode window's part past the padded input never
// counts). Default arguments give PyTorch's defaults. adaptive_avg_pool2d picks the windows from
// the output size instead (PyTorch's).
//
// Notes on PyTorch: a dilated max-pool window whose taps all fall in the padding (possible only
// with dilation > 1) is rejected here; PyTorch returns -inf with an index outside the plane.
#pragma once

#include "tensor/tensor.h"

namespace mixtape {

struct PoolWithIndices {
  Tensor out;
  Tensor indices;  // i64, out's shape: the first maximum's flat position h * W + w in its plane
};

Tensor max_pool2d(const Tensor& x, Size2 kernel);
Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0, Size2 dilation = 1,
                  bool ceil_mode = false);
PoolWithIndices max_pool2d_with_indices(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0,
                                        Size2 dilation = 1, bool ceil_mode = false);
// dx of x_shape: each dy element goes to its window's argmax (overlapping windows add up).
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape);

Tensor avg_pool2d(const Tensor& x, Size2 kernel);
Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding = 0, bool ceil_mode = false,
                  bool count_include_pad = true);
// dx of x_shape: each dy / (its window's divisor) goes to every input element of its window.
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding,
                           bool ceil_mode = false, bool count_include_pad = true);

// x [N, C, H, W] -> [N, C, OH, OW] = output_size: output (i, j) averages input rows
// [floor(i H / OH), ceil((i + 1) H / OH)) and the columns alike. Any output size is allowed
// (larger than the input too: windows then repeat inputs).
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);
// dx of x_shape: each dy / (its window's size) goes to every input element of its window.
Tensor adaptive_avg_pool2d_backward(const Tensor& dy, const Shape& x_shape);

}  // namespace mixtape
