// Strided indexing shared by the CUDA kernels and the CPU tests: a linear row-major element index
// becomes one element offset per operand. Plain C++ with MT_HOST_DEVICE, so tests/cuda checks the
// arithmetic on the host (test_indexing.cpp) and kernels use the same code on the device.
//
// OffsetCalculator<N> holds a shape and N stride vectors (in elements; 0 for broadcast dims),
// merged the way tensor/cpu/loops.h merges them: size-1 dims dropped, neighbouring dims fused when
// every operand is contiguous across them. A contiguous elementwise op therefore ends with one
// dim of stride 1 and offsets() is a single multiply per operand.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/core/error.h"
#include "tensor/core/host_device.h"
#include "tensor/core/shape.h"

namespace mixtape::cuda {

inline constexpr int kMaxDims = 8;  // after merging; more throws on the host

template <int N>
struct OffsetCalculator {
  int ndim = 0;  // 0: a single element (every offset 0)
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  // offsets[k] of the element with row-major index `linear` (0 <= linear < numel).
  MT_HOST_DEVICE void offsets(int64_t linear, int64_t (&out)[N]) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t size = sizes[d];
      const int64_t i = d == 0 ? linear : linear % size;  // the outermost dim takes the rest
      linear = d == 0 ? 0 : linear / size;
      for (int k = 0; k < N; ++k) out[k] += i * strides[k][d];
    }
  }
};

// Builds the calculator for `shape` with one stride vector per operand (each of shape.size()).
template <int N>
OffsetCalculator<N> make_offset_calculator(const Shape& shape, const std::array<Shape, N>& strides) {
  OffsetCalculator<N> c;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    bool fuse = c.ndim > 0;
    for (int k = 0; k < N && fuse; ++k) fuse = c.strides[k][c.ndim - 1] == strides[k][i] * shape[i];
    if (fuse) {
      c.sizes[c.ndim - 1] *= shape[i];
      for (int k = 0; k < N; ++k) c.strides[k][c.ndim - 1] = strides[k][i];
      continue;
    }
    MT_CHECK(c.ndim < kMaxDims, "CUDA kernels take at most ", kMaxDims, " non-mergeable dims; got shape ",
             shape_str(shape));
    c.sizes[c.ndim] = shape[i];
    for (int k = 0; k < N; ++k) c.strides[k][c.ndim] = strides[k][i];
    ++c.ndim;
  }
  return c;
}

}  // namespace mixtape::cuda
