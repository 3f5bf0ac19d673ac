#include "tensor/cpu/index.h"

#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

void first_bad_index(const Strided& index, int64_t size, const Strided& first_bad) {
  const int64_t* pidx = static_cast<const int64_t*>(index.raw_data());
  int64_t* out = static_cast<int64_t*>(first_bad.raw_data());
  int64_t pos = 0, bad = index.numel(), value = 0;
  for_each_offset<1>(index.shape(), {index.strides()}, [&](const std::array<int64_t, 1>& o) {
    const int64_t k = pidx[o[0]];
    if (bad == index.numel() && (k < 0 || k >= size)) bad = pos, value = k;
    ++pos;
  });
  out[0] = bad;
  out[1] = value;
}

void gather(const Strided& x, int64_t dim, const Strided& index, const Strided& out) {
  const int64_t size = x.size(dim), xstride = x.strides()[size_t(dim)];
  const int64_t* pidx = static_cast<const int64_t*>(index.raw_data());
  dispatch_floating(x.dtype(), "gather", [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for_each_offset<3>(index.shape(), {index.strides(), out.strides(), strides_without(x, dim)},
                                [&](const std::array<int64_t, 3>& o) {
      const int64_t k = pidx[o[0]];
      if (k >= 0 && k < size) po[o[1]] = px[o[2] + k * xstride];  // a copy: no rounding
    });
  });
}

void gather_backward(const Strided& dy, int64_t dim, const Strided& index, const Strided& dx) {
  // Note [Gather backward]: one line of index per task, summed in f64 in increasing p[dim].
  const int64_t size = dx.size(dim), len = index.size(dim);
  const Shape acc_strides = contiguous_strides(dx.shape());
  const int64_t ist = index.strides()[size_t(dim)], dst = dy.strides()[size_t(dim)], ast = acc_strides[size_t(dim)];
  Shape lines = index.shape();
  lines[size_t(dim)] = 1;
  std::vector<double> acc(size_t(dx.numel()), 0.0);
  const int64_t* pidx = static_cast<const int64_t*>(index.raw_data());
  dispatch_floating(dy.dtype(), "gather backward", [&]<class T>() {
    const T* pdy = static_cast<const T*>(dy.raw_data());
    parallel_for_each_offset<3>(
        lines, {index.strides(), dy.strides(), acc_strides},
        [&](const std::array<int64_t, 3>& o) {
      for (int64_t p = 0; p < len; ++p) {
        const int64_t k = pidx[o[0] + p * ist];
        if (k >= 0 && k < size) acc[size_t(o[2] + k * ast)] += double(load(pdy[o[1] + p * dst]));
      }
        },
        grain_for(len));
    T* pdx = static_cast<T*>(dx.raw_data());  // contiguous, allocated by the front-end
    parallel_for(dx.numel(), kGrainElements, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) pdx[i] = store<T>(acc[size_t(i)]);  // rounded once
    });
  });
}

void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& out) {
  dispatch_floating(out.dtype(), "where", [&]<class T>() {
    dispatch_all(cond.dtype(), "where (condition)", [&]<class M>() {
      const M* pc = static_cast<const M*>(cond.raw_data());
      const T* pa = static_cast<const T*>(a.raw_data());
      const T* pb = static_cast<const T*>(b.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      parallel_for_each_offset<4>(out.shape(), {cond.strides(), a.strides(), b.strides(), out.strides()},
                                  [&](const std::array<int64_t, 4>& o) {
        const bool c = load(pc[o[0]]) != compute_t<M>(0);  // NaN != 0: true
        po[o[3]] = c ? pa[o[1]] : pb[o[2]];                // a copy: no rounding
      });
    });
  });
}

}  // namespace mixtape::cpu
