#include "tensor/core/strided.h"

namespace mixtape {

std::string Strided::meta() const {
  return detail::cat(dtype_name(dtype_), shape_str(shape_), device_.is_cpu() ? "" : " " + device_.str());
}

Strided Strided::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape_[size_t(d)];
  if (start < 0) start += n;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ", start + length,
           ") is out of bounds for dim ", d, " of ", meta());
  Shape sh = shape_;
  sh[size_t(d)] = length;
  char* base = static_cast<char*>(data_) + start * strides_[size_t(d)] * int64_t(dtype_size(dtype_));
  return Strided(base, dtype_, std::move(sh), strides_, device_);
}

}  // namespace mixtape
