// 2-D pooling and resampling CPU kernels, forward and backward side by side: max_pool2d (with
// dilation), avg_pool2d (with count_include_pad), adaptive_avg_pool2d and upsample (nearest and
// bilinear). x and dy may have any strides;
// outputs are contiguous. Output sizes are read from the output tensor's shape, so ceil_mode
// (chosen by the front-end) needs nothing here beyond clipping. Windows are clipped to the input:
// max pooling treats padding as -inf, average pooling as zeros that count in the divisor when
// count_include_pad (PyTorch's default). 16-bit values are loaded into fp32, and each output
// element is rounded once.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"
#include "tensor/core/upsample_formulas.h"

namespace mixtape::cpu {

// out [N, C, OH, OW]: the maximum of each window {o s - p + i d : i < k} per dim (a NaN in the
// window wins); indices (i64, same shape): the first maximum's flat position h * W + w in its
// input plane.
void max_pool2d(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w, int64_t dil_h, int64_t dil_w, const Strided& out, const Strided& indices);
// dx [N, C, H, W]: each dy element added at its window's argmax.
void max_pool2d_backward(const Strided& dy, const Strided& indices, const Strided& dx);
// out [N, C, OH, OW] = (sum of the window's input elements) / divisor. The divisor counts the
// window's positions inside the padded input when count_include_pad (kernel_h * kernel_w except
// for a ceil_mode window that runs past the padding), else only those inside the input.
void avg_pool2d(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w, bool count_include_pad, const Strided& out);
// dx [N, C, H, W]: each dy / divisor added to every input element of its window.
void avg_pool2d_backward(const Strided& dy, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w, bool count_include_pad, const Strided& dx);

// out [N, C, OH, OW]: output (i, j) averages input rows [floor(i H / OH), ceil((i + 1) H / OH))
// and columns [floor(j W / OW), ceil((j + 1) W / OW)) (PyTorch's adaptive windows).
void adaptive_avg_pool2d(const Strided& x, const Strided& out);
// dx [N, C, H, W]: each dy / (its window's size) added to every input element of its window.
void adaptive_avg_pool2d_backward(const Strided& dy, const Strided& dx);

// out [N, C, OH, OW]: x resampled to the output's size, each output from the input positions and
// weights of Note [Upsample index math] (tensor/core/upsample_formulas.h). scale_h, scale_w: the
// scale factors the index math uses, 0 where the sizes give it.
void upsample(const Strided& x, UpsampleMode mode, bool align_corners, double scale_h, double scale_w,
              const Strided& out);
// dx [N, C, H, W]: each dy element times its weights added to the inputs its output read, the
// outputs in row-major order.
void upsample_backward(const Strided& dy, UpsampleMode mode, bool align_corners, double scale_h, double scale_w,
                       const Strided& dx);

}  // namespace mixtape::cpu
