// Shapes, strides, broadcasting, and the (height, width) pairs of the 2-D ops.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace mixtape {

using Shape = std::vector<int64_t>;

// The element count of a shape. Throws naming `op` on a negative size, or when the product of the
// nonzero sizes does not fit in int64 (a shape with a zero size is empty, but its strides are
// still that product: Note [Checked sizes] in shape.cpp).
int64_t numel_of(const Shape& s, const char* op = "numel");
Shape contiguous_strides(const Shape& s);
// Whether strides (in elements) lay `shape` out row-major without gaps (size-1 dims ignored; a
// shape with a zero size holds no element and is contiguous).
bool is_contiguous_layout(const Shape& shape, const Shape& strides);
std::string shape_str(const Shape& s);  // "[2, 3]"

// Broadcast two shapes NumPy-style (trailing dims align; 1 stretches). Throws naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Normalize a possibly negative dim index into [0, ndim); throws naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

// A (height, width) pair for kernel sizes, strides, paddings and dilations. An integer means
// the same value for both: conv2d(x, w, b, 2, 1) or conv2d(x, w, b, {2, 1}, {1, 0}).
struct Size2 {
  int64_t h = 0, w = 0;
  constexpr Size2(int64_t both) : h(both), w(both) {}  // implicit on purpose: conv2d(x, w, b, 2)
  constexpr Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  friend constexpr bool operator==(Size2 a, Size2 b) { return a.h == b.h && a.w == b.w; }
};
std::string size2_str(Size2 s);  // "[h, w]"

// A convolution's padding as torch.nn.functional.conv2d takes it: a size (an int, a Size2 or
// {h, w}) or the string "same" (stride 1: the output keeps H and W; tensor/ops/conv.h
// same_padding) or "valid" (no padding).
struct ConvPadding {
  Size2 size = 0;
  bool same = false;
  constexpr ConvPadding(int64_t both) : size(both) {}  // implicit on purpose, as Size2
  constexpr ConvPadding(Size2 s) : size(s) {}
  constexpr ConvPadding(int64_t h, int64_t w) : size(h, w) {}
  template <size_t N>
  ConvPadding(const char (&mode)[N]) : ConvPadding(std::string_view(mode, N - 1)) {}
  explicit ConvPadding(std::string_view mode);  // "same" or "valid"; throws on anything else
};

}  // namespace mixtape
