#include "tensor/ops/conv.h"

#include "cuda/backend.h"
#include "tensor/cpu/conv.h"
#include "tensor/ops/common.h"

namespace mixtape {

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

int64_t conv_transpose_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t output_padding,
                                int64_t dilation) {
  return (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1;
}

namespace {

std::string params_str(Size2 stride, Size2 padding, Size2 dilation) {
  return detail::cat("stride ", size2_str(stride), ", padding ", size2_str(padding), ", dilation ",
                     size2_str(dilation));
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

// The kernel, dilated, must fit in the padded image [h, w].
void check_fits(const char* op, int64_t h, int64_t w, int64_t kh, int64_t kw, Size2 padding, Size2 dilation,
                const std::string& ctx) {
  const int64_t ekh = dilation.h * (kh - 1) + 1, ekw = dilation.w * (kw - 1) + 1;
  MT_CHECK(ekh <= h + 2 * padding.h && ekw <= w + 2 * padding.w, op, ": kernel ", size2_str({kh, kw}),
           " with dilation ", size2_str(dilation), " spans ", size2_str({ekh, ekw}), ", larger than the padded input ",
           size2_str({h + 2 * padding.h, w + 2 * padding.w}), ctx);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, Size2 padding, Size2 dilation) {
  const char* op = "conv2d";
  check_operands(op, x, w, b, "an input [N, C, H, W]", "a weight [OC, C, KH, KW]");
  const std::string ctx =
      detail::cat(" (input ", x.meta(), ", weight ", w.meta(), ", ", params_str(stride, padding, dilation), ")");
  check_params(op, stride, padding, dilation, ctx);
  MT_CHECK(x.size(1) == w.size(1), op, ": input ", x.meta(), " has ", x.size(1), " channels but weight ", w.meta(),
           " expects ", w.size(1));
  check_fits(op, x.size(2), x.size(3), w.size(2), w.size(3), padding, dilation, ctx);
  check_bias(op, b, w, w.size(0));
  const int64_t OH = conv_out_size(x.size(2), w.size(2), stride.h, padding.h, dilation.h);
  const int64_t OW = conv_out_size(x.size(3), w.size(3), stride.w, padding.w, dilation.w);
  Tensor out = empty({x.size(0), w.size(0), OH, OW}, x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::conv2d(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, out); },
      [&] { cuda::conv2d(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, out); });
  return out;
}

Tensor conv2d_backward_input(const Tensor& dy, const Tensor& w, const Shape& x_shape, Size2 stride, Size2 padding,
                             Size2 dilation) {
  const char* op = "conv2d backward (input)";
  check_operands(op, dy, w, Tensor(), "a gradient [N, OC, OH, OW]", "a weight [OC, C, KH, KW]");
  const std::string ctx = detail::cat(" (gradient ", dy.meta(), ", weight ", w.meta(), ", input ", shape_str(x_shape),
                                      ", ", params_str(stride, padding, dilation), ")");
  check_params(op, stride, padding, dilation, ctx);
  MT_CHECK(x_shape.size() == 4 && x_shape[0] == dy.size(0) && x_shape[1] == w.size(1) && dy.size(1) == w.size(0), op,
           ": shapes do not fit", ctx);
  check_fits(op, x_shape[2], x_shape[3], w.size(2), w.size(3), padding, dilation, ctx);
  MT_CHECK(conv_out_size(x_shape[2], w.size(2), stride.h, padding.h, dilation.h) == dy.size(2) &&
               conv_out_size(x_shape[3], w.size(3), stride.w, padding.w, dilation.w) == dy.size(3),
           op, ": gradient spatial size does not match the input", ctx);
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  const Tensor none;
  on_device(
      dy.device(),
      [&] {
    cpu::conv2d_backward_input(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dx);
      },
      [&] {
    cuda::conv2d_backward_input(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dx);
  });
  return dx;
}

Tensor conv2d_backward_weight(const Tensor& x, const Tensor& dy, const Shape& w_shape, Size2 stride, Size2 padding,
                              Size2 dilation) {
  const char* op = "conv2d backward (weight)";
  check_operands(op, x, dy, Tensor(), "an input [N, C, H, W]", "a gradient [N, OC, OH, OW]");
  const std::string ctx = detail::cat(" (input ", x.meta(), ", gradient ", dy.meta(), ", weight ", shape_str(w_shape),
                                      ", ", params_str(stride, padding, dilation), ")");
  check_params(op, stride, padding, dilation, ctx);
  MT_CHECK(w_shape.size() == 4 && x.size(0) == dy.size(0) && x.size(1) == w_shape[1] && dy.size(1) == w_shape[0], op,
           ": shapes do not fit", ctx);
  check_fits(op, x.size(2), x.size(3), w_shape[2], w_shape[3], padding, dilation, ctx);
  MT_CHECK(conv_out_size(x.size(2), w_shape[2], stride.h, padding.h, dilation.h) == dy.size(2) &&
               conv_out_size(x.size(3), w_shape[3], stride.w, padding.w, dilation.w) == dy.size(3),
           op, ": gradient spatial size does not match the input", ctx);
  Tensor dw = empty(w_shape, x.dtype(), x.device());
  on_device(
      x.device(),
      [&] { cpu::conv2d_backward_weight(x, dy, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dw); },
      [&] {
    cuda::conv2d_backward_weight(x, dy, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dw);
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
    cpu::conv2d_backward_input(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, out);
      },
      [&] {
    cuda::conv2d_backward_input(x, w, b, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, out);
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
      [&] { cpu::conv2d(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dx); },
      [&] { cuda::conv2d(dy, w, none, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dx); });
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
      [&] { cpu::conv2d_backward_weight(dy, x, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dw); },
      [&] {
    cuda::conv2d_backward_weight(dy, x, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, dw);
      });
  return dw;
}

}  // namespace mixtape
