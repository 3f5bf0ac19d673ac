#include "tensor/cpu/shape.h"

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

void concat(const std::vector<Strided>& xs, int64_t dim, const Strided& out) {
  dispatch_all(out.dtype(), "concat", [&]<class T>() {
    int64_t start = 0;
    for (const Strided& x : xs) {
      // Each input is copied into its window of the output: same shape, the output's strides.
      const Strided window = out.narrow(dim, start, x.size(dim));
      start += x.size(dim);
      T* po = static_cast<T*>(window.raw_data());
      const T* px = static_cast<const T*>(x.raw_data());
      for_each_offset<2>(x.shape(), {window.strides(), x.strides()},
                         [&](const std::array<int64_t, 2>& o) { po[o[0]] = px[o[1]]; });
    }
  });
}

}  // namespace mixtape::cpu
