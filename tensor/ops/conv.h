// 2-D convolutions on plain tensors (no autograd), as im2col + one GEMM per batch of images
// (tensor/cpu/conv.cpp). Layouts follow PyTorch: x [N, C, H, W], conv2d weight [OC, C, KH, KW],
// conv_transpose2d weight [IC, OC, KH, KW], bias [OC]; an undefined bias means none. GEMMs
// accumulate in fp32 (f64 for f64) and each output is rounded once.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace mixtape {

// Output length of a convolution along one dim: floor((in + 2p - d (k - 1) - 1) / s) + 1.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);
// Output length of a transposed convolution: (in - 1) s - 2p + d (k - 1) + output_padding + 1.
int64_t conv_transpose_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t output_padding,
                                int64_t dilation);

// y [N, OC, OH, OW] = conv(x, w) + b.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Size2 stride = 1, Size2 padding = 0,
              Size2 dilation = 1);
// Gradients of conv2d for dy [N, OC, OH, OW]:
// dx = col2im(W^T dY): (C*KH*KW, N*OH*OW) = (OC, C*KH*KW)^T (OC, N*OH*OW), x_shape [N, C, H, W]
Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, Size2 stride, Size2 padding,
                             Size2 dilation);
// dW = dY col(x)^T: (OC, C*KH*KW) = (OC, N*OH*OW) (C*KH*KW, N*OH*OW)^T
Tensor conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_shape, Size2 stride, Size2 padding,
                              Size2 dilation);
// db = sum of dy over N, OH, OW: (OC), accumulated in double
Tensor conv2d_backward_bias(const Tensor& dy);

// The adjoint of conv2d: y [N, OC, OH, OW] = conv2d_backward_input(x, w) + b, with x [N, IC, H, W],
// w [IC, OC, KH, KW] and OH = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1.
// output_padding must be smaller than the stride or the dilation.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Size2 stride = 1,
                        Size2 padding = 0, Size2 output_padding = 0, Size2 dilation = 1);
// dx = conv2d(dy, w) restricted to x_shape [N, IC, H, W] (dy [N, OC, OH, OW]).
Tensor conv_transpose2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, Size2 stride,
                                       Size2 padding, Size2 dilation);
// dW = X col(dy)^T: (IC, OC*KH*KW) = (IC, N*H*W) (OC*KH*KW, N*H*W)^T
Tensor conv_transpose2d_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_shape, Size2 stride,
                                        Size2 padding, Size2 dilation);
// db = sum of dy over N, OH, OW: (OC), accumulated in double
inline Tensor conv_transpose2d_backward_bias(const Tensor& dy) { return conv2d_backward_bias(dy); }

}  // namespace mixtape
