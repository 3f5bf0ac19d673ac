#include "tensor/core/shape.h"

#include <algorithm>
#include <sstream>

#include "tensor/core/error.h"

namespace mixtape {

// Note [Checked sizes]
// Sizes come from users and from files. Multiplied unchecked, {2^32, 2^32} wraps to 0 elements:
// a 0-byte storage that the next read runs off. Every element count is therefore multiplied with
// __builtin_mul_overflow, and so is every byte count (empty() in tensor.cpp); the nonzero sizes
// must multiply without overflow even when another size is 0, because contiguous_strides
// multiplies exactly those. Once a tensor exists, its numel and strides fit in int64.
int64_t numel_of(const Shape& s, const char* op) {
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : s) {
    MT_CHECK(d >= 0, op, ": negative size in shape ", shape_str(s));
    if (d == 0) empty = true;
    else
      MT_CHECK(!__builtin_mul_overflow(n, d, &n), op, ": shape ", shape_str(s),
               " overflows: its element count does not fit in 64 bits");
  }
  return empty ? 0 : n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

bool is_contiguous_layout(const Shape& shape, const Shape& strides) {
  // No element, no gap: an empty shape is contiguous whatever its strides (as in PyTorch). The
  // loop below would expect stride 0 left of a zero size, which contiguous_strides never gives.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t d = dim < 0 ? dim + ndim : dim;
  MT_CHECK(d >= 0 && d < ndim, op, ": dim ", dim, " is out of range for a tensor with ", ndim, " dims");
  return d;
}

std::string size2_str(Size2 s) { return detail::cat("[", s.h, ", ", s.w, "]"); }

ConvPadding::ConvPadding(std::string_view mode) : size(0), same(mode == "same") {
  MT_CHECK(mode == "same" || mode == "valid", "convolution padding: \"", std::string(mode),
           "\" is neither \"same\" nor \"valid\" (or give a size)");
}

}  // namespace mixtape
