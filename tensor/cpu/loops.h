// Strided N-operand loops for CPU kernels.
//
// for_each_offset<N>(shape, strides, f) visits every index of `shape` in row-major order and
// calls f(offsets), where offsets[k] = sum_d index[d] * strides[k][d] (elements). Dims that are
// contiguous for every operand are merged first so the innermost loop is as long as possible.
// Broadcast operands pass stride 0 for stretched dims (see broadcast_strides).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tensor/core/shape.h"
#include "tensor/core/strided.h"
#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

// Strides of `t` viewed with shape `out` (trailing alignment, stride 0 where t has size 1).
inline Shape broadcast_strides(const Strided& t, const Shape& out) {
  Shape st(out.size(), 0);
  const size_t lead = out.size() - size_t(t.dim());
  for (size_t i = 0; i < size_t(t.dim()); ++i) st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

// The loop nest for_each_offset walks: dims merged where every operand is contiguous across
// them (size-1 dims dropped), innermost last.
template <size_t N>
struct MergedDims {
  Shape size;
  std::array<Shape, N> stride;
  int64_t numel = 1;
};

template <size_t N>
MergedDims<N> merge_dims(const Shape& shape, const std::array<Shape, N>& strides) {
  MergedDims<N> m;
  for (size_t i = 0; i < shape.size(); ++i) {
    m.numel *= shape[i];
    if (shape[i] == 1) continue;
    bool fuse = !m.size.empty();
    for (size_t k = 0; k < N && fuse; ++k) fuse = m.stride[k].back() == strides[k][i] * shape[i];
    if (fuse) {
      m.size.back() *= shape[i];
      for (size_t k = 0; k < N; ++k) m.stride[k].back() = strides[k][i];
    } else {
      m.size.push_back(shape[i]);
      for (size_t k = 0; k < N; ++k) m.stride[k].push_back(strides[k][i]);
    }
  }
  return m;
}

// Calls f(offsets), or f(offsets, i) when f takes the element's row-major index i too (kernels
// whose random stream is indexed by element: dropout, stochastic rounding).
template <size_t N, class F>
inline void visit_one(F& f, const std::array<int64_t, N>& o, int64_t i) {
  if constexpr (std::is_invocable_v<F&, const std::array<int64_t, N>&, int64_t>) f(o, i);
  else f(o);
}

// A piece of an innermost row: `len` elements starting at offsets `at`, operand k advancing by
// step[k] from one element to the next; `first` is the row-major index of the first element.
template <size_t N>
struct RowPiece {
  std::array<int64_t, N> at;
  std::array<int64_t, N> step;
  int64_t len;
  int64_t first;
};

// Calls f(RowPiece) for the pieces of innermost rows that make up the elements [begin, end) of
// the row-major order of m (0 <= begin <= end <= m.numel), in order.
template <size_t N, class F>
void visit_rows(const MergedDims<N>& m, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  if (m.size.empty()) {  // a single element
    f(RowPiece<N>{{}, {}, 1, 0});
    return;
  }
  const size_t nd = m.size.size();
  // The multi-index of `begin`, and its offsets.
  std::array<int64_t, N> off{};
  std::vector<int64_t> idx(nd, 0);
  for (int64_t rest = begin, d = int64_t(nd) - 1; d >= 0; --d) {
    idx[size_t(d)] = rest % m.size[size_t(d)];
    rest /= m.size[size_t(d)];
    for (size_t k = 0; k < N; ++k) off[k] += idx[size_t(d)] * m.stride[k][size_t(d)];
  }
  const int64_t inner = m.size[nd - 1];
  std::array<int64_t, N> inner_st;
  for (size_t k = 0; k < N; ++k) inner_st[k] = m.stride[k][nd - 1];
  for (int64_t done = begin; done < end;) {
    // The rest of the current innermost row.
    const int64_t row = std::min(inner - idx[nd - 1], end - done);
    f(RowPiece<N>{off, inner_st, row, done});
    done += row;
    if (done >= end) return;
    // Start of the next row: back to column 0, advance the outer index (odometer over dims
    // nd-2 .. 0).
    for (size_t k = 0; k < N; ++k) off[k] -= idx[nd - 1] * inner_st[k];
    idx[nd - 1] = 0;
    for (size_t d = nd - 1; d-- > 0;) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += m.stride[k][d];
      if (idx[d] < m.size[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= m.stride[k][d] * m.size[d];
      idx[d] = 0;
    }
  }
}

// Visits the elements [begin, end) of the row-major order of m one by one.
template <size_t N, class F>
void visit_range(const MergedDims<N>& m, int64_t begin, int64_t end, F&& f) {
  visit_rows(m, begin, end, [&](const RowPiece<N>& r) {
    std::array<int64_t, N> o = r.at;
    for (int64_t i = 0; i < r.len; ++i) {
      visit_one<N>(f, o, r.first + i);
      for (size_t k = 0; k < N; ++k) o[k] += r.step[k];
    }
  });
}

// Calls f(RowPiece) for every innermost row of `shape`, in row-major order, on this thread.
template <size_t N, class F>
void for_each_row(const Shape& shape, const std::array<Shape, N>& strides, F&& f) {
  const MergedDims<N> m = merge_dims(shape, strides);
  visit_rows(m, 0, m.numel, f);
}

template <size_t N, class F>
void for_each_offset(const Shape& shape, const std::array<Shape, N>& strides, F&& f) {
  const MergedDims<N> m = merge_dims(shape, strides);
  visit_range(m, 0, m.numel, f);
}

// for_each_offset for kernels whose elements are independent (each f call writes only its own
// output element and reads nothing another call writes): the row-major order is split into
// contiguous pieces over the OpenMP threads (Note [Deterministic threads] in parallel.h). An f
// that takes (offsets, i) gets each element's row-major index, whatever thread visits it.
template <size_t N, class F>
void parallel_for_each_offset(const Shape& shape, const std::array<Shape, N>& strides, F&& f,
                              int64_t grain = kGrainElements) {
  const MergedDims<N> m = merge_dims(shape, strides);
  parallel_for(m.numel, grain, [&](int64_t begin, int64_t end) { visit_range(m, begin, end, f); });
}

// The same split, handing f whole row pieces (RowPiece) for kernels that convert or compute a
// row at a time (tensor/cpu/convert.h).
template <size_t N, class F>
void parallel_for_each_row(const Shape& shape, const std::array<Shape, N>& strides, F&& f,
                           int64_t grain = kGrainElements) {
  const MergedDims<N> m = merge_dims(shape, strides);
  parallel_for(m.numel, grain, [&](int64_t begin, int64_t end) { visit_rows(m, begin, end, f); });
}

}  // namespace mixtape::cpu
