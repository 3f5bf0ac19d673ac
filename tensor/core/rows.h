// A tensor seen as rows along one dim, for the row-wise kernels of both devices (softmax and the
// losses: tensor/cpu/loss.cpp, cuda/loss.cu): the other dims (shape, strides) index the rows,
// `len` and `stride` walk one row.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape {

struct RowView {
  Shape outer_shape, outer_strides;
  int64_t len = 1, stride = 0;
};

inline RowView row_view(const Strided& t, int64_t dim) {
  RowView v;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d == dim) continue;
    v.outer_shape.push_back(t.shape()[size_t(d)]);
    v.outer_strides.push_back(t.strides()[size_t(d)]);
  }
  v.len = t.shape()[size_t(dim)];
  v.stride = t.strides()[size_t(dim)];
  return v;
}

}  // namespace mixtape
