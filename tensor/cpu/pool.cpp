#include "tensor/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/core/rounding_census.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/target_region.h"

namespace mixtape::cpu {

namespace {

// Input rows [lo, hi) covered by output row o (the window clipped to the input).
inline void window_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n, int64_t& lo, int64_t& hi) {
  const int64_t start = o * s - p;
  lo = std::max<int64_t>(start, 0);
  hi = std::min(start + k, n);
}

// The input rows lo, lo + d, ... < hi of output row o's dilated window {o s - p + i d : i < k}
// that lie inside [0, n) (hi = lo when none do; the front-end rejects such a window). With
// d = 1 this is window_span.
inline void dilated_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t d, int64_t n, int64_t& lo, int64_t& hi) {
  const int64_t start = o * s - p;
  const int64_t i_lo = start < 0 ? (-start + d - 1) / d : 0;
  const int64_t i_hi = std::min(k, start < n ? (n - start + d - 1) / d : 0);
  lo = start + i_lo * d;
  hi = i_hi > i_lo ? start + i_hi * d : lo;
}

// The divisor of output row o's average along one dim: its window [o s - p, o s - p + k) clipped
// to the padded input [-p, n + p) when padded zeros count (count_include_pad), else to the input.
// The clip at n + p only bites for the last window of ceil_mode (as in PyTorch); otherwise the
// count with padding is k.
inline int64_t window_count(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n, bool include_pad) {
  const int64_t start = o * s - p;
  if (include_pad) return std::min(start + k, n + p) - start;
  return std::min(start + k, n) - std::max<int64_t>(start, 0);
}

// Input rows [lo, hi) averaged into output row o of `out` rows over `n` input rows (adaptive
// pooling): [floor(o n / out), ceil((o + 1) n / out)), never empty.
inline void adaptive_span(int64_t o, int64_t n, int64_t out, int64_t& lo, int64_t& hi) {
  lo = o * n / out;
  hi = ((o + 1) * n + out - 1) / out;
}

// An H x W plane (strides hs, ws) as compute-type values with row stride W: the plane itself
// when it is already that, else buf filled with them.
template <class T, class Cc = compute_t<T>>
const Cc* load_plane(const T* plane, int64_t H, int64_t W, int64_t hs, int64_t ws, std::vector<Cc>& buf) {
  if constexpr (std::is_same_v<T, Cc>)
    if (ws == 1 && hs == W) return plane;
  buf.resize(size_t(H * W));
  if (ws == 1 && hs == W) load_row_to(plane, 1, H * W, buf.data());  // one conversion, not H short ones
  else
    for (int64_t h = 0; h < H; ++h) load_row_to(plane + h * hs, ws, W, buf.data() + h * W);
  return buf.data();
}

// Runs f(p, in, out) for every (n, c) plane p of the 4-D `in` (dtype T), one thread per plane
// (Note [Deterministic threads]): `in` is plane p as compute-type values with row stride W, and
// `out` is where f writes plane p of the contiguous output (`out_size` values, in the compute
// type), which is rounded once when f returns. `work` is what a plane costs, in simple elements.
template <class T, class F>
void for_each_plane(const Strided& in, T* out_data, int64_t out_size, int64_t work, F&& f) {
  using Cc = compute_t<T>;
  const int64_t C = in.size(1), H = in.size(2), W = in.size(3);
  const Shape& s = in.strides();
  const T* pin = static_cast<const T*>(in.raw_data());
  parallel_for(in.size(0) * C, grain_for(work), [&](int64_t begin, int64_t end) {
    std::vector<Cc> in_buf, out_buf(static_cast<size_t>(out_size));
    for (int64_t p = begin; p < end; ++p) {
      const Cc* plane = load_plane(pin + (p / C) * s[0] + (p % C) * s[1], H, W, s[2], s[3], in_buf);
      T* dst = out_data + p * out_size;
      Cc* out = out_row(dst, 1, out_buf.data());
      f(p, plane, out);
      store_row(out, dst, 1, out_size);
    }
  });
}

// The taps of every output position along one axis of an upsample (Note [Upsample index math]).
template <class C>
std::vector<formulas::UpsampleTaps<C>> upsample_axis_taps(int64_t in, int64_t out, UpsampleMode mode,
                                                          bool align_corners, double scale_factor) {
  const formulas::UpsampleAxis<C> a = formulas::upsample_axis<C>(in, out, mode, align_corners, scale_factor);
  std::vector<formulas::UpsampleTaps<C>> taps;
  taps.reserve(size_t(out));
  for (int64_t o = 0; o < out; ++o) taps.push_back(formulas::upsample_taps(a, o));
  return taps;
}

// Note [Max-pool segments]
// Most outputs of a max-pool row have their whole window inside the row (all but the padded
// edges). On the AVX-512 conversion path (avx512_path_active(), convert.h) those are computed
// sixteen at a time, one output per lane: for each tap (h, w0 + j dw) in window order, every
// lane compares that tap's value with its maximum so far (strict >, so the first maximum wins,
// as in PyTorch). Each output sees the same values in the same order as in the one-output loop,
// and a select does no arithmetic, so both give the same bits (tests/tensor/test_pool_variants.cpp
// compares them). A segment that saw a NaN is redone output by output (the first NaN wins).
#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f")

// Outputs o < n of a row segment: output o's window starts at column w0 + o sw and covers rows
// h_lo, h_lo + dh, ... < h_hi and columns w0 + o sw + j dw, j < kw, all inside the plane (row
// length W). Writes best[o] and arg[o] (position h W + w of the maximum); returns whether a
// value was NaN, for the caller to redo the segment.
bool max_segment_avx512(const float* plane, int64_t W, int64_t h_lo, int64_t h_hi, int64_t dh, int64_t kw, int64_t dw,
                        int64_t sw, int64_t w0, int64_t n, float* best, int64_t* arg) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i offset = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(int(sw)));  // o sw, o < 16
  const __m512i off_lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(offset));
  const __m512i off_hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(offset, 1));
  const __m512i even = _mm512_add_epi32(lanes, lanes);  // 0, 2, ..., 30: sw == 2 from two loads
  __mmask16 nan = 0;
  for (int64_t o0 = 0; o0 < n; o0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - o0);
    const __mmask16 live = __mmask16((1u << m) - 1u);
    __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512i start = _mm512_set1_epi64(h_lo * W + w0 + o0 * sw);
    __m512i arg_lo = _mm512_add_epi64(start, off_lo), arg_hi = _mm512_add_epi64(start, off_hi);
    for (int64_t h = h_lo; h < h_hi; h += dh)
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t first = h * W + w0 + j * dw + o0 * sw;  // the tap's position for lane 0
        const float* tap = plane + first;
        __m512 v;
        if (sw == 1) {
          v = _mm512_maskz_loadu_ps(live, tap);
        } else if (sw == 2) {  // lanes read tap[0], tap[2], ... tap[2 (m - 1)]
          const __mmask16 lo = __mmask16((1u << std::min<int64_t>(16, 2 * m - 1)) - 1u);
          const __mmask16 hi = m > 8 ? __mmask16((1u << (2 * m - 17)) - 1u) : __mmask16(0);
          v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, tap), even, _mm512_maskz_loadu_ps(hi, tap + 16));
        } else {
          v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, offset, tap, 4);
        }
        const __mmask16 gt = _mm512_mask_cmp_ps_mask(live, v, mx, _CMP_GT_OQ);
        mx = _mm512_mask_mov_ps(mx, gt, v);
        const __m512i pos = _mm512_set1_epi64(first);
        arg_lo = _mm512_mask_mov_epi64(arg_lo, __mmask8(gt), _mm512_add_epi64(pos, off_lo));
        arg_hi = _mm512_mask_mov_epi64(arg_hi, __mmask8(gt >> 8), _mm512_add_epi64(pos, off_hi));
        nan |= _mm512_mask_cmp_ps_mask(live, v, v, _CMP_UNORD_Q);
      }
    _mm512_mask_storeu_ps(best + o0, live, mx);
    _mm512_mask_storeu_epi64(arg + o0, __mmask8(live), arg_lo);
    _mm512_mask_storeu_epi64(arg + o0 + 8, __mmask8(live >> 8), arg_hi);
  }
  return nan != 0;
}

MT_TARGET_END
#endif  // __x86_64__

}  // namespace

void max_pool2d(const Strided& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                int64_t dw, const Strided& out, const Strided& indices) {
  MT_ASSERT(out.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64);
  const int64_t H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  const bool vector_path = avx512_path_active();  // Note [Max-pool segments]
  dispatch_floating(x.dtype(), "max_pool2d", [&]<class T>() {
    using Cc = compute_t<T>;
    for_each_plane(x, static_cast<T*>(out.raw_data()), OH * OW, OH * OW * kh * kw,
                   [&](int64_t p, const Cc* plane, Cc* po_p) {
      int64_t* pi_p = indices.data<int64_t>() + p * OH * OW;
      // Outputs [ow_a, ow_b) have their whole window inside the row (Note [Max-pool segments]).
      const int64_t ow_a = std::min(OW, (pw + sw - 1) / sw);
      const int64_t last_start = W - 1 - (kw - 1) * dw + pw;  // the largest window start ow sw
      const int64_t ow_b = last_start < 0 ? ow_a : std::clamp(last_start / sw + 1, ow_a, OW);
      for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t h_lo, h_hi;
        dilated_span(oh, kh, sh, ph, dh, H, h_lo, h_hi);
        Cc* po_row = po_p + oh * OW;
        int64_t* pi_row = pi_p + oh * OW;
        auto one = [&](int64_t ow) {
          int64_t w_lo, w_hi;
          dilated_span(ow, kw, sw, pw, dw, W, w_lo, w_hi);
          // Padding is -inf: it never wins. Strict > keeps the first maximum. The selects are
          // branch-free (random comparisons would mispredict); a NaN, rare, takes the slow path
          // below so that the first NaN wins as in PyTorch.
          Cc best = -std::numeric_limits<Cc>::infinity();
          int64_t arg = h_lo * W + w_lo;
          bool nan = false;
          for (int64_t h = h_lo; h < h_hi; h += dh) {
            const Cc* row = plane + h * W;
            for (int64_t w = w_lo; w < w_hi; w += dw) {
              const Cc v = row[w];
              const bool gt = v > best;
              best = gt ? v : best;
              arg = gt ? h * W + w : arg;
              nan |= v != v;
            }
          }
          if (nan) {
            for (int64_t h = h_lo; h < h_hi && best == best; h += dh)
              for (int64_t w = w_lo; w < w_hi; w += dw) {
                const Cc v = plane[h * W + w];
                if (v != v) {
                  best = v;
                  arg = h * W + w;
                  break;
                }
              }
          }
          po_row[ow] = best;
          pi_row[ow] = arg;
        };
        int64_t ow = 0;
#if defined(__x86_64__)
        if constexpr (std::is_same_v<Cc, float>) {
          if (vector_path && ow_b > ow_a) {
            for (; ow < ow_a; ++ow) one(ow);
            if (max_segment_avx512(plane, W, h_lo, h_hi, dh, kw, dw, sw, ow_a * sw - pw, ow_b - ow_a, po_row + ow_a,
                                   pi_row + ow_a))
              for (; ow < ow_b; ++ow) one(ow);  // a NaN: the first one wins
            ow = ow_b;
          }
        }
#endif
        for (; ow < OW; ++ow) one(ow);
      }
    });
  });
}

namespace {

// Note [Max pool gradient on bit patterns]
// max_pool2d's gradient sends each dy to the input its window chose, summing in the compute type
// and rounding once. On f16 and bf16 an input chosen by one window gets store<T>(0 + dy): dy's
// own bits, except +0 for -0 and the canonical 0x7FFF for a NaN (store<>'s NaN); an input no
// window chose gets +0. Where a plane's indices are all different (windows that do not overlap,
// as the cnn's 2 x 2 pooling), those bits are written directly: no compute-type plane to fill,
// sum and round. A plane in which an index repeats is summed as before. Not while a rounding
// census is open, whose counts come from the stores (Note [Rounding census]).
template <class T>
bool max_pool_backward_bits(const Strided& dy, const int64_t* pi, T* dx, int64_t HW, int64_t OHW) {
  if (RoundingCensus::is_open() || !dy.is_contiguous()) return false;
  const auto* g = static_cast<const uint16_t*>(dy.raw_data());
  auto* d = reinterpret_cast<uint16_t*>(dx);
  parallel_for(dy.size(0) * dy.size(1), grain_for(HW), [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> chosen(static_cast<size_t>(HW));
    std::vector<float> acc, buf;
    for (int64_t p = begin; p < end; ++p) {
      uint16_t* dp = d + p * HW;
      const uint16_t* gp = g + p * OHW;
      const int64_t* ip = pi + p * OHW;
      std::fill(dp, dp + HW, uint16_t(0));
      std::fill(chosen.begin(), chosen.end(), uint8_t(0));
      bool repeated = false;
      for (int64_t k = 0; k < OHW && !repeated; ++k) {
        const int64_t i = ip[k];
        repeated = chosen[size_t(i)] != 0;
        chosen[size_t(i)] = 1;
        const uint16_t v = gp[k];
        const uint16_t stored =
            std::is_same_v<T, half> ? bits16::round_trip_half_bits(v) : bits16::round_trip_bf16_bits(v);
        dp[i] = v == 0x8000 ? uint16_t(0) : stored;  // 0 + -0 is +0
      }
      if (!repeated) continue;
      acc.assign(static_cast<size_t>(HW), 0.0f);
      buf.resize(static_cast<size_t>(OHW));
      load_row_to(reinterpret_cast<const T*>(gp), 1, OHW, buf.data());
      for (int64_t k = 0; k < OHW; ++k) acc[size_t(ip[k])] += buf[size_t(k)];
      store_row(acc.data(), dx + p * HW, 1, HW);
    }
  });
  return true;
}

}  // namespace

void max_pool2d_backward(const Strided& dy, const Strided& indices, const Strided& dx) {
  MT_ASSERT(dx.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64);
  const int64_t HW = dx.size(2) * dx.size(3), OHW = dy.size(2) * dy.size(3);
  dispatch_floating(dx.dtype(), "max_pool2d backward", [&]<class T>() {
    using Cc = compute_t<T>;
    const int64_t* pi = indices.data<int64_t>();
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
      if (max_pool_backward_bits(dy, pi, static_cast<T*>(dx.raw_data()), HW, OHW)) return;
    // Overlapping windows can send several gradients to one input: sum in the compute type,
    // round once.
    for_each_plane(dy, static_cast<T*>(dx.raw_data()), HW, HW + OHW, [&](int64_t p, const Cc* g, Cc* acc) {
      std::fill(acc, acc + HW, Cc(0));
      const int64_t* pi_p = pi + p * OHW;
      for (int64_t k = 0; k < OHW; ++k) acc[pi_p[k]] += g[k];
    });
  });
}

void avg_pool2d(const Strided& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                bool count_include_pad, const Strided& out) {
  MT_ASSERT(out.is_contiguous());
  const int64_t H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<class T>() {
    using Cc = compute_t<T>;
    for_each_plane(x, static_cast<T*>(out.raw_data()), OH * OW, OH * OW * kh * kw,
                   [&](int64_t, const Cc* plane, Cc* po_p) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t h_lo, h_hi;
        window_span(oh, kh, sh, ph, H, h_lo, h_hi);
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t w_lo, w_hi;
          window_span(ow, kw, sw, pw, W, w_lo, w_hi);
          const Cc divisor = Cc(window_count(oh, kh, sh, ph, H, count_include_pad) *
                                window_count(ow, kw, sw, pw, W, count_include_pad));
          Cc s = 0;
          for (int64_t h = h_lo; h < h_hi; ++h)
            for (int64_t w = w_lo; w < w_hi; ++w) s += plane[h * W + w];
          *po_p++ = s / divisor;
        }
      }
    });
  });
}

void avg_pool2d_backward(const Strided& dy, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                         bool count_include_pad, const Strided& dx) {
  MT_ASSERT(dx.is_contiguous());
  const int64_t H = dx.size(2), W = dx.size(3), OH = dy.size(2), OW = dy.size(3);
  dispatch_floating(dx.dtype(), "avg_pool2d backward", [&]<class T>() {
    using Cc = compute_t<T>;
    for_each_plane(dy, static_cast<T*>(dx.raw_data()), H * W, H * W + OH * OW * kh * kw,
                   [&](int64_t, const Cc* g, Cc* acc) {
      std::fill(acc, acc + H * W, Cc(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t h_lo, h_hi;
        window_span(oh, kh, sh, ph, H, h_lo, h_hi);
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t w_lo, w_hi;
          window_span(ow, kw, sw, pw, W, w_lo, w_hi);
          const Cc divisor = Cc(window_count(oh, kh, sh, ph, H, count_include_pad) *
                                window_count(ow, kw, sw, pw, W, count_include_pad));
          const Cc v = g[oh * OW + ow] / divisor;
          for (int64_t h = h_lo; h < h_hi; ++h)
            for (int64_t w = w_lo; w < w_hi; ++w) acc[h * W + w] += v;
        }
      }
    });
  });
}

void adaptive_avg_pool2d(const Strided& x, const Strided& out) {
  MT_ASSERT(out.is_contiguous());
  const int64_t H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  // Each output reads about (H / OH + 1) (W / OW + 1) inputs.
  const int64_t work = OH * OW * (H / OH + 1) * (W / OW + 1);
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    using Cc = compute_t<T>;
    for_each_plane(x, static_cast<T*>(out.raw_data()), OH * OW, work, [&](int64_t, const Cc* plane, Cc* po_p) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t h_lo, h_hi;
        adaptive_span(oh, H, OH, h_lo, h_hi);
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t w_lo, w_hi;
          adaptive_span(ow, W, OW, w_lo, w_hi);
          Cc s = 0;
          for (int64_t h = h_lo; h < h_hi; ++h)
            for (int64_t w = w_lo; w < w_hi; ++w) s += plane[h * W + w];
          *po_p++ = s / Cc((h_hi - h_lo) * (w_hi - w_lo));
        }
      }
    });
  });
}

void adaptive_avg_pool2d_backward(const Strided& dy, const Strided& dx) {
  MT_ASSERT(dx.is_contiguous());
  const int64_t H = dx.size(2), W = dx.size(3), OH = dy.size(2), OW = dy.size(3);
  const int64_t work = H * W + OH * OW * (H / OH + 1) * (W / OW + 1);
  dispatch_floating(dx.dtype(), "adaptive_avg_pool2d backward", [&]<class T>() {
    using Cc = compute_t<T>;
    for_each_plane(dy, static_cast<T*>(dx.raw_data()), H * W, work, [&](int64_t, const Cc* g, Cc* acc) {
      std::fill(acc, acc + H * W, Cc(0));
      for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t h_lo, h_hi;
        adaptive_span(oh, H, OH, h_lo, h_hi);
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t w_lo, w_hi;
          adaptive_span(ow, W, OW, w_lo, w_hi);
          const Cc v = g[oh * OW + ow] / Cc((h_hi - h_lo) * (w_hi - w_lo));
          for (int64_t h = h_lo; h < h_hi; ++h)
            for (int64_t w = w_lo; w < w_hi; ++w) acc[h * W + w] += v;
        }
      }
    });
  });
}

void upsample(const Strided& x, UpsampleMode mode, bool align_corners, double scale_h, double scale_w,
              const Strided& out) {
  MT_ASSERT(out.is_contiguous());
  const int64_t H = x.size(2), W = x.size(3), OH = out.size(2), OW = out.size(3);
  const bool nearest = mode == UpsampleMode::nearest;
  dispatch_floating(x.dtype(), "upsample", [&]<class T>() {
    using Cc = compute_t<T>;
    const auto rows = upsample_axis_taps<Cc>(H, OH, mode, align_corners, scale_h);
    const auto cols = upsample_axis_taps<Cc>(W, OW, mode, align_corners, scale_w);
    for_each_plane(x, static_cast<T*>(out.raw_data()), OH * OW, OH * OW * (nearest ? 1 : 4),
                   [&](int64_t, const Cc* plane, Cc* po) {
      for (const auto& th : rows) {
        const Cc* r0 = plane + th.i0 * W;
        const Cc* r1 = plane + th.i1 * W;
        if (nearest) {
          for (const auto& tw : cols) *po++ = r0[tw.i0];
        } else {
          for (const auto& tw : cols)
            *po++ = formulas::bilinear_value(th, tw, r0[tw.i0], r0[tw.i1], r1[tw.i0], r1[tw.i1]);
        }
      }
    });
  });
}

void upsample_backward(const Strided& dy, UpsampleMode mode, bool align_corners, double scale_h, double scale_w,
                       const Strided& dx) {
  MT_ASSERT(dx.is_contiguous());
  const int64_t H = dx.size(2), W = dx.size(3), OH = dy.size(2), OW = dy.size(3);
  const bool nearest = mode == UpsampleMode::nearest;
  dispatch_floating(dx.dtype(), "upsample backward", [&]<class T>() {
    using Cc = compute_t<T>;
    const auto rows = upsample_axis_taps<Cc>(H, OH, mode, align_corners, scale_h);
    const auto cols = upsample_axis_taps<Cc>(W, OW, mode, align_corners, scale_w);
    // Several outputs may read one input: sum in the compute type, in row-major output order and
    // each output's terms in the order of bilinear_value's note (the GPU gathers in this order),
    // round once.
    for_each_plane(dy, static_cast<T*>(dx.raw_data()), H * W, H * W + OH * OW * (nearest ? 1 : 4),
                   [&](int64_t, const Cc* g, Cc* acc) {
      std::fill(acc, acc + H * W, Cc(0));
      for (const auto& th : rows) {
        Cc* r0 = acc + th.i0 * W;
        Cc* r1 = acc + th.i1 * W;
        if (nearest) {
          for (const auto& tw : cols) r0[tw.i0] += *g++;
        } else {
          for (const auto& tw : cols) {
            const Cc g0 = *g * th.w0, g1 = *g * th.w1;
            ++g;
            r0[tw.i0] += g0 * tw.w0;
            r0[tw.i1] += g0 * tw.w1;
            r1[tw.i0] += g1 * tw.w0;
            r1[tw.i1] += g1 * tw.w1;
          }
        }
      }
    });
  });
}

}  // namespace mixtape::cpu
