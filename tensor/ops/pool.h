// 2-D pooling on plain tensors (no autograd): x [N, C, H, W] -> [N, C, OH, OW] with
// OH = floor((H + 2 padding - dilation (kernel - 1) - 1) / stride) + 1, or with ceil_mode the
// ceiling, less one if the last window would start past the input and its left padding (as
// PyTorch). The stride defaults to the kernel size. Padding is at most half the kernel (as in
// PyTorch). max_pool2d treats padding as -inf; avg_pool2d counts padded zeros in the divisor
// unless count_include_pad is false (a ceil_mode window's part past the padded input never
// counts). Default arguments give PyTorch's defaults. adaptive_avg_pool2d picks the windows from
// the output size instead (PyTorch's). upsample resamples to a size or by a scale factor (nearest
// or bilinear, as torch.nn.functional.interpolate).
//
// Notes on PyTorch: a dilated max-pool window whose taps all fall in the padding (possible only
// with dilation > 1) is rejected here; PyTorch returns -inf with an index outside the plane.
#pragma once

#include <optional>

#include "tensor/core/upsample_formulas.h"
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

// An adaptive pooling's output size whose dims may be left open (std::nullopt): an open dim keeps
// the input's size, as PyTorch's AdaptiveAvgPool2d((None, 7)). It converts from a Size2 and from
// one size, so adaptive_avg_pool2d(x, {3, 4}) and adaptive_avg_pool2d(x, 1) read as before:
//   adaptive_avg_pool2d(x, {std::nullopt, 7})
struct OptionalSize2 {
  std::optional<int64_t> h, w;
  OptionalSize2(Size2 s) : h(s.h), w(s.w) {}         // implicit on purpose, as Size2's
  OptionalSize2(int64_t both) : h(both), w(both) {}  // implicit on purpose
  OptionalSize2(std::optional<int64_t> h_, std::optional<int64_t> w_) : h(h_), w(w_) {}
  // The size for an input of height H and width W.
  Size2 resolve(int64_t H, int64_t W) const { return {h.value_or(H), w.value_or(W)}; }
};
std::string optional_size2_str(OptionalSize2 s);  // "[3, 4]", "[None, 7]"

// x [N, C, H, W] -> [N, C, OH, OW] = output_size (an open dim: the input's H or W): output (i, j)
// averages input rows [floor(i H / OH), ceil((i + 1) H / OH)) and the columns alike. Any output
// size is allowed (larger than the input too: windows then repeat inputs).
Tensor adaptive_avg_pool2d(const Tensor& x, OptionalSize2 output_size);
// dx of x_shape: each dy / (its window's size) goes to every input element of its window.
Tensor adaptive_avg_pool2d_backward(const Tensor& dy, const Shape& x_shape);

// Scale factors along (H, W); one value sets both.
struct Scale2 {
  double h = 1.0, w = 1.0;
  constexpr Scale2(double both) : h(both), w(both) {}  // implicit on purpose: {.scale_factor = 2}
  constexpr Scale2(double h_, double w_) : h(h_), w(w_) {}
  friend constexpr bool operator==(Scale2 a, Scale2 b) { return a.h == b.h && a.w == b.w; }
};

// torch.nn.functional.interpolate's arguments for a 4-D input, modes nearest and bilinear:
//   upsample(x, {.scale_factor = 2})
//   upsample(x, {.size = Size2{7, 9}, .mode = UpsampleMode::bilinear, .align_corners = true})
// Exactly one of size and scale_factor; a scale factor gives OH = floor(H * scale_factor.h) (W
// alike) and, unless recompute_scale_factor, is also what the index math uses (1 / factor input
// positions per output position, as PyTorch; with 1.5 this differs from H / OH). align_corners
// is for bilinear only (unset: false). Note [Upsample index math] in
// tensor/core/upsample_formulas.h has the positions and weights.
struct UpsampleOptions {
  std::optional<Size2> size;
  std::optional<Scale2> scale_factor;
  UpsampleMode mode = UpsampleMode::nearest;
  std::optional<bool> align_corners;
  bool recompute_scale_factor = false;
};

// Checks what can be checked without an input (one of size and scale_factor, positive values,
// align_corners with bilinear only); `op` names the caller in the message.
void check_upsample_options(const char* op, const UpsampleOptions& options);
// x [N, C, H, W] -> [N, C, OH, OW]: nearest copies input (min(floor(o s), H - 1), ...), bilinear
// weighs the two nearest rows and columns (Note [Upsample index math]). H, W, OH and OW must be
// positive and below 2^23.
Tensor upsample(const Tensor& x, const UpsampleOptions& options);
// dx of x_shape: each dy element times its weights added to the inputs its output read.
Tensor upsample_backward(const Tensor& dy, const Shape& x_shape, const UpsampleOptions& options);

}  // namespace mixtape
