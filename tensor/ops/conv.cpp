#include "tensor/ops/conv.h"

#include <algorithm>
#include <vector>

#include "cuda/backend.h"
#include "tensor/cpu/conv.h"
#include "tensor/cpu/im2col.h"
#include "tensor/cpu/quantize.h"
#include "tensor/ops/common.h"
#include "tensor/ops/quantize.h"

namespace mixtape {

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

int64_t conv_transpose_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t output_padding,
                                int64_t dilation) {
  return (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1;
}

SamePadding same_padding(Size2 kernel, Size2 dilation) {
  const Size2 total{dilation.h * (kernel.h - 1), dilation.w * (kernel.w - 1)};
  return {{total.h / 2, total.w / 2}, {total.h - total.h / 2, total.w - total.w / 2}};
}

namespace {

std::string params_str(Size2 stride, Size2 padding, Size2 dilation) {
  return detail::cat("stride ", size2_str(stride), ", padding ", size2_str(padding), ", dilation ",
                     size2_str(dilation));
}

// The conv2d parameters for a message: the padding at the end when it differs, groups
// when not 1.
std::string params_str(Size2 stride, Size2 padding, Size2 padding_end, Size2 dilation, int64_t groups) {
  std::string s = params_str(stride, padding, dilation);
  if (!(padding_end == padding)) s += ", padding at the end " + size2_str(padding_end);
  if (groups != 1) s += detail::cat(", groups ", groups);
  return s;
}

// Output length along one dim with padding pb before and pe after.
int64_t conv_out_size2(int64_t in, int64_t kernel, int64_t stride, int64_t pb, int64_t pe, int64_t dilation) {
  return (in + pb + pe - dilation * (kernel - 1) - 1) / stride + 1;
}

// Groups divide both channel counts: in_channels of the input, out_channels of the weight [OC, C/G, KH, KW].
void check_groups(const char* op, int64_t groups, int64_t in_channels, int64_t out_channels, const std::string& ctx) {
  MT_CHECK(groups > 0, op, ": groups must be positive, got ", groups, ctx);
  MT_CHECK(in_channels % groups == 0, op, ": in_channels ", in_channels, " is not divisible by groups ", groups, ctx);
  MT_CHECK(out_channels % groups == 0, op, ": out_channels ", out_channels, " is not divisible by groups ", groups,
           ctx);
}

// Shared argument checks; `ctx` names the tensors and parameters for the message.
void check_params(const char* op, Size2 stride, Size2 padding, Size2 dilation, const std::string& ctx) {
  MT_CHECK(stride.h > 0 && stride.w > 0, op, ": stride must be positive, got ", size2_str(stride), ctx);
  MT_CHECK(dilation.h > 0 && dilation.w > 0, op, ": dilation must be positive, got ", size2_str(dilation), ctx);
  MT_CHECK(padding.h >= 0 && padding.w >= 0, op, ": padding must be non-negative, got ", size2_str(padding), ctx);
}

void check_operands(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, const char* x_what,
                    const char* w_what) {
  if (b.defined()) ops::check_same(op, {&x, &w, &b});
  else ops::check_same(op, {&x, &w});
  ops::check_floating(op, x);
  ops::check_dim(op, x, 4, x_what);
  ops::check_dim(op, w, 4, w_what);
  MT_CHECK(w.size(2) > 0 && w.size(3) > 0, op, ": weight ", w.meta(), " has an empty kernel");
}

void check_bias(const char* op, const Tensor& b, const Tensor& w, int64_t channels) {
  MT_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == channels), op, ": bias ", b.defined() ? b.meta() : "",
           " does not match weight ", w.meta(), " (expected [", channels, "])");
}

// The kernel, dilated, must fit in the padded image [h, w] (padding before and, when given, a
// different padding after).
void check_fits(const char* op, int64_t h, int64_t w, int64_t kh, int64_t kw, Size2 padding, Size2 dilation,
                const std::string& ctx, std::optional<Size2> padding_end = std::nullopt) {
  const Size2 pe = padding_end.value_or(padding);
  const int64_t ekh = dilation.h * (kh - 1) + 1, ekw = dilation.w * (kw - 1) + 1;
  const int64_t ph = h + padding.h + pe.h, pw = w + padding.w + pe.w;
  MT_CHECK(ekh <= ph && ekw <= pw, op, ": kernel ", size2_str({kh, kw}), " with dilation ", size2_str(dilation),
           " spans ", size2_str({ekh, ekw}), ", larger than the padded input ", size2_str({ph, pw}), ctx);
}

// conv2d with padding `padding` before and `padding_end` after the image (the two public forms).
Tensor conv2d_padded(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, Size2 padding,
                     Size2 padding_end, Size2 dilation, int64_t groups) {
  check_operands(op, x, w, b, "an input [N, C, H, W]", "a weight [OC, C/groups, KH, KW]");
  const std::string ctx = detail::cat(" (input ", x.meta(), ", weight ", w.meta(), ", ",
                                      params_str(stride, padding, padding_end, dilation, groups), ")");
  check_params(op, stride, padding, dilation, ctx);
  check_params(op, stride, padding_end, dilation, ctx);
  check_groups(op, groups, x.size(1), w.size(0), ctx);
  if (groups == 1) {
    MT_CHECK(x.size(1) == w.size(1), op, ": input ", x.meta(), " has ", x.size(1), " channels but weight ", w.meta(),
             " expects ", w.size(1));
  } else {
    MT_CHECK(x.size(1) == w.size(1) * groups, op, ": input ", x.meta(), " has ", x.size(1), " channels but weight ",
             w.meta(), " with groups ", groups, " expects ", w.size(1), " x ", groups, " = ", w.size(1) * groups);
  }
  check_fits(op, x.size(2), x.size(3), w.size(2), w.size(3), padding, dilation, ctx, padding_end);
  check_bias(op, b, w, w.size(0));
  const int64_t OH = conv_out_size2(x.size(2), w.size(2), stride.h, padding.h, padding_end.h, dilation.h);
  const int64_t OW = conv_out_size2(x.size(3), w.size(3), stride.w, padding.w, padding_end.w, dilation.w);
  Tensor out = empty({x.size(0), w.size(0), OH, OW}, x.dtype(), x.device());
  // The kernels read the output size from `out`, so only the padding before the image is passed.
  on_device(
      x.device(),
      [&] { cpu::conv2d(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups, out); },
      [&] { cuda::conv2d(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups, out); });
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, ConvPadding padding, Size2 dilation,
              int64_t groups) {
  if (!padding.same) return conv2d_padded("conv2d", x, w, b, stride, padding.size, padding.size, dilation, groups);
  const char* op = "conv2d (padding \"same\")";
  MT_CHECK(stride == Size2(1), op, ": needs stride 1 (as torch), got ", size2_str(stride));
  ops::check_dim(op, w, 4, "a weight [OC, C/groups, KH, KW]");
  MT_CHECK(dilation.h > 0 && dilation.w > 0, op, ": dilation must be positive, got ", size2_str(dilation));
  const SamePadding pad = same_padding({w.size(2), w.size(3)}, dilation);
  return conv2d_padded(op, x, w, b, 1, pad.begin, pad.end, dilation, groups);
}

Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, Size2 stride, Size2 padding,
                             Size2 dilation, int64_t groups, std::optional<Size2> padding_end) {
  const char* op = "conv2d backward (input)";
  const Size2 pe = padding_end.value_or(padding);
  check_operands(op, dy, w, Tensor(), "a gradient [N, OC, OH, OW]", "a weight [OC, C/groups, KH, KW]");
  const std::string ctx = detail::cat(" (gradient ", dy.meta(), ", weight ", w.meta(), ", input ", shape_str(x_shape),
                                      ", ", params_str(stride, padding, pe, dilation, groups), ")");
  check_params(op, stride, padding, dilation, ctx);
  check_params(op, stride, pe, dilation, ctx);
  MT_CHECK(x_shape.size() == 4, op, ": shapes do not fit", ctx);
  check_groups(op, groups, x_shape[1], w.size(0), ctx);
  MT_CHECK(x_shape[0] == dy.size(0) && x_shape[1] == w.size(1) * groups && dy.size(1) == w.size(0), op,
           ": shapes do not fit", ctx);
  check_fits(op, x_shape[2], x_shape[3], w.size(2), w.size(3), padding, dilation, ctx, pe);
  MT_CHECK(conv_out_size2(x_shape[2], w.size(2), stride.h, padding.h, pe.h, dilation.h) == dy.size(2) &&
               conv_out_size2(x_shape[3], w.size(3), stride.w, padding.w, pe.w, dilation.w) == dy.size(3),
           op, ": gradient spatial size does not match the input", ctx);
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  const Tensor none;
  on_device(
      dy.device(),
      [&] {
    cpu::conv2d_backward_input(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups,
                               dx);
      },
      [&] {
    cuda::conv2d_backward_input(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups,
                                dx);
  });
  return dx;
}

Tensor conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_shape, Size2 stride, Size2 padding,
                              Size2 dilation, int64_t groups, std::optional<Size2> padding_end) {
  const char* op = "conv2d backward (weight)";
  const Size2 pe = padding_end.value_or(padding);
  check_operands(op, x, dy, Tensor(), "an input [N, C, H, W]", "a gradient [N, OC, OH, OW]");
  const std::string ctx = detail::cat(" (input ", x.meta(), ", gradient ", dy.meta(), ", weight ", shape_str(w_shape),
                                      ", ", params_str(stride, padding, pe, dilation, groups), ")");
  check_params(op, stride, padding, dilation, ctx);
  check_params(op, stride, pe, dilation, ctx);
  MT_CHECK(w_shape.size() == 4, op, ": shapes do not fit", ctx);
  check_groups(op, groups, x.size(1), w_shape[0], ctx);
  MT_CHECK(x.size(0) == dy.size(0) && x.size(1) == w_shape[1] * groups && dy.size(1) == w_shape[0], op,
           ": shapes do not fit", ctx);
  check_fits(op, x.size(2), x.size(3), w_shape[2], w_shape[3], padding, dilation, ctx, pe);
  MT_CHECK(conv_out_size2(x.size(2), w_shape[2], stride.h, padding.h, pe.h, dilation.h) == dy.size(2) &&
               conv_out_size2(x.size(3), w_shape[3], stride.w, padding.w, pe.w, dilation.w) == dy.size(3),
           op, ": gradient spatial size does not match the input", ctx);
  Tensor dw = empty(w_shape, x.dtype(), x.device());
  on_device(
      x.device(),
      [&] {
    cpu::conv2d_backward_weight(x, dy, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups, dw);
      },
      [&] {
    cuda::conv2d_backward_weight(x, dy, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, groups, dw);
  });
  return dw;
}

Tensor conv2d_backward_bias(const Tensor& dy) {
  ops::check_same("conv backward (bias)", {&dy});
  ops::check_floating("conv backward (bias)", dy);
  ops::check_dim("conv backward (bias)", dy, 4, "a gradient [N, OC, OH, OW]");
  Tensor db = empty({dy.size(1)}, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::conv2d_backward_bias(dy, db); }, [&] { cuda::conv2d_backward_bias(dy, db); });
  return db;
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, Size2 padding,
                        Size2 output_padding, Size2 dilation) {
  const char* op = "conv_transpose2d";
  check_operands(op, x, w, b, "an input [N, IC, H, W]", "a weight [IC, OC, KH, KW]");
  const std::string ctx =
      detail::cat(" (input ", x.meta(), ", weight ", w.meta(), ", ", params_str(stride, padding, dilation),
                  ", output_padding ", size2_str(output_padding), ")");
  check_params(op, stride, padding, dilation, ctx);
  MT_CHECK(x.size(1) == w.size(0), op, ": input ", x.meta(), " has ", x.size(1), " channels but weight ", w.meta(),
           " expects ", w.size(0));
  MT_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
               (output_padding.h < stride.h || output_padding.h < dilation.h) &&
               (output_padding.w < stride.w || output_padding.w < dilation.w),
           op, ": output_padding ", size2_str(output_padding), " must be non-negative and smaller than either stride ",
           size2_str(stride), " or dilation ", size2_str(dilation), ctx);
  check_bias(op, b, w, w.size(1));
  const int64_t OH = conv_transpose_out_size(x.size(2), w.size(2), stride.h, padding.h, output_padding.h, dilation.h);
  const int64_t OW = conv_transpose_out_size(x.size(3), w.size(3), stride.w, padding.w, output_padding.w, dilation.w);
  MT_CHECK(OH > 0 && OW > 0, op, ": output size ", size2_str({OH, OW}), " is not positive", ctx);
  Tensor out = empty({x.size(0), w.size(1), OH, OW}, x.dtype(), x.device());
  // The adjoint of conv2d with weight w [IC, OC, KH, KW] read as conv2d's [OC', C', KH, KW]:
  // y = col2im(W^T x) + b, the computation of conv2d's input gradient.
  on_device(
      x.device(),
      [&] {
    cpu::conv2d_backward_input(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, 1, out);
      },
      [&] {
    cuda::conv2d_backward_input(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, 1, out);
  });
  return out;
}

Tensor conv_transpose2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, Size2 stride,
                                       Size2 padding, Size2 dilation) {
  const char* op = "conv_transpose2d backward (input)";
  check_operands(op, dy, w, Tensor(), "a gradient [N, OC, OH, OW]", "a weight [IC, OC, KH, KW]");
  const std::string ctx = detail::cat(" (gradient ", dy.meta(), ", weight ", w.meta(), ", input ", shape_str(x_shape),
                                      ", ", params_str(stride, padding, dilation), ")");
  check_params(op, stride, padding, dilation, ctx);
  MT_CHECK(x_shape.size() == 4 && x_shape[0] == dy.size(0) && x_shape[1] == w.size(0) && dy.size(1) == w.size(1), op,
           ": shapes do not fit", ctx);
  check_fits(op, dy.size(2), dy.size(3), w.size(2), w.size(3), padding, dilation, ctx);
  // dx = conv2d(dy, w) over the positions of x (output_padding can leave dy one conv step
  // longer than x needs).
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  const Tensor none;
  on_device(
      dy.device(),
      [&] { cpu::conv2d(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, 1, dx); },
      [&] { cuda::conv2d(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, 1, dx); });
  return dx;
}

Tensor conv_transpose2d_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_shape, Size2 stride,
                                        Size2 padding, Size2 dilation) {
  const char* op = "conv_transpose2d backward (weight)";
  check_operands(op, x, dy, Tensor(), "an input [N, IC, H, W]", "a gradient [N, OC, OH, OW]");
  const std::string ctx = detail::cat(" (input ", x.meta(), ", gradient ", dy.meta(), ", weight ", shape_str(w_shape),
                                      ", ", params_str(stride, padding, dilation), ")");
  check_params(op, stride, padding, dilation, ctx);
  MT_CHECK(w_shape.size() == 4 && x.size(0) == dy.size(0) && x.size(1) == w_shape[0] && dy.size(1) == w_shape[1], op,
           ": shapes do not fit", ctx);
  check_fits(op, dy.size(2), dy.size(3), w_shape[2], w_shape[3], padding, dilation, ctx);
  // dW = X col(dy)^T: conv2d's weight gradient with dy as the image and x as the columns.
  Tensor dw = empty(w_shape, x.dtype(), x.device());
  on_device(
      x.device(),
      [&] {
    cpu::conv2d_backward_weight(dy, x, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, 1, dw);
      },
      [&] {
    cuda::conv2d_backward_weight(dy, x, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, 1, dw);
  });
  return dw;
}

namespace {

// The checks im2col and col2im share, for an image of `x_shape` (message context `ctx`); returns
// the geometry with the output size.
cpu::ColumnGeometry column_geometry(const char* op, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding,
                                    Size2 padding_end, Size2 dilation, const std::string& ctx) {
  MT_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel must be positive, got ", size2_str(kernel), ctx);
  check_params(op, stride, padding, dilation, ctx);
  check_params(op, stride, padding_end, dilation, ctx);
  check_fits(op, x_shape[2], x_shape[3], kernel.h, kernel.w, padding, dilation, ctx, padding_end);
  const int64_t OH = conv_out_size2(x_shape[2], kernel.h, stride.h, padding.h, padding_end.h, dilation.h);
  const int64_t OW = conv_out_size2(x_shape[3], kernel.w, stride.w, padding.w, padding_end.w, dilation.w);
  return {kernel, stride, padding, dilation, {OH, OW}};
}

std::string column_ctx(const std::string& tensors, Size2 kernel, Size2 stride, Size2 padding, Size2 padding_end,
                       Size2 dilation) {
  return detail::cat(" (", tensors, ", kernel ", size2_str(kernel), ", ",
                     params_str(stride, padding, padding_end, dilation, 1), ")");
}

}  // namespace

Tensor im2col(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation,
              std::optional<Size2> padding_end, ColumnLayout layout) {
  const char* op = "im2col";
  ops::check_same(op, {&x});
  if (!is_8bit(x.dtype())) ops::check_floating(op, x);
  ops::check_dim(op, x, 4, "an input [N, C, H, W]");
  const Size2 pe = padding_end.value_or(padding);
  const std::string ctx = column_ctx("input " + x.meta(), kernel, stride, padding, pe, dilation);
  const cpu::ColumnGeometry g = column_geometry(op, x.shape(), kernel, stride, padding, pe, dilation, ctx);
  return on_device(
      x.device(),
      [&] {
    const int64_t P = x.size(0) * g.out.h * g.out.w, K = x.size(1) * kernel.h * kernel.w;
    if (layout == ColumnLayout::channel_major) {
      Tensor cols_t = empty({K, P}, x.dtype(), x.device());
      cpu::im2col_channel_major(x, g, cols_t);
      return cols_t.t();
    }
    Tensor cols = empty({P, K}, x.dtype(), x.device());
    cpu::im2col(x, g, cols);
    return cols;
      },
      [&] {
    Tensor cols = empty({x.size(0) * g.out.h * g.out.w, x.size(1) * kernel.h * kernel.w}, x.dtype(), x.device());
    cuda::im2col(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, g.out.h,
                 g.out.w, cols);
    return cols;
  });
}

bool im2col_reads_every_pixel(const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation,
                              std::optional<Size2> padding_end) {
  const Size2 pe = padding_end.value_or(padding);
  const std::string ctx = column_ctx("input " + shape_str(x_shape), kernel, stride, padding, pe, dilation);
  MT_CHECK(x_shape.size() == 4, "im2col_reads_every_pixel: expected an input shape [N, C, H, W], got ",
           shape_str(x_shape));
  const cpu::ColumnGeometry g = column_geometry("im2col", x_shape, kernel, stride, padding, pe, dilation, ctx);
  // Along one dim: pixel i is read when i = o s - p + k d for some window o < out and tap k < taps.
  const auto every = [](int64_t size, int64_t out, int64_t taps, int64_t s, int64_t p, int64_t d) {
    std::vector<bool> read(size_t(size), false);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < taps; ++k)
        if (const int64_t i = o * s - p + k * d; i >= 0 && i < size) read[size_t(i)] = true;
    return std::all_of(read.begin(), read.end(), [](bool r) { return r; });
  };
  return every(x_shape[2], g.out.h, kernel.h, stride.h, padding.h, dilation.h) &&
         every(x_shape[3], g.out.w, kernel.w, stride.w, padding.w, dilation.w);
}

namespace {

// col2im, each entry read as v * (*scale) + 0 when scale is given (CPU, f32 columns: Note [Scaled
// columns]).
Tensor col2im_scaled(const Tensor& cols, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding,
                     Size2 dilation, std::optional<Size2> padding_end, std::optional<DType> out_dtype,
                     const float* scale) {
  const char* op = "col2im";
  ops::check_same(op, {&cols});
  ops::check_floating(op, cols);
  ops::check_dim(op, cols, 2, "columns [N*OH*OW, C*KH*KW]");
  const Size2 pe = padding_end.value_or(padding);
  const std::string ctx =
      column_ctx("columns " + cols.meta() + ", input " + shape_str(x_shape), kernel, stride, padding, pe, dilation);
  MT_CHECK(x_shape.size() == 4 && std::all_of(x_shape.begin(), x_shape.end(), [](int64_t d) { return d >= 0; }), op,
           ": expected an input shape [N, C, H, W], got ", shape_str(x_shape), ctx);
  const cpu::ColumnGeometry g = column_geometry(op, x_shape, kernel, stride, padding, pe, dilation, ctx);
  const Shape want = {x_shape[0] * g.out.h * g.out.w, x_shape[1] * kernel.h * kernel.w};
  MT_CHECK(cols.shape() == want, op, ": columns ", cols.meta(), " do not match the input ", shape_str(x_shape),
           " and the geometry: expected ", shape_str(want), " = [N*OH*OW, C*KH*KW] with OH, OW ", size2_str(g.out),
           ctx);
  const DType xt = out_dtype.value_or(cols.dtype());
  MT_CHECK(xt == cols.dtype() || (cols.dtype() == DType::f32 && is_16bit(xt)), op, ": out_dtype ", dtype_name(xt),
           " must be the columns' dtype, or f16 / bf16 for f32 columns ", cols.meta());
  return on_device(
      cols.device(),
      [&] {
    Tensor x = empty(x_shape, xt, cols.device());
    cpu::col2im(cols, g, x, scale);
    return x;
      },
      [&] {
    Tensor x = empty(x_shape, cols.dtype(), cols.device());
    cuda::col2im(cols, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, g.out.h,
                 g.out.w, x);
    return xt == cols.dtype() ? x : x.to(xt);  // elsewhere: rounded by a cast
  });
}

// One block of scales covering the operand, and no second level: a per-tensor operand.
bool one_scale(const Quantized& q) {
  return q.codes.defined() && q.codes.dim() == 2 && q.block_rows >= q.rows() && q.block_cols >= q.cols() &&
         q.scale_inv.defined() && q.scale_inv.numel() == 1 && !q.tensor_scale_inv.defined();
}

}  // namespace

Tensor col2im(const Tensor& cols, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation,
              std::optional<Size2> padding_end, std::optional<DType> out_dtype) {
  return col2im_scaled(cols, x_shape, kernel, stride, padding, dilation, padding_end, out_dtype, nullptr);
}

Tensor col2im_product(const Quantized& a, const Quantized& b, bool transposed, const Shape& x_shape, Size2 kernel,
                      Size2 stride, Size2 padding, Size2 dilation, std::optional<Size2> padding_end, DType out_dtype) {
  // Unit strides only: there col2im's additions are vectorized and the scaled read costs nothing
  // next to the pass it saves; with stride 2 (the dcgan's small products) it made the step slower.
  const bool sums = one_scale(a) && one_scale(b) && a.codes.device().is_cpu() && b.codes.device().is_cpu() &&
                    a.cols() == b.cols() && is_8bit(a.codes.dtype()) && is_8bit(b.codes.dtype()) && stride.w == 1;
  if (!sums) {  // the composition (which also says what is wrong with bad operands)
    const Tensor p = scaled_matmul_nt(a, b, Tensor(), DType::f32);
    return col2im(transposed ? p.t() : p, x_shape, kernel, stride, padding, dilation, padding_end, out_dtype);
  }
  Tensor p = empty({a.rows(), b.rows()}, DType::f32, a.codes.device());
  const float factor = cpu::scaled_sums_nt(a.codes, a.scale_inv, b.codes, b.scale_inv, p);
  return col2im_scaled(transposed ? p.t() : p, x_shape, kernel, stride, padding, dilation, padding_end, out_dtype,
                       &factor);
}

}  // namespace mixtape
