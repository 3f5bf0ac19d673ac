#include "tensor/cpu/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/cpu/convert.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/target_region.h"
#include "tensor/cpu/workspace.h"

namespace mixtape::cpu {

namespace {

// A tensor seen as channels (dim 1) x positions (every other dim): the positions' shape and
// strides, and the stride between channels.
struct ChannelView {
  Shape pos_shape, pos_strides;
  int64_t channel_stride = 0;
};

ChannelView channel_view(const Strided& t) {
  ChannelView v;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d == 1) continue;
    v.pos_shape.push_back(t.shape()[size_t(d)]);
    v.pos_strides.push_back(t.strides()[size_t(d)]);
  }
  v.channel_stride = t.strides()[1];
  return v;
}

// A small 1-D tensor (per-channel parameters and statistics) as doubles; empty when undefined.
std::vector<double> read_vec(const Strided& t) {
  std::vector<double> v;
  if (!t.defined()) return v;
  v.resize(size_t(t.numel()));
  dispatch_floating(t.dtype(), "batch_norm", [&]<class T>() {
    const T* p = static_cast<const T*>(t.raw_data());
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(load(p[int64_t(i) * t.strides()[0]]));
  });
  return v;
}

// Element i of a 1-D tensor, rounded once from double.
void write_at(const Strided& t, int64_t i, double value) {
  dispatch_floating(t.dtype(), "batch_norm",
                    [&]<class T>() { static_cast<T*>(t.raw_data())[i * t.strides()[0]] = store<T>(value); });
}

// Note [Batch norm sums]
// A channel's sums are formed in double in kLanes interleaved partial sums (element i of each
// chunk of a row goes to lane i % kLanes), added pairwise at the end: the order depends only on
// the shape and strides, so every thread count and vector path gives the same bits, and the
// lanes let the additions run in parallel instead of one long dependency chain.
constexpr int kLanes = 8;
struct LaneSum {
  double lane[kLanes] = {};
  template <class F>
  void add(int64_t n, F&& term) {  // adds term(0), ..., term(n - 1)
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int k = 0; k < kLanes; ++k) lane[k] += term(i + k);
    for (int k = 0; i < n; ++i, ++k) lane[k] += term(i);
  }
  double total() const {
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
};

// Note [Batch norm vectors]
// On the AVX-512 conversion path (avx512_path_active(), convert.h) the f32 row loops below run
// eight lanes of double, or sixteen floats, to a vector: one __m512d holds LaneSum's eight lanes
// (element i of a chunk still goes to lane i % 8, a partial last group to the first lanes), and
// every element is computed with the scalar loop's operations in its order (no fused
// multiply-adds), so both give the same bits.
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f,avx512vl,avx512bw")
namespace avx512 {

// Adds term(v, i) (a vector of the eight doubles of elements i..i+7) to the lanes, over n elements.
template <class Term>
inline void add_lanes(LaneSum& s, int64_t n, Term&& term) {
  __m512d acc = _mm512_loadu_pd(s.lane);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm512_add_pd(acc, term(i, __mmask8(0xFF)));
  if (i < n) {
    const __mmask8 m = __mmask8((1u << (n - i)) - 1u);
    acc = _mm512_mask_add_pd(acc, m, acc, term(i, m));
  }
  _mm512_storeu_pd(s.lane, acc);
}

inline __m512d widen(const float* v, __mmask8 m) { return _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, v)); }

// The first min(n, 16) lanes.
inline __mmask16 first16(int64_t n) { return __mmask16(first_lanes(n, 16)); }

void sum(LaneSum& s, const float* v, int64_t n) {
  add_lanes(s, n, [&](int64_t i, __mmask8 m) { return widen(v + i, m); });
}

void sum_sq_dev(LaneSum& s, const float* v, int64_t n, double mean) {
  const __m512d mv = _mm512_set1_pd(mean);
  add_lanes(s, n, [&](int64_t i, __mmask8 m) {
    const __m512d d = _mm512_sub_pd(widen(v + i, m), mv);
    return _mm512_mul_pd(d, d);
  });
}

// Both sums in one pass: two independent chains of additions, where two passes each waited on
// one (the same additions, lane by lane, in the same order).
void sum_dy_dyxh(LaneSum& s_dy, LaneSum& s_dyxh, const float* x, const float* g, int64_t n, float mc, float ic) {
  const __m256 mv = _mm256_set1_ps(mc), iv = _mm256_set1_ps(ic);
  __m512d a = _mm512_loadu_pd(s_dy.lane), b = _mm512_loadu_pd(s_dyxh.lane);
  for (int64_t i = 0; i < n; i += 8) {
    const __mmask8 m = __mmask8(first_lanes(n - i, 8));
    const __m512d gd = widen(g + i, m);
    const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskz_loadu_ps(m, x + i), mv), iv);
    a = _mm512_mask_add_pd(a, m, a, gd);
    b = _mm512_mask_add_pd(b, m, b, _mm512_mul_pd(gd, _mm512_cvtps_pd(xh)));
  }
  _mm512_storeu_pd(s_dy.lane, a);
  _mm512_storeu_pd(s_dyxh.lane, b);
}

// y = (x - mc) * ic * wc + bc, sixteen at a time.
void normalize(const float* x, float* y, int64_t n, float mc, float ic, float wc, float bc) {
  const __m512 mv = _mm512_set1_ps(mc), iv = _mm512_set1_ps(ic), wv = _mm512_set1_ps(wc), bv = _mm512_set1_ps(bc);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(v, mv), iv), wv), bv));
  }
}

// d = k * (g - mdy - ((x - mc) * ic) * mdyxh), sixteen at a time.
void grad_input(const float* x, const float* g, float* d, int64_t n, float k, float mdy, float mc, float ic,
                float mdyxh) {
  const __m512 kv = _mm512_set1_ps(k), dyv = _mm512_set1_ps(mdy), mv = _mm512_set1_ps(mc), iv = _mm512_set1_ps(ic),
               hv = _mm512_set1_ps(mdyxh);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first16(n - i);
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv), iv);
    const __m512 inner = _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, g + i), dyv), _mm512_mul_ps(xh, hv));
    _mm512_mask_storeu_ps(d + i, m, _mm512_mul_ps(kv, inner));
  }
}

}  // namespace avx512
MT_TARGET_END
#endif  // __x86_64__

// The row loops of batch norm in the compute type A: the scalar reference, or for f32 on the
// AVX-512 path its vector form (Note [Batch norm vectors]).
template <class A>
struct RowLoops {
  bool vector = false;

  void sum(LaneSum& s, const A* v, int64_t n) const {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<A, float>)
      if (vector) return avx512::sum(s, v, n);
#endif
    s.add(n, [&](int64_t i) { return double(v[i]); });
  }
  void sum_sq_dev(LaneSum& s, const A* v, int64_t n, double m) const {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<A, float>)
      if (vector) return avx512::sum_sq_dev(s, v, n, m);
#endif
    s.add(n, [&](int64_t i) {
      const double d = double(v[i]) - m;
      return d * d;
    });
  }
  void sum_dy_dyxh(LaneSum& s_dy, LaneSum& s_dyxh, const A* x, const A* g, int64_t n, A mc, A ic) const {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<A, float>)
      if (vector) return avx512::sum_dy_dyxh(s_dy, s_dyxh, x, g, n, mc, ic);
#endif
    s_dy.add(n, [&](int64_t i) { return double(g[i]); });
    s_dyxh.add(n, [&](int64_t i) { return double(g[i]) * double((x[i] - mc) * ic); });
  }
  void normalize(const A* x, A* y, int64_t n, A mc, A ic, A wc, A bc) const {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<A, float>)
      if (vector) return avx512::normalize(x, y, n, mc, ic, wc, bc);
#endif
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mc) * ic * wc + bc;
  }
  void grad_input(const A* x, const A* g, A* d, int64_t n, A k, A mdy, A mc, A ic, A mdyxh) const {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<A, float>)
      if (vector) return avx512::grad_input(x, g, d, n, k, mdy, mc, ic, mdyxh);
#endif
    for (int64_t i = 0; i < n; ++i) d[i] = k * (g[i] - mdy - ((x[i] - mc) * ic) * mdyxh);
  }
};

// Note [Batch norm copies]
// Each pass over a channel reads its values again: forward the sum, the squared deviations and
// the normalization; backward the two sums, then dx. A 16-bit channel is converted to the
// compute type once, in the first pass, into the thread's workspace at each value's row-major
// position (RowPiece::first), and the later passes read it there: the same values in the same
// chunks, so the same bits, for one conversion instead of three (x forward) or two (x and dy
// backward). f32 and f64 rows are read in place as before.
template <class T, class A>
class ChannelValues {
 public:
  ChannelValues(Workspace use, int64_t n) : copy_(kCopy ? workspace<A>(use, n) : nullptr) {}
  // The first pass: the chunk of `len` values at p (step apart) whose first is the channel's
  // value number `first`; converted into the copy for a 16-bit T.
  const A* load(const T* p, int64_t step, int64_t first, int64_t len, A* buf) const {
    if constexpr (kCopy) {
      load_row_to(p, step, len, copy_ + first);
      return copy_ + first;
    } else {
      return load_row(p, step, len, buf);
    }
  }
  // A later pass: the same chunk again.
  const A* reload(const T* p, int64_t step, int64_t first, int64_t len, A* buf) const {
    if constexpr (kCopy) return copy_ + first;
    else return load_row(p, step, len, buf);
  }

 private:
  static constexpr bool kCopy = !std::is_same_v<T, A>;
  A* copy_;
};

}  // namespace

void batch_norm_forward(const Strided& x, const Strided& weight, const Strided& bias, const Strided& running_mean,
                        const Strided& running_var, bool training, double momentum, double eps, const Strided& count,
                        const Strided& y, const Strided& mean, const Strided& invstd) {
  if (count.defined()) momentum = 1.0 / double(std::max<int64_t>(1, count.data<int64_t>()[0]));
  const int64_t C = x.size(1);
  const ChannelView xv = channel_view(x), yv = channel_view(y);
  const int64_t n = numel_of(xv.pos_shape);
  const std::vector<double> w = read_vec(weight), b = read_vec(bias);
  const std::vector<double> rm = read_vec(running_mean), rv = read_vec(running_var);
  dispatch_floating(x.dtype(), "batch_norm", [&]<class T>() {
    using A = compute_t<T>;  // type of the saved statistics and of the per-element arithmetic
    const RowLoops<A> loops{avx512_path_active()};
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    A* pm = mean.data<A>();
    A* pi = invstd.data<A>();
    // Each channel's statistics and outputs are one thread's (Note [Deterministic threads]).
    parallel_for(C, grain_for(3 * n), [&](int64_t c_begin, int64_t c_end) {
      const ChannelValues<T, A> values(Workspace::norm_values, n);
      for (int64_t c = c_begin; c < c_end; ++c) {
        const T* xc = px + c * xv.channel_stride;
        double m, var;
        if (training) {
          // Two passes (mean, then squared deviations) in double: no cancellation in E[x^2]-E[x]^2.
          LaneSum s;
          for_each_row<1>(xv.pos_shape, {xv.pos_strides}, [&](const RowPiece<1>& r) {
            for_chunks(r.len, [&](int64_t j, int64_t len) {
              A buf[kRowChunk];
              loops.sum(s, values.load(xc + r.at[0] + j * r.step[0], r.step[0], r.first + j, len, buf), len);
            });
          });
          m = s.total() / double(n);
          LaneSum q;
          for_each_row<1>(xv.pos_shape, {xv.pos_strides}, [&](const RowPiece<1>& r) {
            for_chunks(r.len, [&](int64_t j, int64_t len) {
              A buf[kRowChunk];
              loops.sum_sq_dev(q, values.reload(xc + r.at[0] + j * r.step[0], r.step[0], r.first + j, len, buf), len,
                               m);
            });
          });
          var = q.total() / double(n);
          if (!rm.empty()) {
            // Running variance tracks the unbiased estimate (PyTorch semantics); n > 1 is checked.
            write_at(running_mean, c, (1.0 - momentum) * rm[size_t(c)] + momentum * m);
            write_at(running_var, c, (1.0 - momentum) * rv[size_t(c)] + momentum * var * double(n) / double(n - 1));
          }
        } else {
          m = rm[size_t(c)];
          var = rv[size_t(c)];
        }
        pm[c] = A(m);
        pi[c] = A(1.0 / std::sqrt(var + eps));
        const A wc = w.empty() ? A(1) : A(w[size_t(c)]);
        const A bc = b.empty() ? A(0) : A(b[size_t(c)]);
        const A mc = pm[c], ic = pi[c];
        T* yc = py + c * yv.channel_stride;
        for_each_row<2>(xv.pos_shape, {xv.pos_strides, yv.pos_strides}, [&](const RowPiece<2>& r) {
          for_chunks(r.len, [&](int64_t j, int64_t len) {
            A xb[kRowChunk], yb[kRowChunk];
            const T* in = xc + r.at[0] + j * r.step[0];
            const A* xr =
                training ? values.reload(in, r.step[0], r.first + j, len, xb) : load_row(in, r.step[0], len, xb);
            T* out = yc + r.at[1] + j * r.step[1];
            A* yr = out_row(out, r.step[1], yb);
            loops.normalize(xr, yr, len, mc, ic, wc, bc);
            store_row(yr, out, r.step[1], len);
          });
        });
      }
    });
  });
}

void batch_norm_backward(const Strided& dy, const Strided& x, const Strided& weight, const Strided& mean,
                         const Strided& invstd, bool training, const Strided& dx, const Strided& dweight,
                         const Strided& dbias) {
  const int64_t C = x.size(1);
  const ChannelView xv = channel_view(x), dyv = channel_view(dy);
  const ChannelView dxv = dx.defined() ? channel_view(dx) : dyv;
  const int64_t n = numel_of(xv.pos_shape);
  const std::vector<double> w = read_vec(weight);
  dispatch_floating(x.dtype(), "batch_norm backward", [&]<class T>() {
    using A = compute_t<T>;
    const RowLoops<A> loops{avx512_path_active()};
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = dx.defined() ? static_cast<T*>(dx.raw_data()) : nullptr;
    const A* pm = mean.data<A>();
    const A* pi = invstd.data<A>();
    // Each channel's sums and gradients are one thread's (Note [Deterministic threads]).
    parallel_for(C, grain_for(3 * n), [&](int64_t c_begin, int64_t c_end) {
      const ChannelValues<T, A> xs(Workspace::norm_values, n), gs(Workspace::norm_grads, n);
      for (int64_t c = c_begin; c < c_end; ++c) {
        const T* xc = px + c * xv.channel_stride;
        const T* dyc = pdy + c * dyv.channel_stride;
        const A mc = pm[c], ic = pi[c];
        const A wc = w.empty() ? A(1) : A(w[size_t(c)]);
        // sum(dy) and sum(dy * xhat) over the positions of channel c, in double.
        double sdy = 0.0, sdyxh = 0.0;
        if (training || dweight.defined() || dbias.defined()) {
          LaneSum s_dy, s_dyxh;
          for_each_row<2>(xv.pos_shape, {xv.pos_strides, dyv.pos_strides}, [&](const RowPiece<2>& r) {
            for_chunks(r.len, [&](int64_t j, int64_t len) {
              A xb[kRowChunk], gb[kRowChunk];
              const A* xr = xs.load(xc + r.at[0] + j * r.step[0], r.step[0], r.first + j, len, xb);
              const A* gr = gs.load(dyc + r.at[1] + j * r.step[1], r.step[1], r.first + j, len, gb);
              loops.sum_dy_dyxh(s_dy, s_dyxh, xr, gr, len, mc, ic);
            });
          });
          sdy = s_dy.total();
          sdyxh = s_dyxh.total();
        }
        if (dweight.defined()) write_at(dweight, c, sdyxh);
        if (dbias.defined()) write_at(dbias, c, sdy);
        if (!pdx) continue;
        T* dxc = pdx + c * dxv.channel_stride;
        const A k = wc * ic;
        if (training) {
          // dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)): the mean and var paths.
          const A mdy = A(sdy / double(n)), mdyxh = A(sdyxh / double(n));
          for_each_row<3>(xv.pos_shape, {xv.pos_strides, dyv.pos_strides, dxv.pos_strides}, [&](const RowPiece<3>& r) {
            for_chunks(r.len, [&](int64_t j, int64_t len) {
              A xb[kRowChunk], gb[kRowChunk], db[kRowChunk];
              const A* xr = xs.reload(xc + r.at[0] + j * r.step[0], r.step[0], r.first + j, len, xb);
              const A* gr = gs.reload(dyc + r.at[1] + j * r.step[1], r.step[1], r.first + j, len, gb);
              T* out = dxc + r.at[2] + j * r.step[2];
              A* dr = out_row(out, r.step[2], db);
              loops.grad_input(xr, gr, dr, len, k, mdy, mc, ic, mdyxh);
              store_row(dr, out, r.step[2], len);
            });
          });
        } else {
          for_each_row<2>(dyv.pos_shape, {dyv.pos_strides, dxv.pos_strides}, [&](const RowPiece<2>& r) {
            for_chunks(r.len, [&](int64_t j, int64_t len) {
              A gb[kRowChunk], db[kRowChunk];
              const A* gr = load_row(dyc + r.at[0] + j * r.step[0], r.step[0], len, gb);
              T* out = dxc + r.at[1] + j * r.step[1];
              A* dr = out_row(out, r.step[1], db);
              for (int64_t i = 0; i < len; ++i) dr[i] = gr[i] * k;
              store_row(dr, out, r.step[1], len);
            });
          });
        }
      }
    });
  });
}

}  // namespace mixtape::cpu
