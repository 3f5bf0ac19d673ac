#include "tensor/ops/pool.h"

#include <cmath>

#include "cuda/backend.h"
#include "tensor/cpu/pool.h"
#include "tensor/ops/common.h"

namespace mixtape {

namespace {

// Output length of a pooling along one dim, as PyTorch's pooling_output_shape: with
// e = d (k - 1) + 1 the dilated kernel, floor((n + 2p - e) / s) + 1, or with ceil_mode the
// ceiling, less one when the last window would start past the input and its left padding (every
// window starts inside the input or the left padding). Needs e <= n + 2p.
int64_t pool_out_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = n + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? span + s - 1 : span) / s + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

// Validates a pooling call on an input of x_shape and returns the output shape; `what` names
// the tensor at hand for the message (the input, or the gradient in backward).
Shape pool_out_shape(const char* op, const std::string& what, const Shape& x_shape, Size2 kernel, Size2 stride,
                     Size2 padding, Size2 dilation = 1, bool ceil_mode = false) {
  std::string ctx = detail::cat(" (", what, ", kernel ", size2_str(kernel), ", stride ", size2_str(stride),
                                ", padding ", size2_str(padding));
  if (!(dilation == Size2(1))) ctx += ", dilation " + size2_str(dilation);
  if (ceil_mode) ctx += ", ceil_mode";
  ctx += ")";
  MT_CHECK(x_shape.size() == 4, op, ": expected an input [N, C, H, W], got ", shape_str(x_shape), ctx);
  MT_CHECK(kernel.h > 0 && kernel.w > 0, op, ": kernel size must be positive, got ", size2_str(kernel), ctx);
  MT_CHECK(stride.h > 0 && stride.w > 0, op, ": stride must be positive, got ", size2_str(stride), ctx);
  MT_CHECK(dilation.h > 0 && dilation.w > 0, op, ": dilation must be positive, got ", size2_str(dilation), ctx);
  MT_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, op, ": padding ",
           size2_str(padding), " must be non-negative and at most half the kernel ", size2_str(kernel), ctx);
  const int64_t H = x_shape[2] + 2 * padding.h, W = x_shape[3] + 2 * padding.w;
  const Size2 span{dilation.h * (kernel.h - 1) + 1, dilation.w * (kernel.w - 1) + 1};
  if (dilation == Size2(1)) {
    MT_CHECK(kernel.h <= H && kernel.w <= W, op, ": kernel ", size2_str(kernel), " is larger than the padded input ",
             size2_str({H, W}), ctx);
  } else {
    MT_CHECK(span.h <= H && span.w <= W, op, ": kernel ", size2_str(kernel), " with dilation ", size2_str(dilation),
             " spans ", size2_str(span), ", larger than the padded input ", size2_str({H, W}), ctx);
  }
  return {x_shape[0], x_shape[1], pool_out_size(x_shape[2], kernel.h, stride.h, padding.h, dilation.h, ceil_mode),
          pool_out_size(x_shape[3], kernel.w, stride.w, padding.w, dilation.w, ceil_mode)};
}

// With dilation a window may hold only padding (its taps step over the input); its maximum and
// argmax would not exist, so such a geometry is rejected (Notes on PyTorch in tensor/ops/pool.h).
void check_dilated_windows(const char* op, int64_t n, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d,
                           const std::string& dim) {
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * s - p;
    bool hit = false;
    for (int64_t i = 0; i < k && !hit; ++i) hit = start + i * d >= 0 && start + i * d < n;
    MT_CHECK(hit, op, ": the window of output ", dim, " ", o, " (input positions ", start, " + i * ", d, ", i < ", k,
             ") holds only padding; input ", dim, " size ", n);
  }
}

void check_input(const char* op, const Tensor& x) {
  ops::check_same(op, {&x});
  ops::check_floating(op, x);
}

}  // namespace

PoolWithIndices max_pool2d_with_indices(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation,
                                        bool ceil_mode) {
  const char* op = "max_pool2d";
  check_input(op, x);
  const Shape os = pool_out_shape(op, "input " + x.meta(), x.shape(), kernel, stride, padding, dilation, ceil_mode);
  if (!(dilation == Size2(1))) {
    check_dilated_windows(op, x.size(2), os[2], kernel.h, stride.h, padding.h, dilation.h, "row");
    check_dilated_windows(op, x.size(3), os[3], kernel.w, stride.w, padding.w, dilation.w, "column");
  }
  PoolWithIndices r{empty(os, x.dtype(), x.device()), empty(os, DType::i64, x.device())};
  on_device(
      x.device(),
      [&] {
    cpu::max_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, r.out,
                    r.indices);
      },
      [&] {
    cuda::max_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, dilation.h, dilation.w, r.out,
                     r.indices);
  });
  return r;
}

Tensor max_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation, bool ceil_mode) {
  return max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode).out;
}

Tensor max_pool2d(const Tensor& x, Size2 kernel) { return max_pool2d(x, kernel, kernel, 0); }

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  const char* op = "max_pool2d backward";
  ops::check_same(op, {&dy, &indices}, false);
  ops::check_floating(op, dy);
  MT_CHECK(indices.dtype() == DType::i64 && indices.shape() == dy.shape() && dy.dim() == 4 && x_shape.size() == 4 &&
               x_shape[0] == dy.size(0) && x_shape[1] == dy.size(1),
           op, ": gradient ", dy.meta(), " and indices ", indices.meta(), " do not fit input ", shape_str(x_shape));
  const Tensor idx = indices.contiguous();
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::max_pool2d_backward(dy, idx, dx); }, [&] { cuda::max_pool2d_backward(dy, idx, dx); });
  return dx;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode, bool count_include_pad) {
  check_input("avg_pool2d", x);
  const Shape os = pool_out_shape("avg_pool2d", "input " + x.meta(), x.shape(), kernel, stride, padding, 1, ceil_mode);
  Tensor out = empty(os, x.dtype(), x.device());
  on_device(
      x.device(),
      [&] { cpu::avg_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, count_include_pad, out); },
      [&] {
    cuda::avg_pool2d(x, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, count_include_pad, out);
      });
  return out;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel) { return avg_pool2d(x, kernel, kernel, 0); }

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, Size2 kernel, Size2 stride, Size2 padding,
                           bool ceil_mode, bool count_include_pad) {
  const char* op = "avg_pool2d backward";
  check_input(op, dy);
  const Shape os = pool_out_shape(op, "gradient " + dy.meta() + ", input " + shape_str(x_shape), x_shape, kernel,
                                  stride, padding, 1, ceil_mode);
  MT_CHECK(dy.shape() == os, op, ": gradient ", dy.meta(), " does not match the output ", shape_str(os), " of input ",
           shape_str(x_shape));
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(),
      [&] {
    cpu::avg_pool2d_backward(dy, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, count_include_pad, dx);
      },
      [&] {
    cuda::avg_pool2d_backward(dy, kernel.h, kernel.w, stride.h, stride.w, padding.h, padding.w, count_include_pad, dx);
  });
  return dx;
}

namespace {

// Validates an adaptive pooling of an input of x_shape to output_size (output_size, resolved
// against the input; `requested` as the caller gave it); `what` names the tensors.
void check_adaptive(const char* op, const std::string& what, const Shape& x_shape, Size2 output_size,
                    const std::optional<OptionalSize2>& requested = std::nullopt) {
  const std::string ctx = detail::cat(" (", what, ", output_size ",
                                      requested ? optional_size2_str(*requested) : size2_str(output_size), ")");
  MT_CHECK(x_shape.size() == 4, op, ": expected an input [N, C, H, W], got ", shape_str(x_shape), ctx);
  MT_CHECK(output_size.h > 0 && output_size.w > 0, op, ": output_size must be positive, got ", size2_str(output_size),
           ctx);
  MT_CHECK(x_shape[2] > 0 && x_shape[3] > 0, op, ": the input's height and width must be positive, got ",
           shape_str(x_shape), ctx);
}

}  // namespace

std::string optional_size2_str(OptionalSize2 s) {
  const auto dim = [](const std::optional<int64_t>& d) { return d ? std::to_string(*d) : std::string("None"); };
  return "[" + dim(s.h) + ", " + dim(s.w) + "]";
}

Tensor adaptive_avg_pool2d(const Tensor& x, OptionalSize2 requested) {
  const char* op = "adaptive_avg_pool2d";
  check_input(op, x);
  const std::string what = "input " + x.meta();
  MT_CHECK(x.dim() == 4, op, ": expected an input [N, C, H, W], got ", shape_str(x.shape()), " (", what,
           ", output_size ", optional_size2_str(requested), ")");
  const Size2 output_size = requested.resolve(x.size(2), x.size(3));
  check_adaptive(op, what, x.shape(), output_size, requested);
  Tensor out = empty({x.size(0), x.size(1), output_size.h, output_size.w}, x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::adaptive_avg_pool2d(x, out); }, [&] { cuda::adaptive_avg_pool2d(x, out); });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& dy, const Shape& x_shape) {
  const char* op = "adaptive_avg_pool2d backward";
  check_input(op, dy);
  const std::string what = "gradient " + dy.meta() + ", input " + shape_str(x_shape);
  MT_CHECK(dy.dim() == 4, op, ": expected a gradient [N, C, OH, OW] (", what, ")");
  check_adaptive(op, what, x_shape, {dy.size(2), dy.size(3)});
  MT_CHECK(dy.size(0) == x_shape[0] && dy.size(1) == x_shape[1], op, ": gradient ", dy.meta(), " does not match input ",
           shape_str(x_shape));
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::adaptive_avg_pool2d_backward(dy, dx); },
      [&] { cuda::adaptive_avg_pool2d_backward(dy, dx); });
  return dx;
}

namespace {

std::string scale2_str(Scale2 s) { return detail::cat("[", s.h, ", ", s.w, "]"); }

// The options as the messages show them: " (<what>, size [7, 9], mode bilinear, align_corners
// true)", what left out when empty.
std::string upsample_ctx(const std::string& what, const UpsampleOptions& o) {
  std::string ctx = " (" + what + (what.empty() ? "" : ", ");
  if (o.size) ctx += "size " + size2_str(*o.size) + ", ";
  if (o.scale_factor) ctx += "scale_factor " + scale2_str(*o.scale_factor) + ", ";
  ctx += std::string("mode ") + upsample_mode_name(o.mode);
  if (o.align_corners) ctx += *o.align_corners ? ", align_corners true" : ", align_corners false";
  if (o.recompute_scale_factor) ctx += ", recompute_scale_factor";
  return ctx + ")";
}

// An upsample of an input of x_shape, validated: the output shape and what the kernels take.
struct UpsamplePlan {
  Shape out_shape;
  double scale_h = 0.0, scale_w = 0.0;  // for the index math; 0: the sizes give it
  bool align_corners = false;
};

UpsamplePlan plan_upsample(const char* op, const std::string& what, const Shape& x_shape, const UpsampleOptions& o) {
  const std::string ctx = upsample_ctx(what, o);
  MT_CHECK(x_shape.size() == 4, op, ": expected an input [N, C, H, W], got ", shape_str(x_shape), ctx);
  check_upsample_options(op, o);
  const int64_t H = x_shape[2], W = x_shape[3];
  MT_CHECK(H > 0 && W > 0 && H < kUpsampleMaxSize && W < kUpsampleMaxSize, op,
           ": the input's height and width must be positive and below 2^23, got ", shape_str(x_shape), ctx);
  UpsamplePlan p;
  Size2 out_size = 1;
  if (o.size) {
    out_size = *o.size;
  } else {
    // As PyTorch: floor of the double product. Checked in double before the conversion, so a huge
    // factor cannot overflow int64.
    const double oh = std::floor(double(H) * o.scale_factor->h), ow = std::floor(double(W) * o.scale_factor->w);
    MT_CHECK(oh >= 1 && ow >= 1, op, ": scale_factor ", scale2_str(*o.scale_factor), " gives an empty output for ",
             "input ", shape_str(x_shape), ctx);
    MT_CHECK(oh < double(kUpsampleMaxSize) && ow < double(kUpsampleMaxSize), op, ": scale_factor ",
             scale2_str(*o.scale_factor), " gives an output of ", oh, " x ", ow, ", sizes must be below 2^23", ctx);
    out_size = {int64_t(oh), int64_t(ow)};
    if (!o.recompute_scale_factor) {
      p.scale_h = o.scale_factor->h;
      p.scale_w = o.scale_factor->w;
    }
  }
  MT_CHECK(out_size.h < kUpsampleMaxSize && out_size.w < kUpsampleMaxSize, op, ": size ", size2_str(out_size),
           " must be below 2^23", ctx);
  p.out_shape = {x_shape[0], x_shape[1], out_size.h, out_size.w};
  p.align_corners = o.align_corners.value_or(false);
  return p;
}

}  // namespace

void check_upsample_options(const char* op, const UpsampleOptions& o) {
  const std::string ctx = upsample_ctx("", o);
  MT_CHECK(o.size.has_value() != o.scale_factor.has_value(), op,
           o.size ? ": give either size or scale_factor, not both" : ": give size or scale_factor (neither was given)",
           ctx);
  if (o.size) MT_CHECK(o.size->h > 0 && o.size->w > 0, op, ": size must be positive, got ", size2_str(*o.size), ctx);
  if (o.scale_factor) {
    const Scale2 f = *o.scale_factor;
    MT_CHECK(f.h > 0 && f.w > 0 && std::isfinite(f.h) && std::isfinite(f.w), op,
             ": scale_factor must be positive and finite, got ", scale2_str(f), ctx);
  }
  MT_CHECK(!o.recompute_scale_factor || o.scale_factor, op,
           ": recompute_scale_factor needs a scale_factor (with a size there is nothing to recompute)", ctx);
  MT_CHECK(!o.align_corners || o.mode == UpsampleMode::bilinear, op,
           ": align_corners is only for mode bilinear, got mode ", upsample_mode_name(o.mode), ctx);
}

Tensor upsample(const Tensor& x, const UpsampleOptions& options) {
  const char* op = "upsample";
  check_input(op, x);
  const UpsamplePlan p = plan_upsample(op, "input " + x.meta(), x.shape(), options);
  Tensor out = empty(p.out_shape, x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::upsample(x, options.mode, p.align_corners, p.scale_h, p.scale_w, out); },
      [&] { cuda::upsample(x, options.mode, p.align_corners, p.scale_h, p.scale_w, out); });
  return out;
}

Tensor upsample_backward(const Tensor& dy, const Shape& x_shape, const UpsampleOptions& options) {
  const char* op = "upsample backward";
  check_input(op, dy);
  const UpsamplePlan p = plan_upsample(op, "gradient " + dy.meta() + ", input " + shape_str(x_shape), x_shape, options);
  MT_CHECK(dy.shape() == p.out_shape, op, ": gradient ", dy.meta(), " does not match the output ",
           shape_str(p.out_shape), " of input ", shape_str(x_shape));
  Tensor dx = empty(x_shape, dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::upsample_backward(dy, options.mode, p.align_corners, p.scale_h, p.scale_w, dx); },
      [&] { cuda::upsample_backward(dy, options.mode, p.align_corners, p.scale_h, p.scale_w, dx); });
  return dx;
}

}  // namespace mixtape
