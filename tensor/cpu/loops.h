// Strided N-operand loops for CPU kernels.
//
// for_each_offset<N>(shape, strides, f) visits every index of `shape` in row-major order and
// calls f(offsets), where offsets[k] = sum_d index[d] * strides[k][d] (elements). Dims that are
// contiguous for every operand are merged first so the innermost loop is as long as possible.
// Broadcast operands pass stride 0 for stretched dims (see broadcast_strides).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tensor/core/shape.h"
#include "tensor/core/strided.h"

namespace mixtape::cpu {

// Strides of `t` viewed with shape `out` (trailing alignment, stride 0 where t has size 1).
inline Shape broadcast_strides(const Strided& t, const Shape& out) {
  Shape st(out.size(), 0);
  const size_t lead = out.size() - size_t(t.dim());
  for (size_t i = 0; i < size_t(t.dim()); ++i) st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

template <size_t N, class F>
void for_each_offset(const Shape& shape, const std::array<Shape, N>& strides, F&& f) {
  for (int64_t d : shape)
    if (d == 0) return;
  // Merge dims (drop size-1 dims, fuse i with i+1 when every operand is contiguous across them).
  Shape sz;
  std::array<Shape, N> st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    bool fuse = !sz.empty();
    for (size_t k = 0; k < N && fuse; ++k) fuse = st[k].back() == strides[k][i] * shape[i];
    if (fuse) {
      sz.back() *= shape[i];
      for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][i];
    } else {
      sz.push_back(shape[i]);
      for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][i]);
    }
  }
  std::array<int64_t, N> off{};
  if (sz.empty()) {  // a single element
    f(off);
    return;
  }
  const size_t nd = sz.size();
  const int64_t inner = sz[nd - 1];
  std::array<int64_t, N> inner_st;
  for (size_t k = 0; k < N; ++k) inner_st[k] = st[k][nd - 1];
  std::vector<int64_t> idx(nd, 0);
  for (;;) {
    std::array<int64_t, N> o = off;
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_st[k];
    }
    // Advance the outer index (odometer over dims nd-2 .. 0).
    size_t d = nd - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += st[k][d];
      if (idx[d] < sz[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= st[k][d] * sz[d];
      idx[d] = 0;
    }
  }
}

}  // namespace mixtape::cpu
