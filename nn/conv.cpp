#include "nn/conv.h"

#include <cmath>

#include "autograd/functions/conv.h"
#include "autograd/functions/shape.h"
#include "nn/init.h"

namespace mixtape::nn {

namespace {

void check_geometry(const char* layer, int64_t in, int64_t out, Size2 kernel, Size2 stride, Size2 padding,
                    Size2 dilation) {
  MT_CHECK(in > 0 && out > 0, layer, ": in_channels and out_channels must be positive, got ", in, " and ", out);
  MT_CHECK(kernel.h > 0 && kernel.w > 0, layer, ": kernel_size must be positive, got ", size2_str(kernel));
  MT_CHECK(stride.h > 0 && stride.w > 0, layer, ": stride must be positive, got ", size2_str(stride));
  MT_CHECK(padding.h >= 0 && padding.w >= 0, layer, ": padding must be >= 0, got ", size2_str(padding));
  MT_CHECK(dilation.h > 0 && dilation.w > 0, layer, ": dilation must be positive, got ", size2_str(dilation));
}

void check_input(const Module& m, const Variable& x, int64_t in_channels) {
  MT_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_channels, m.str(), ": expected input [N, ", in_channels,
           ", H, W], got ", x.defined() ? x.data().meta() : "an undefined Variable");
}

// torch's default conv init: W ~ kaiming_uniform(a = sqrt(5)), b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_conv_init(const Variable& weight, const Variable& bias, Generator& gen) {
  init::kaiming_uniform_(weight, gen, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(init::calculate_fans(weight.shape()).fan_in));
    init::uniform_(bias, gen, -bound, bound);
  }
}

std::string conv_repr(int64_t in, int64_t out, Size2 kernel, Size2 stride, Size2 padding, Size2 output_padding,
                      Size2 dilation, bool bias) {
  std::string s = detail::cat(in, ", ", out, ", kernel=", size2_repr(kernel), ", stride=", size2_repr(stride),
                              ", padding=", size2_repr(padding));
  if (!(output_padding == Size2(0))) s += ", output_padding=" + size2_repr(output_padding);
  if (!(dilation == Size2(1))) s += ", dilation=" + size2_repr(dilation);
  if (!bias) s += ", bias=false";
  return s;
}

}  // namespace

// ---- Conv2d ------------------------------------------------------------------------------

Conv2d::Conv2d(const Conv2dOptions& o, Generator& gen) : UnaryModule("Conv2d"), options_(o) {
  check_geometry("Conv2d", o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding.size, o.dilation);
  MT_CHECK(o.groups > 0 && o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, "Conv2d: in_channels ",
           o.in_channels, " and out_channels ", o.out_channels, " must be divisible by groups ", o.groups);
  MT_CHECK(!o.padding.same || o.stride == Size2(1), "Conv2d: padding \"same\" needs stride 1 (as torch), got stride ",
           size2_str(o.stride));
  weight =
      register_parameter("weight", empty({o.out_channels, o.in_channels / o.groups, o.kernel_size.h, o.kernel_size.w}));
  if (o.bias) bias = register_parameter("bias", empty({o.out_channels}));
  reset_parameters(gen);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride, ConvPadding padding,
               Size2 dilation, bool bias, Generator& gen)
    : Conv2d(Conv2dOptions{in_channels, out_channels, kernel_size, stride, padding, dilation, bias}, gen) {}

void Conv2d::reset_parameters(Generator& gen) { default_conv_init(weight, bias, gen); }

Variable Conv2d::forward(const Variable& x) {
  check_input(*this, x, options_.in_channels);
  const DType dt = x.dtype();
  const Conv2dOptions& o = options_;
  const Variable w = cast(weight, dt), b = bias.defined() ? cast(bias, dt) : Variable();
  return conv2d(x, w, b, o.stride, o.padding, o.dilation, o.groups);
}

std::string Conv2d::extra_repr() const {
  const Conv2dOptions& o = options_;
  std::string s =
      conv_repr(o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding.size, 0, o.dilation, o.bias);
  if (o.groups != 1) s += detail::cat(", groups=", o.groups);
  if (o.padding.same) s += ", padding=same";
  return s;
}

// ---- ConvTranspose2d ---------------------------------------------------------------------

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& o, Generator& gen)
    : UnaryModule("ConvTranspose2d"), options_(o) {
  check_geometry("ConvTranspose2d", o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding, o.dilation);
  const Size2 op = o.output_padding;
  MT_CHECK(op.h >= 0 && op.w >= 0 && (op.h < o.stride.h || op.h < o.dilation.h) &&
               (op.w < o.stride.w || op.w < o.dilation.w),
           "ConvTranspose2d: output_padding ", size2_str(op), " must be >= 0 and smaller than the stride ",
           size2_str(o.stride), " or the dilation ", size2_str(o.dilation));
  weight = register_parameter("weight", empty({o.in_channels, o.out_channels, o.kernel_size.h, o.kernel_size.w}));
  if (o.bias) bias = register_parameter("bias", empty({o.out_channels}));
  reset_parameters(gen);
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride,
                                 Size2 padding, Size2 output_padding, Size2 dilation, bool bias, Generator& gen)
    : ConvTranspose2d(ConvTranspose2dOptions{in_channels, out_channels, kernel_size, stride, padding, output_padding,
                                             dilation, bias},
                      gen) {}

void ConvTranspose2d::reset_parameters(Generator& gen) { default_conv_init(weight, bias, gen); }

Variable ConvTranspose2d::forward(const Variable& x) {
  check_input(*this, x, options_.in_channels);
  const DType dt = x.dtype();
  const ConvTranspose2dOptions& o = options_;
  return conv_transpose2d(x, cast(weight, dt), bias.defined() ? cast(bias, dt) : Variable(), o.stride, o.padding,
                          o.output_padding, o.dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  const ConvTranspose2dOptions& o = options_;
  return conv_repr(o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding, o.output_padding, o.dilation,
                   o.bias);
}

}  // namespace mixtape::nn
