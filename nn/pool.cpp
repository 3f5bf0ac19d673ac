#include "nn/pool.h"

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

std::string pool_repr(Size2 kernel, Size2 stride, Size2 padding) {
  return "kernel=" + size2_repr(kernel) + ", stride=" + size2_repr(stride) + ", padding=" + size2_repr(padding);
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding)
    : UnaryModule("MaxPool2d"), kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {
  check_pool("MaxPool2d", kernel_, stride_, padding_);
}

Variable MaxPool2d::forward(const Variable& x) {
  check_input(*this, x);
  return max_pool2d(x, kernel_, stride_, padding_);
}

std::string MaxPool2d::extra_repr() const { return pool_repr(kernel_, stride_, padding_); }

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding)
    : UnaryModule("AvgPool2d"), kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {
  check_pool("AvgPool2d", kernel_, stride_, padding_);
}

Variable AvgPool2d::forward(const Variable& x) {
  check_input(*this, x);
  return avg_pool2d(x, kernel_, stride_, padding_);
}

std::string AvgPool2d::extra_repr() const { return pool_repr(kernel_, stride_, padding_); }

}  // namespace mixtape::nn
