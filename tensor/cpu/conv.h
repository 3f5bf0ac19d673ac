// Convolution CPU kernels: im2col / col2im around one GEMM per chunk of images (all images at
// once unless the column buffer would pass kColumnBudget elements). Three kernels serve conv2d
// and conv_transpose2d both ways (tensor/ops/conv.cpp):
//   conv2d                  y  = W col(x) (+ b)               conv2d fwd, conv_transpose2d dx
//   conv2d_backward_input   dx = col2im(W^T dy) (+ b)         conv2d dx,  conv_transpose2d fwd
//   conv2d_backward_weight  dW = dy col(x)^T                  conv2d dW,  conv_transpose2d dW
//   conv2d_backward_bias    db = sum of dy over N, OH, OW      both
// In each, w has the conv2d layout [OC, C/groups, KH, KW] and "x" is the [N, C, H, W] side; output
// sizes are taken from the output tensor's shape, so the padding after the image (bottom, right)
// may differ from pad_h / pad_w before it (padding "same" with an even kernel). With groups G,
// channel group g of x [g C/G, (g+1) C/G) meets only output channels [g OC/G, (g+1) OC/G). Inputs may have any strides; outputs are
// contiguous. 16-bit tensors are loaded into f32 buffers (im2col does the conversion), the GEMM
// runs in fp32, and each output element is rounded once (Note [16-bit GEMM], cpu/linalg.cpp).
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// out [N, OC, OH, OW] = conv(x [N, C, H, W], w [OC, C/groups, KH, KW]) + bias [OC] (bias may be undefined).
void conv2d(const Strided& x, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups, const Strided& out);
// dx [N, C, H, W] = col2im(W^T dy) + bias [C] (bias may be undefined), dy [N, OC, OH, OW].
void conv2d_backward_input(const Strided& dy, const Strided& w, const Strided& bias, int64_t stride_h, int64_t stride_w,
                           int64_t pad_h, int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups,
                           const Strided& dx);
// dw [OC, C/groups, KH, KW] = dy col(x)^T per group, summed over the batch.
void conv2d_backward_weight(const Strided& x, const Strided& dy, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t groups, const Strided& dw);
// db [OC] = sum of dy [N, OC, OH, OW] over N, OH, OW, accumulated in double.
void conv2d_backward_bias(const Strided& dy, const Strided& db);

}  // namespace mixtape::cpu
