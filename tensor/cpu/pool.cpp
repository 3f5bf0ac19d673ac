#include "tensor/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

namespace {

// Input rows [lo, hi) covered by output row o (the window clipped to the input).
inline void window_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n, int64_t& lo, int64_t& hi) {
  const int64_t start = o * s - p;
  lo = std::max<int64_t>(start, 0);
  hi = std::min(start + k, n);
}

// An H x W plane (strides hs, ws) as compute-type values with row stride W: the plane itself
// when it is already that, else buf filled with them.
template <class T, class Cc = compute_t<T>>
const Cc* load_plane(const T* plane, int64_t H, int64_t W, int64_t hs, int64_t ws, std::vector<Cc>& buf) {
  if constexpr (std::is_same_v<T, Cc>)
    if (ws == 1 && hs == W) return plane;
  buf.resize(size_t(H * W));
  for (int64_t h = 0; h < H; ++h) load_row_to(plane + h * hs, ws, W, buf.data() + h * W);
  return buf.data();
}

}  // namespace

void max_pool2d(const Strided& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                const Strided& out, const Strided& indices) {
  MT_ASSERT(out.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  const Shape& xs = x.strides();
  dispatch_floating(x.dtype(), "max_pool2d", [&]<class T>() {
    using Cc = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    // Each (n, c) plane is one thread's (Note [Deterministic threads]).
    parallel_for(N * C, grain_for(OH * OW * kh * kw), [&](int64_t begin, int64_t end) {
      std::vector<Cc> in_buf, out_buf(size_t(OH * OW));
      for (int64_t p = begin; p < end; ++p) {
        const Cc* plane = load_plane(px + (p / C) * xs[0] + (p % C) * xs[1], H, W, xs[2], xs[3], in_buf);
        T* po_plane = po + p * OH * OW;
        Cc* out_plane = out_row(po_plane, 1, out_buf.data());
        Cc* po_p = out_plane;
        int64_t* pi_p = indices.data<int64_t>() + p * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h_lo, h_hi;
          window_span(oh, kh, sh, ph, H, h_lo, h_hi);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w_lo, w_hi;
            window_span(ow, kw, sw, pw, W, w_lo, w_hi);
            // Padding is -inf: it never wins. Strict > keeps the first maximum. The selects are
            // branch-free (random comparisons would mispredict); a NaN, rare, takes the slow path
            // below so that the first NaN wins as in PyTorch.
            Cc best = -std::numeric_limits<Cc>::infinity();
            int64_t arg = h_lo * W + w_lo;
            bool nan = false;
            for (int64_t h = h_lo; h < h_hi; ++h) {
              const Cc* row = plane + h * W;
              for (int64_t w = w_lo; w < w_hi; ++w) {
                const Cc v = row[w];
                const bool gt = v > best;
                best = gt ? v : best;
                arg = gt ? h * W + w : arg;
                nan |= v != v;
              }
            }
            if (nan) {
              for (int64_t h = h_lo; h < h_hi && best == best; ++h)
                for (int64_t w = w_lo; w < w_hi; ++w) {
                  const Cc v = plane[h * W + w];
                  if (v != v) {
                    best = v;
                    arg = h * W + w;
                    break;
                  }
                }
            }
            *po_p++ = best;
            *pi_p++ = arg;
          }
        }
        store_row(out_plane, po_plane, 1, OH * OW);
      }
    });
  });
}

void max_pool2d_backward(const Strided& dy, const Strided& indices, const Strided& dx) {
  MT_ASSERT(dx.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64);
  const int64_t N = dx.size(0), C = dx.size(1), HW = dx.size(2) * dx.size(3), OH = dy.size(2), OW = dy.size(3);
  const Shape& ds = dy.strides();
  dispatch_floating(dx.dtype(), "max_pool2d backward", [&]<class T>() {
    using Cc = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy.raw_data());
    const int64_t* pi = indices.data<int64_t>();
    T* pdx = static_cast<T*>(dx.raw_data());
    // Overlapping windows can send several gradients to one input: sum in the compute type,
    // round once.
    // Each (n, c) plane is one thread's (Note [Deterministic threads]).
    parallel_for(N * C, grain_for(HW + OH * OW), [&](int64_t begin, int64_t end) {
      std::vector<Cc> acc(static_cast<size_t>(HW)), g_buf;
      for (int64_t p = begin; p < end; ++p) {
        std::fill(acc.begin(), acc.end(), Cc(0));
        const Cc* g = load_plane(pdy + (p / C) * ds[0] + (p % C) * ds[1], OH, OW, ds[2], ds[3], g_buf);
        const int64_t* pi_p = pi + p * OH * OW;
        for (int64_t k = 0; k < OH * OW; ++k) acc[size_t(pi_p[k])] += g[k];
        store_row(acc.data(), pdx + p * HW, 1, HW);
      }
    });
  });
}

void avg_pool2d(const Strided& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                const Strided& out) {
  MT_ASSERT(out.is_contiguous());
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  const Shape& xs = x.strides();
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<class T>() {
    using Cc = compute_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const Cc divisor = Cc(kh * kw);  // count_include_pad: padded zeros count
    // Each (n, c) plane is one thread's (Note [Deterministic threads]).
    parallel_for(N * C, grain_for(OH * OW * kh * kw), [&](int64_t begin, int64_t end) {
      std::vector<Cc> in_buf, out_buf(size_t(OH * OW));
      for (int64_t p = begin; p < end; ++p) {
        const Cc* plane = load_plane(px + (p / C) * xs[0] + (p % C) * xs[1], H, W, xs[2], xs[3], in_buf);
        T* po_plane = po + p * OH * OW;
        Cc* out_plane = out_row(po_plane, 1, out_buf.data());
        Cc* po_p = out_plane;
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h_lo, h_hi;
          window_span(oh, kh, sh, ph, H, h_lo, h_hi);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w_lo, w_hi;
            window_span(ow, kw, sw, pw, W, w_lo, w_hi);
            Cc s = 0;
            for (int64_t h = h_lo; h < h_hi; ++h)
              for (int64_t w = w_lo; w < w_hi; ++w) s += plane[h * W + w];
            *po_p++ = s / divisor;
          }
        }
        store_row(out_plane, po_plane, 1, OH * OW);
      }
    });
  });
}

void avg_pool2d_backward(const Strided& dy, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                         const Strided& dx) {
  MT_ASSERT(dx.is_contiguous());
  const int64_t N = dx.size(0), C = dx.size(1), H = dx.size(2), W = dx.size(3), OH = dy.size(2), OW = dy.size(3);
  const Shape& ds = dy.strides();
  dispatch_floating(dx.dtype(), "avg_pool2d backward", [&]<class T>() {
    using Cc = compute_t<T>;
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    const Cc divisor = Cc(kh * kw);
    // Each (n, c) plane is one thread's (Note [Deterministic threads]).
    parallel_for(N * C, grain_for(H * W + OH * OW * kh * kw), [&](int64_t begin, int64_t end) {
      std::vector<Cc> acc(static_cast<size_t>(H * W)), g_buf;
      for (int64_t p = begin; p < end; ++p) {
        std::fill(acc.begin(), acc.end(), Cc(0));
        const Cc* g = load_plane(pdy + (p / C) * ds[0] + (p % C) * ds[1], OH, OW, ds[2], ds[3], g_buf);
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h_lo, h_hi;
          window_span(oh, kh, sh, ph, H, h_lo, h_hi);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w_lo, w_hi;
            window_span(ow, kw, sw, pw, W, w_lo, w_hi);
            const Cc v = g[oh * OW + ow] / divisor;
            for (int64_t h = h_lo; h < h_hi; ++h)
              for (int64_t w = w_lo; w < w_hi; ++w) acc[size_t(h * W + w)] += v;
          }
        }
        store_row(acc.data(), pdx + p * H * W, 1, H * W);
      }
    });
  });
}

}  // namespace mixtape::cpu
