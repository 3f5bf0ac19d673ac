// The column matrix of a 2-D convolution as an op of its own (tensor/ops/conv.h im2col, col2im):
// cols [N*OH*OW, C*KH*KW], one row per output pixel, so that conv2d is y = cols W^T with the
// reduction dim K = C*KH*KW along each row (Note [Pixel-major columns] in im2col.cpp). x may have
// any strides, cols too when read; outputs are contiguous.
#pragma once

#include <cstdint>

#include "tensor/core/shape.h"
#include "tensor/core/strided.h"

namespace mixtape::cpu {

// Where a column matrix reads: the kernel, the stride, the padding before the image (top, left),
// the dilation, and the output size OH, OW (which fixes the padding after the image).
struct ColumnGeometry {
  Size2 kernel, stride, padding, dilation, out;
};

// cols [N*OH*OW, C*KH*KW] (contiguous, x's dtype) from x [N, C, H, W]: copies, and zeros for the
// padding.
void im2col(const Strided& x, const ColumnGeometry& g, const Strided& cols);
// Note [Channel-major columns]
// The same matrix stored transposed: cols_t [C*KH*KW, N*OH*OW] (contiguous, x's dtype), row
// k = (c, kh, kw) holding tap (kh, kw) of channel c for every output pixel, so that
// cols_t^T is im2col's cols element for element. A row is built from runs of OW values, each
// read along one row of x (stride_w apart), where pixel-major rows are built from pieces of KW
// values: an 8-bit convolution reads its columns in this layout as a transposed view
// (autograd/functions/conv.cpp).
void im2col_channel_major(const Strided& x, const ColumnGeometry& g, const Strided& cols_t);
// x [N, C, H, W] (contiguous, cols' dtype, or f16 / bf16 for f32 cols): each element the sum of the entries of cols that im2col
// reads it into, in fp32 (f64 for f64), in (kh, kw) order, rounded once. With `scale` (f32 cols),
// each entry v is read as v * scale + 0: the f32 output of scaled_matmul_nt's epilogue (without a
// bias) from its raw sums (scaled_sums_nt in quantize.h), so the product's pass is not needed.
void col2im(const Strided& cols, const ColumnGeometry& g, const Strided& x, const float* scale = nullptr);

}  // namespace mixtape::cpu
