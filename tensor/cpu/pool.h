// 2-D pooling CPU kernels, forward and backward side by side. x and dy may have any strides;
// outputs are contiguous. Windows are clipped to the input: max pooling treats padding as -inf,
// average pooling as zeros that count in the divisor (count_include_pad, PyTorch's default).
// 16-bit values are loaded into fp32, and each output element is rounded once.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// out [N, C, OH, OW]: the maximum of each window (a NaN in the window wins); indices (i64, same
// shape): the first maximum's flat position h * W + w in its input plane.
void max_pool2d(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w, const Strided& out, const Strided& indices);
// dx [N, C, H, W]: each dy element added at its window's argmax.
void max_pool2d_backward(const Strided& dy, const Strided& indices, const Strided& dx);
// out [N, C, OH, OW] = (sum of the window's input elements) / (kernel_h * kernel_w).
void avg_pool2d(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w, const Strided& out);
// dx [N, C, H, W]: each dy / (kernel_h * kernel_w) added to every input element of its window.
void avg_pool2d_backward(const Strided& dy, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w, const Strided& dx);

}  // namespace mixtape::cpu
