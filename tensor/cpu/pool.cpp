#include "tensor/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/cpu/parallel.h"

namespace mixtape::cpu {

namespace {

// Input rows [lo, hi) covered by output row o (the window clipped to the input).
inline void window_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n, int64_t& lo, int64_t& hi) {
  const int64_t start = o * s - p;
  lo = std::max<int64_t>(start, 0);
  hi = std::min(start + k, n);
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
      for (int64_t p = begin; p < end; ++p) {
        const T* plane = px + (p / C) * xs[0] + (p % C) * xs[1];
        T* po_p = po + p * OH * OW;
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
              const T* row = plane + h * xs[2];
              for (int64_t w = w_lo; w < w_hi; ++w) {
                const Cc v = load(row[w * xs[3]]);
                const bool gt = v > best;
                best = gt ? v : best;
                arg = gt ? h * W + w : arg;
                nan |= v != v;
              }
            }
            if (nan) {
              for (int64_t h = h_lo; h < h_hi && best == best; ++h)
                for (int64_t w = w_lo; w < w_hi; ++w) {
                  const Cc v = load(plane[h * xs[2] + w * xs[3]]);
                  if (v != v) {
                    best = v;
                    arg = h * W + w;
                    break;
                  }
                }
            }
            *po_p++ = store<T>(best);
            *pi_p++ = arg;
          }
        }
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
      std::vector<Cc> acc(static_cast<size_t>(HW));
      for (int64_t p = begin; p < end; ++p) {
        std::fill(acc.begin(), acc.end(), Cc(0));
        const T* g = pdy + (p / C) * ds[0] + (p % C) * ds[1];
        const int64_t* pi_p = pi + p * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) acc[size_t(*pi_p++)] += load(g[oh * ds[2] + ow * ds[3]]);
        T* d = pdx + p * HW;
        for (int64_t k = 0; k < HW; ++k) d[k] = store<T>(acc[size_t(k)]);
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
      for (int64_t p = begin; p < end; ++p) {
        const T* plane = px + (p / C) * xs[0] + (p % C) * xs[1];
        T* po_p = po + p * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h_lo, h_hi;
          window_span(oh, kh, sh, ph, H, h_lo, h_hi);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w_lo, w_hi;
            window_span(ow, kw, sw, pw, W, w_lo, w_hi);
            Cc s = 0;
            for (int64_t h = h_lo; h < h_hi; ++h)
              for (int64_t w = w_lo; w < w_hi; ++w) s += load(plane[h * xs[2] + w * xs[3]]);
            *po_p++ = store<T>(s / divisor);
          }
        }
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
      std::vector<Cc> acc(static_cast<size_t>(H * W));
      for (int64_t p = begin; p < end; ++p) {
        std::fill(acc.begin(), acc.end(), Cc(0));
        const T* g = pdy + (p / C) * ds[0] + (p % C) * ds[1];
        for (int64_t oh = 0; oh < OH; ++oh) {
          int64_t h_lo, h_hi;
          window_span(oh, kh, sh, ph, H, h_lo, h_hi);
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t w_lo, w_hi;
            window_span(ow, kw, sw, pw, W, w_lo, w_hi);
            const Cc v = load(g[oh * ds[2] + ow * ds[3]]) / divisor;
            for (int64_t h = h_lo; h < h_hi; ++h)
              for (int64_t w = w_lo; w < w_hi; ++w) acc[size_t(h * W + w)] += v;
          }
        }
        T* d = pdx + p * H * W;
        for (int64_t k = 0; k < H * W; ++k) d[k] = store<T>(acc[size_t(k)]);
      }
    });
  });
}

}  // namespace mixtape::cpu
