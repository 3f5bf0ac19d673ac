#include "tensor/cpu/embedding.h"

#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

void embedding(const Strided& indices, const Strided& weight, const Strided& out) {
  const int64_t V = weight.size(0), D = weight.size(1);
  const int64_t* pidx = static_cast<const int64_t*>(indices.raw_data());
  // out viewed as [numel(indices), D] (it is contiguous, allocated by the front-end).
  dispatch_floating(weight.dtype(), "embedding", [&]<class T>() {
    const T* pw = static_cast<const T*>(weight.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const int64_t ws0 = weight.strides()[0], ws1 = weight.strides()[1];
    int64_t row = 0;
    for_each_offset<1>(indices.shape(), {indices.strides()}, [&](const std::array<int64_t, 1>& o) {
      const int64_t k = pidx[o[0]];
      MT_CHECK(k >= 0 && k < V, "embedding: index ", k, " (at position ", row, ") is out of range for ", V,
               " rows (weight ", weight.meta(), ")");
      for (int64_t j = 0; j < D; ++j) po[row * D + j] = pw[k * ws0 + j * ws1];
      ++row;
    });
  });
}

void embedding_backward(const Strided& indices, const Strided& dy, int64_t padding_idx, const Strided& dweight) {
  const int64_t V = dweight.size(0), D = dweight.size(1);
  const int64_t* pidx = static_cast<const int64_t*>(indices.raw_data());
  // dy viewed as [numel(indices), D]: its last dim is D, the others follow indices' shape.
  const Shape& dys = dy.strides();
  const int64_t dstride = dys.back();
  std::vector<double> acc(size_t(V * D), 0.0);
  dispatch_floating(dy.dtype(), "embedding backward", [&]<class T>() {
    const T* pdy = static_cast<const T*>(dy.raw_data());
    const Shape lead_strides(dys.begin(), dys.end() - 1);
    for_each_offset<2>(indices.shape(), {indices.strides(), lead_strides}, [&](const std::array<int64_t, 2>& o) {
      const int64_t k = pidx[o[0]];
      MT_CHECK(k >= 0 && k < V, "embedding backward: index ", k, " is out of range for ", V, " rows");
      if (k == padding_idx) return;  // the padding row gets no gradient
      double* a = acc.data() + k * D;
      for (int64_t j = 0; j < D; ++j) a[j] += double(load(pdy[o[1] + j * dstride]));
    });
    T* pw = static_cast<T*>(dweight.raw_data());  // contiguous, allocated by the front-end
    for (size_t i = 0; i < acc.size(); ++i) pw[i] = store<T>(acc[i]);
  });
}

}  // namespace mixtape::cpu
