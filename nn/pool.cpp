#include "nn/pool.h"

#include <charconv>

#include "autograd/functions/pool.h"

namespace mixtape::nn {

namespace {

void check_pool(const char* layer, Size2 kernel, Size2 stride, Size2 padding) {
  MT_CHECK(kernel.h > 0 && kernel.w > 0, layer, ": kernel_size must be positive, got ", size2_str(kernel));
  MT_CHECK(stride.h > 0 && stride.w > 0, layer, ": stride must be positive, got ", size2_str(stride));
  MT_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, layer,
           ": padding ", size2_str(padding), " must be >= 0 and at most half the kernel ", size2_str(kernel));
}

void check_input(const Module& m, const Variable& x) {
  MT_CHECK(x.defined() && x.dim() == 4, m.str(), ": expected input [N, C, H, W], got ",
           x.defined() ? x.data().meta() : "an undefined Variable");
}

// A double as Python's str(float) shows it: the shortest text that reads back as the same value,
// with ".0" on whole numbers (2.0, 1.5, 0.25).
std::string py_float(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, r.ptr);
  if (s.find_first_not_of("-0123456789") == std::string::npos) s += ".0";
  return s;
}

std::string pool_repr(Size2 kernel, Size2 stride, Size2 padding) {
  return "kernel=" + size2_repr(kernel) + ", stride=" + size2_repr(stride) + ", padding=" + size2_repr(padding);
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation, bool ceil_mode)
    : UnaryModule("MaxPool2d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      dilation_(dilation),
      ceil_mode_(ceil_mode) {
  check_pool("MaxPool2d", kernel_, stride_, padding_);
  MT_CHECK(dilation.h > 0 && dilation.w > 0, "MaxPool2d: dilation must be positive, got ", size2_str(dilation));
}

Variable MaxPool2d::forward(const Variable& x) {
  check_input(*this, x);
  return max_pool2d(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::string MaxPool2d::extra_repr() const {
  std::string s = pool_repr(kernel_, stride_, padding_);
  if (!(dilation_ == Size2(1))) s += ", dilation=" + size2_repr(dilation_);
  if (ceil_mode_) s += ", ceil_mode=true";
  return s;
}

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode,
                     bool count_include_pad)
    : UnaryModule("AvgPool2d"),
      kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad) {
  check_pool("AvgPool2d", kernel_, stride_, padding_);
}

Variable AvgPool2d::forward(const Variable& x) {
  check_input(*this, x);
  return avg_pool2d(x, kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
}

std::string AvgPool2d::extra_repr() const {
  std::string s = pool_repr(kernel_, stride_, padding_);
  if (ceil_mode_) s += ", ceil_mode=true";
  if (!count_include_pad_) s += ", count_include_pad=false";
  return s;
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(OptionalSize2 output_size)
    : UnaryModule("AdaptiveAvgPool2d"), output_size_(output_size) {
  MT_CHECK(output_size.h.value_or(1) > 0 && output_size.w.value_or(1) > 0,
           "AdaptiveAvgPool2d: output_size must be positive (or None), got ", optional_size2_str(output_size));
}

Variable AdaptiveAvgPool2d::forward(const Variable& x) {
  check_input(*this, x);
  return adaptive_avg_pool2d(x, output_size_);
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  const std::optional<int64_t> h = output_size_.h, w = output_size_.w;
  if (h && w) return "output_size=" + size2_repr({*h, *w});
  const auto dim = [](const std::optional<int64_t>& d) { return d ? std::to_string(*d) : std::string("None"); };
  return "output_size=(" + dim(h) + ", " + dim(w) + ")";
}

Upsample::Upsample(const UpsampleOptions& options) : UnaryModule("Upsample"), options_(options) {
  check_upsample_options("Upsample", options_);
}

Variable Upsample::forward(const Variable& x) {
  check_input(*this, x);
  return upsample(x, options_);
}

std::string Upsample::extra_repr() const {
  std::string s;
  if (options_.scale_factor) {
    const Scale2 f = *options_.scale_factor;
    s = "scale_factor=" + (f.h == f.w ? py_float(f.h) : "(" + py_float(f.h) + ", " + py_float(f.w) + ")");
  } else {
    s = "size=" + size2_repr(*options_.size);
  }
  s += std::string(", mode=") + upsample_mode_name(options_.mode);
  if (options_.align_corners.value_or(false)) s += ", align_corners=true";
  if (options_.recompute_scale_factor) s += ", recompute_scale_factor=true";
  return s;
}

}  // namespace mixtape::nn
