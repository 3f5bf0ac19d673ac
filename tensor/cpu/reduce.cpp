#include "tensor/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/cpu/convert.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/target_region.h"

namespace mixtape::cpu {

namespace {

// acc[j] += double(row[j]) for j < len: the column sums of reduce_sum_fast, one row at a time.
// On the AVX-512 conversion path eight columns to a vector (vcvtps2pd is exact, and each column
// gets the same additions in the same order), so the same bits.
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f,avx512vl")
void add_widened_avx512(double* acc, const float* row, int64_t len) {
  for (int64_t j = 0; j < len; j += 8) {
    const __mmask8 m = __mmask8(first_lanes(len - j, 8));
    const __m512d v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, row + j));
    _mm512_mask_storeu_pd(acc + j, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, acc + j), v));
  }
}
MT_TARGET_END
#endif

template <class C>
void add_widened(double* acc, const C* row, int64_t len, [[maybe_unused]] bool vector) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<C, float>)
    if (vector) return add_widened_avx512(acc, row, len);
#endif
  for (int64_t j = 0; j < len; ++j) acc[j] += double(row[j]);
}

// Split x's dims into kept (outer) and reduced (inner) shapes/strides.
struct Split {
  Shape outer_shape, outer_strides, inner_shape, inner_strides;
};

Split split_dims(const Strided& x, const std::vector<int64_t>& dims) {
  Split s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
    (red ? s.inner_shape : s.outer_shape).push_back(x.shape()[size_t(d)]);
    (red ? s.inner_strides : s.outer_strides).push_back(x.strides()[size_t(d)]);
  }
  return s;
}

// The keepdim tensor `t` viewed with only the kept dims (its reduced dims all have size 1).
Shape kept_strides(const Strided& t, const std::vector<int64_t>& dims) {
  Shape st;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) st.push_back(t.strides()[size_t(d)]);
  return st;
}

// Note [Reduce fast paths]
// A sum or mean of a contiguous x over a leading block of dims (x as [n, m], down the rows: the
// bias gradient of every linear layer) or a trailing block (x as [m, n], along the rows) runs
// as plain loops over the two-dim view instead of one strided walk per output. Each output
// still adds its inputs in the same order (row-major over the reduced dims) into an f64
// accumulator, so the results are bit-identical to the general loop. 16-bit rows are read a
// chunk at a time (convert.h), and the outputs are split over the threads.
bool reduce_sum_fast(ReduceOp op, const Strided& x, const std::vector<int64_t>& dims, const Strided& out) {
  if ((op != ReduceOp::sum && op != ReduceOp::mean) || !x.is_contiguous() || !out.is_contiguous()) return false;
  const auto nd = int64_t(dims.size());
  if (nd == 0) return false;
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return false;
  const bool trailing = sorted.front() == x.dim() - nd && sorted.back() == x.dim() - 1;
  // A sum over every dim is both; it is one row, which the row loop sums in one pass (as one
  // column, each element was a vector operation and a call: 5% of the cnn's fp32 step, in the
  // gradient norm).
  const bool leading = sorted.front() == 0 && sorted.back() == nd - 1 && !trailing;
  if (!leading && !trailing) return false;
  int64_t n = 1;  // reduced
  for (int64_t d : sorted) n *= x.shape()[size_t(d)];
  const int64_t m = x.numel() / std::max<int64_t>(n, 1);  // kept
  if (n == 0 || m == 0) return false;
  dispatch_floating(x.dtype(), reduce_op_name(op), [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const double div = op == ReduceOp::mean ? double(n) : 1.0;
    using C = compute_t<T>;
    if (leading) {  // column j sums x[0, j], x[1, j], ...; columns split over the threads
      // Each thread sums blocks of up to kSumColumns columns, reading the block's part of every
      // row in turn: for the char_lstm's gate gradients ([6400, 1024], 26 MB) that is one pass
      // down the memory, where blocks of kRowChunk columns made four passes with a 4 KB stride.
      constexpr int64_t kSumColumns = 2048;
      const bool vector = avx512_path_active();
      parallel_for(m, grain_for(n), [&](int64_t j0, int64_t j1) {
        for (int64_t b0 = j0; b0 < j1; b0 += kSumColumns) {
          const int64_t width = std::min(kSumColumns, j1 - b0);
          double acc[kSumColumns] = {};
          C buf[kRowChunk];
          for (int64_t r = 0; r < n; ++r)
            for (int64_t c0 = 0; c0 < width; c0 += kRowChunk) {
              const int64_t len = std::min(kRowChunk, width - c0);
              add_widened(acc + c0, load_row(px + r * m + b0 + c0, 1, len, buf), len, vector);
            }
          for (int64_t j = 0; j < width; ++j) po[b0 + j] = store<T>(op == ReduceOp::mean ? acc[j] / div : acc[j]);
        }
      });
    } else {  // output o sums row o; rows split over the threads
      parallel_for(m, grain_for(n), [&](int64_t o0, int64_t o1) {
        C buf[kRowChunk];
        for (int64_t o = o0; o < o1; ++o) {
          double acc = 0.0;
          for_chunks(n, [&](int64_t i0, int64_t len) {
            const C* row = load_row(px + o * n + i0, 1, len, buf);
            for (int64_t i = 0; i < len; ++i) acc += double(row[i]);
          });
          po[o] = store<T>(op == ReduceOp::mean ? acc / div : acc);
        }
      });
    }
  });
  return true;
}

}  // namespace

void reduce(ReduceOp op, const Strided& x, const std::vector<int64_t>& dims, const Strided& out) {
  if (reduce_sum_fast(op, x, dims, out)) return;  // Note [Reduce fast paths]
  const Split s = split_dims(x, dims);
  const int64_t n = numel_of(s.inner_shape);
  dispatch_floating(x.dtype(), reduce_op_name(op), [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    // Each output element's whole sum is one thread's (Note [Deterministic threads]).
    parallel_for_each_offset<2>(
        s.outer_shape, {s.outer_strides, kept_strides(out, dims)},
        [&](const std::array<int64_t, 2>& o) {
      constexpr double inf = std::numeric_limits<double>::infinity();
      double acc = (op == ReduceOp::sum || op == ReduceOp::mean) ? 0.0 : op == ReduceOp::min ? inf : -inf;
      bool nan = false;
      for_each_offset<1>(s.inner_shape, {s.inner_strides}, [&](const std::array<int64_t, 1>& i) {
        const double v = double(load(px[o[0] + i[0]]));
        if (op == ReduceOp::sum || op == ReduceOp::mean) acc += v;
        else if (std::isnan(v)) nan = true;
        else if (op == ReduceOp::min ? v < acc : v > acc) acc = v;
      });
      if (op == ReduceOp::mean) acc /= double(n);
      if (nan) acc = std::numeric_limits<double>::quiet_NaN();
      po[o[1]] = store<T>(acc);  // rounded once, from the f64 accumulator
        },
        grain_for(n));
  });
}

void reduce_backward(ReduceOp op, const Strided& x, const Strided& y, const Strided& dy,
                     const std::vector<int64_t>& dims, const Strided& dx) {
  const Split s = split_dims(x, dims);
  const Split sdx = split_dims(dx, dims);
  const int64_t n = numel_of(s.inner_shape);
  dispatch_floating(x.dtype(), reduce_op_name(op), [&]<class T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    parallel_for_each_offset<4>(
        s.outer_shape, {s.outer_strides, sdx.outer_strides, kept_strides(y, dims), kept_strides(dy, dims)},
        [&](const std::array<int64_t, 4>& o) {
      const C g = load(pdy[o[3]]);
      const C ymax = load(py[o[2]]);
      if (op == ReduceOp::sum || op == ReduceOp::mean) {  // x and y are not read
        const T v = store<T>(op == ReduceOp::sum ? g : C(g / C(n)));
        for_each_offset<1>(s.inner_shape, {sdx.inner_strides},
                           [&](const std::array<int64_t, 1>& i) { pdx[o[1] + i[0]] = v; });
        return;
      }
      // max (min): the first maximum (minimum) takes all of dy; amax: every maximum takes
      // dy / count. y is the slice's extreme, so "== ymax" finds it for min too.
      const bool first_only = op == ReduceOp::max || op == ReduceOp::min;
      int64_t count = 0;
      for_each_offset<1>(s.inner_shape, {s.inner_strides}, [&](const std::array<int64_t, 1>& i) {
        if (load(px[o[0] + i[0]]) == ymax) ++count;
      });
      const C share = first_only ? g : (count > 0 ? C(g / C(count)) : C(0));
      bool given = false;
      for_each_offset<2>(s.inner_shape, {s.inner_strides, sdx.inner_strides}, [&](const std::array<int64_t, 2>& i) {
        const bool hit = load(px[o[0] + i[0]]) == ymax && !(first_only && given);
        if (hit) given = true;
        pdx[o[1] + i[1]] = store<T>(hit ? share : C(0));
      });
        },
        grain_for(n));
  });
}

void arg_reduce(bool largest, const Strided& x, const std::vector<int64_t>& dims, const Strided& out) {
  const Split s = split_dims(x, dims);
  const int64_t n = numel_of(s.inner_shape);
  int64_t* po = static_cast<int64_t*>(out.raw_data());
  dispatch_floating(x.dtype(), largest ? "argmax" : "argmin", [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    parallel_for_each_offset<2>(
        s.outer_shape, {s.outer_strides, kept_strides(out, dims)},
        [&](const std::array<int64_t, 2>& o) {
      // Only a strictly better element replaces the best so far, so ties keep the first; a NaN
      // beats every number and nothing beats a NaN.
      int64_t best = -1, i = 0;
      double bv = 0.0;
      for_each_offset<1>(s.inner_shape, {s.inner_strides}, [&](const std::array<int64_t, 1>& in) {
        const double v = double(load(px[o[0] + in[0]]));
        const bool better = best < 0 || (!std::isnan(bv) && (std::isnan(v) || (largest ? v > bv : v < bv)));
        if (better) best = i, bv = v;
        ++i;
      });
      po[o[1]] = best;
        },
        grain_for(n));
  });
}

void var(const Strided& x, const std::vector<int64_t>& dims, double correction, bool take_sqrt, const Strided& out) {
  const Split s = split_dims(x, dims);
  const int64_t n = numel_of(s.inner_shape);
  const double divisor = std::max(0.0, double(n) - correction);  // Note [Variance]
  dispatch_floating(x.dtype(), take_sqrt ? "std" : "var", [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for_each_offset<2>(
        s.outer_shape, {s.outer_strides, kept_strides(out, dims)},
        [&](const std::array<int64_t, 2>& o) {
      double sum = 0.0;
      for_each_offset<1>(s.inner_shape, {s.inner_strides},
                         [&](const std::array<int64_t, 1>& i) { sum += double(load(px[o[0] + i[0]])); });
      const double mean = sum / double(n);
      double m2 = 0.0;
      for_each_offset<1>(s.inner_shape, {s.inner_strides}, [&](const std::array<int64_t, 1>& i) {
        const double d = double(load(px[o[0] + i[0]])) - mean;
        m2 += d * d;
      });
      const double v = m2 / divisor;
      po[o[1]] = store<T>(take_sqrt ? std::sqrt(v) : v);  // rounded once
        },
        grain_for(2 * n));
  });
}

void var_backward(const Strided& x, const Strided& y, const Strided& dy, const std::vector<int64_t>& dims,
                  double correction, bool take_sqrt, const Strided& dx) {
  const Split s = split_dims(x, dims);
  const Split sdx = split_dims(dx, dims);
  const int64_t n = numel_of(s.inner_shape);
  const double divisor = std::max(0.0, double(n) - correction);
  dispatch_floating(x.dtype(), take_sqrt ? "std" : "var", [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    parallel_for_each_offset<4>(
        s.outer_shape, {s.outer_strides, sdx.outer_strides, kept_strides(y, dims), kept_strides(dy, dims)},
        [&](const std::array<int64_t, 4>& o) {
      double sum = 0.0;
      for_each_offset<1>(s.inner_shape, {s.inner_strides},
                         [&](const std::array<int64_t, 1>& i) { sum += double(load(px[o[0] + i[0]])); });
      const double mean = sum / double(n);
      const double g = double(load(pdy[o[3]]));
      // Note [Variance]: dx = g * k, k = (x - mean) * 2 / divisor, or (x - mean) / (divisor * std).
      const double sd = take_sqrt ? double(load(py[o[2]])) : 0.0;
      const bool zero = take_sqrt && sd == 0.0;
      for_each_offset<2>(s.inner_shape, {s.inner_strides, sdx.inner_strides}, [&](const std::array<int64_t, 2>& i) {
        const double d = double(load(px[o[0] + i[0]])) - mean;
        const double k = take_sqrt ? d / (divisor * sd) : d * 2.0 / divisor;
        pdx[o[1] + i[1]] = store<T>(zero ? 0.0 : g * k);
      });
        },
        grain_for(3 * n));
  });
}

double max_abs(const Strided& x) {
  double m = 0.0;
  // The largest |x|, or the first NaN in element order: a piece's result is that of its elements,
  // and the pieces are folded in order the same way, so any split gives the same value.
  const auto fold = [](double& acc, double v) {
    if (v > acc || std::isnan(v)) acc = std::isnan(acc) ? acc : v;
  };
  dispatch_floating(x.dtype(), "max_abs", [&]<class T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    const int64_t n = x.numel();
    if (x.is_contiguous() && n >= 2 * kGrainElements) {  // a gradient norm's first pass, on the threads
      const auto part = piece_results<double>(n, [&](int64_t begin, int64_t end) {
        double pm = 0.0;
        for (int64_t i = begin; i < end; ++i) fold(pm, std::abs(double(load(px[i]))));
        return pm;
      });
      for (double v : part) fold(m, v);
      return;
    }
    for_each_offset<1>(x.shape(), {x.strides()},
                       [&](const std::array<int64_t, 1>& o) { fold(m, std::abs(double(load(px[o[0]])))); });
  });
  return m;
}

}  // namespace mixtape::cpu
