// 2-D convolutions on plain tensors (no autograd), as im2col + one GEMM per batch of images
// (tensor/cpu/conv.cpp): conv2d (with groups, and with padding "same"), conv_transpose2d and their
// gradients; and the column matrix as ops of its own (im2col, col2im; tensor/cpu/im2col.cpp).
// Layouts follow PyTorch: x [N, C, H, W], conv2d weight [OC, C/groups, KH, KW],
// conv_transpose2d weight [IC, OC, KH, KW], bias [OC]; an undefined bias means none. With groups
// G, C and OC must be divisible by G, and input channels [g C/G, (g+1) C/G) feed only output
// channels [g OC/G, (g+1) OC/G) (depthwise: G = C, OC = k C). GEMMs accumulate in fp32 (f64 for
// f64) and each output is rounded once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensor/tensor.h"

namespace mixtape {

// Output length of a convolution along one dim: floor((in + 2p - d (k - 1) - 1) / s) + 1.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);
// Output length of a transposed convolution: (in - 1) s - 2p + d (k - 1) + output_padding + 1.
int64_t conv_transpose_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t output_padding,
                                int64_t dilation);

// Padding "same" (PyTorch's padding="same", stride 1 only): along each dim the total padding
// d (k - 1) keeps the output as large as the input; `begin` (top, left) gets half of it rounded
// down and `end` (bottom, right) the rest, as PyTorch (which pads the extra row or column
// explicitly; the kernels here take the uneven padding directly).
struct SamePadding {
  Size2 begin, end;
};
SamePadding same_padding(Size2 kernel, Size2 dilation = 1);

// y [N, OC, OH, OW] = conv(x, w) + b; padding "same" (stride 1) gives y [N, OC, H, W].
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Size2 stride = 1, ConvPadding padding = 0,
              Size2 dilation = 1, int64_t groups = 1);
// Gradients of conv2d for dy [N, OC, OH, OW]; padding_end is the bottom / right padding when it
// differs from `padding` (padding "same" with an even dilated kernel):
// dx = col2im(W^T dY): (C*KH*KW, N*OH*OW) = (OC, C*KH*KW)^T (OC, N*OH*OW) per group, x_shape [N, C, H, W]
Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, Size2 stride, Size2 padding,
                             Size2 dilation, int64_t groups = 1, std::optional<Size2> padding_end = std::nullopt);
// dW = dY col(x)^T: (OC, C*KH*KW) = (OC, N*OH*OW) (C*KH*KW, N*OH*OW)^T per group
Tensor conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_shape, Size2 stride, Size2 padding,
                              Size2 dilation, int64_t groups = 1, std::optional<Size2> padding_end = std::nullopt);
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

// The column matrix of a 2-D convolution (groups 1), so that conv2d(x, w) is one GEMM
// y = im2col(x) W^T: (N*OH*OW, OC) = (N*OH*OW, C*KH*KW) (OC, C*KH*KW)^T, then permuted to
// [N, OC, OH, OW], with the reduction dim K = C*KH*KW along the rows of both operands (Note
// [Pixel-major columns] in tensor/cpu/im2col.cpp; on the GPU cuda/columns.cu).
// cols [N*OH*OW, C*KH*KW]: row (n, oh, ow) and column (c, kh, kw) (each triple in row-major order)
// hold x[n, c, oh*stride_h - pad_top + kh*dil_h, ow*stride_w - pad_left + kw*dil_w], 0 outside
// the image. OH, OW as conv2d's, with padding_end the bottom / right padding when it differs from
// `padding` (padding "same"). x [N, C, H, W] any strides, f32, f64, f16 or bf16, or the codes of
// an 8-bit dtype (the padding is code 0, +0 in every 8-bit format); cols has x's dtype (copies:
// exact) and is contiguous.
// With ColumnLayout::channel_major the same matrix comes back as the transposed view of a
// contiguous [C*KH*KW, N*OH*OW] (Note [Channel-major columns] in tensor/cpu/im2col.h; on the CPU,
// elsewhere the layout is pixel-major either way): equal values, strides (1, N*OH*OW).
enum class ColumnLayout : uint8_t { pixel_major, channel_major };
Tensor im2col(const Tensor& x, Size2 kernel, Size2 stride = 1, Size2 padding = 0, Size2 dilation = 1,
              std::optional<Size2> padding_end = std::nullopt, ColumnLayout layout = ColumnLayout::pixel_major);
// Whether im2col of an input [., ., H, W] reads every pixel into some column (a stride larger than
// the dilated kernel, or a remainder the last window does not reach, leaves pixels out).
bool im2col_reads_every_pixel(const Shape& x_shape, Size2 kernel, Size2 stride = 1, Size2 padding = 0,
                              Size2 dilation = 1, std::optional<Size2> padding_end = std::nullopt);
// The adjoint of im2col: x [x_shape = N, C, H, W], each element the sum of every entry of cols
// [N*OH*OW, C*KH*KW] that im2col reads it into. The sum runs in fp32 (f64 for f64) from 0 over the
// element's taps (kh, kw) ascending (one entry at most per tap), the same order whatever the
// thread count, and is rounded once to cols' dtype: conv2d_backward_input's order, so
// col2im(dy_mat W) equals it when the GEMMs agree. cols any strides; x contiguous. out_dtype (f16
// or bf16, for f32 cols): x rounded once to it instead, the bits of col2im(...).to(out_dtype)
// without the f32 images.
Tensor col2im(const Tensor& cols, const Shape& x_shape, Size2 kernel, Size2 stride = 1, Size2 padding = 0,
              Size2 dilation = 1, std::optional<Size2> padding_end = std::nullopt,
              std::optional<DType> out_dtype = std::nullopt);

struct Quantized;  // tensor/ops/quantize.h

// Note [Scaled columns]
// col2im of the product of two 8-bit operands, an 8-bit convolution's dgrad: the bits of
//   col2im(transposed ? p.t() : p, x_shape, ...)   with p = scaled_matmul_nt(a, b, {}, f32).
// On the CPU, two per-tensor operands' product stays its fp32 sums, and col2im applies the
// product's epilogue (sum * (fa * fb) + 0, one rounding) to each entry as it reads it
// (cpu::scaled_sums_nt, cpu::col2im's scale): the same values, without a pass that reads and
// writes every sum (14 MB for the cnn's second convolution). Elsewhere, and for strides along
// the width other than 1 (col2im's additions are scalar there), the composition.
Tensor col2im_product(const Quantized& a, const Quantized& b, bool transposed, const Shape& x_shape, Size2 kernel,
                      Size2 stride, Size2 padding, Size2 dilation, std::optional<Size2> padding_end, DType out_dtype);

}  // namespace mixtape
