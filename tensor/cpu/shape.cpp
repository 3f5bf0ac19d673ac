#include "tensor/cpu/shape.h"

#include <algorithm>
#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

void concat(const std::vector<Strided>& xs, int64_t dim, const Strided& out) {
  // Each input is copied into its window of the output (same shape, the output's strides), the
  // inputs split over the threads: a window and an input both contiguous (stacking along the
  // first dim, the steps of a sequence) as one block of bytes.
  std::vector<int64_t> starts(xs.size() + 1, 0);
  for (size_t i = 0; i < xs.size(); ++i) starts[i + 1] = starts[i] + xs[i].size(dim);
  dispatch_all(out.dtype(), "concat", [&]<class T>() {
    parallel_for(int64_t(xs.size()), grain_for(out.numel() / std::max<int64_t>(1, int64_t(xs.size()))),
                 [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const Strided& x = xs[size_t(i)];
        const Strided window = out.narrow(dim, starts[size_t(i)], x.size(dim));
        T* po = static_cast<T*>(window.raw_data());
        const T* px = static_cast<const T*>(x.raw_data());
        if (window.is_contiguous() && x.is_contiguous()) {
          std::copy(px, px + x.numel(), po);
          continue;
        }
        for_each_offset<2>(x.shape(), {window.strides(), x.strides()},
                           [&](const std::array<int64_t, 2>& o) { po[o[0]] = px[o[1]]; });
      }
    });
  });
}

}  // namespace mixtape::cpu
