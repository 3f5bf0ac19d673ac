// 2-D max, average and adaptive average pooling and upsample (nearest, bilinear) on the GPU,
// forward and backward side by side. Each launcher mirrors the CPU kernel of the same name in
// tensor/cpu/pool.cpp: the same clipped windows (upsample: the same taps and weights, from
// tensor/core/upsample_formulas.h), the same visiting order, the same accumulation type
// (compute_t<T>) and one rounding per output, so every result is bit-identical to the CPU's.
//
// Layouts: x and dy have any strides; out, indices and dx are contiguous (allocated by the
// front-ends in tensor/ops/pool.cpp, which also make indices contiguous). Window of output row
// o: input rows [o * s - p, o * s - p + k) clipped to [0, H) (never empty: the front-end keeps
// 2p <= k, k <= H + 2p and, with ceil_mode, every window starting inside the input or the left
// padding); max pooling with dilation d visits rows o * s - p + i d, i < k. avg_pool2d divides by
// the window clipped to the padded input (count_include_pad: kh * kw but for a ceil_mode window
// past the padding) or to the input, as the CPU's window_count.
//
// Note [Max pool backward on the GPU]
// The CPU adds each output's gradient into the input its index names, outputs in row-major
// order, in the compute type, then rounds. The launcher is not told the window geometry (only
// dy, indices and dx), so it cannot gather from windows. Instead one block takes one (n, c)
// plane and keeps a tile of the plane's input gradients in shared memory; the plane's
// (index, dy) pairs stream through shared memory in row-major order, and each thread adds only
// the pairs whose input it owns (input position % block == thread). Every input therefore sums
// its contributions alone, in row-major output order: deterministic, no atomics, and bit-identical
// to the CPU. Indices outside [0, H*W) (the CPU would write out of bounds) are ignored.
#include <cmath>

#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "tensor/core/upsample_formulas.h"

namespace mixtape::cuda {

namespace {

// Input rows [lo, hi) covered by output row o (the window clipped to the input).
__device__ __forceinline__ void window_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n, int64_t& lo,
                                            int64_t& hi) {
  const int64_t start = o * s - p;
  lo = start > 0 ? start : 0;
  hi = start + k < n ? start + k : n;
}

// Geometry shared by the kernels.
struct PoolGeom {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool include_pad;
};

// The CPU's dilated_span: the rows lo, lo + d, ... < hi of the window that lie inside [0, n).
__device__ __forceinline__ void dilated_span(int64_t o, int64_t k, int64_t s, int64_t p, int64_t d, int64_t n,
                                             int64_t& lo, int64_t& hi) {
  const int64_t start = o * s - p;
  const int64_t i_lo = start < 0 ? (-start + d - 1) / d : 0;
  int64_t i_hi = start < n ? (n - start + d - 1) / d : 0;
  if (i_hi > k) i_hi = k;
  lo = start + i_lo * d;
  hi = i_hi > i_lo ? start + i_hi * d : lo;
}

// The CPU's window_count: the average's divisor along one dim.
__device__ __forceinline__ int64_t window_count(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n,
                                                bool include_pad) {
  const int64_t start = o * s - p;
  if (include_pad) return (start + k < n + p ? start + k : n + p) - start;
  return (start + k < n ? start + k : n) - (start > 0 ? start : 0);
}

// One thread per output (n, c, oh, ow), row-major = the contiguous out / indices position.
template <class T>
__global__ void max_pool2d_kernel(const T* __restrict__ x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3,
                                  PoolGeom g, T* __restrict__ out, int64_t* __restrict__ indices) {
  using Cc = compute_t<T>;
  const int64_t total = g.N * g.C * g.OH * g.OW;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % g.OW, oh = (e / g.OW) % g.OH, c = (e / (g.OW * g.OH)) % g.C, n = e / (g.OW * g.OH * g.C);
    const T* plane = x + n * xs0 + c * xs1;
    int64_t h_lo, h_hi, w_lo, w_hi;
    dilated_span(oh, g.kh, g.sh, g.ph, g.dh, g.H, h_lo, h_hi);
    dilated_span(ow, g.kw, g.sw, g.pw, g.dw, g.W, w_lo, w_hi);
    // As the CPU: padding is -inf and never wins, strict > keeps the first maximum, and when the
    // window holds a NaN the first NaN (row-major) wins.
    Cc best = Cc(-INFINITY);
    int64_t arg = h_lo * g.W + w_lo;
    bool nan = false;
    for (int64_t h = h_lo; h < h_hi; h += g.dh)
      for (int64_t w = w_lo; w < w_hi; w += g.dw) {
        const Cc v = load(plane[h * xs2 + w * xs3]);
        if (v > best) {
          best = v;
          arg = h * g.W + w;
        }
        nan |= v != v;
      }
    if (nan) {
      bool found = false;
      for (int64_t h = h_lo; h < h_hi && !found; h += g.dh)
        for (int64_t w = w_lo; w < w_hi; w += g.dw) {
          const Cc v = load(plane[h * xs2 + w * xs3]);
          if (v != v) {
            best = v;
            arg = h * g.W + w;
            found = true;
            break;
          }
        }
    }
    out[e] = store<T>(best);
    indices[e] = arg;
  }
}

inline constexpr int kPlaneBlock = 256;      // threads per plane block (ownership: position % kPlaneBlock)
inline constexpr int64_t kPlaneTile = 4096;  // input gradients per shared-memory tile

// One block per (n, c) plane = blockIdx.x, blockDim.x == kPlaneBlock (Note [Max pool backward
// on the GPU]). dy plane at dy + n * ds0 + c * ds1; indices and dx contiguous.
template <class T>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ dy, int64_t ds0, int64_t ds1, int64_t ds2, int64_t ds3,
                                           const int64_t* __restrict__ indices, T* __restrict__ dx, int64_t C,
                                           int64_t HW, int64_t OH, int64_t OW) {
  using Cc = compute_t<T>;
  __shared__ Cc acc[kPlaneTile];
  __shared__ int64_t s_idx[kPlaneBlock];
  __shared__ Cc s_val[kPlaneBlock];
  const int64_t plane = blockIdx.x, n = plane / C, c = plane % C;
  const int tid = int(threadIdx.x);
  const T* g = dy + n * ds0 + c * ds1;
  const int64_t* pi = indices + plane * OH * OW;
  T* d = dx + plane * HW;
  const int64_t outs = OH * OW;
  for (int64_t tile_base = 0; tile_base < HW; tile_base += kPlaneTile) {
    const int64_t tile_len = HW - tile_base < kPlaneTile ? HW - tile_base : kPlaneTile;
    for (int64_t t = tid; t < tile_len; t += kPlaneBlock) acc[t] = Cc(0);  // owner tid writes acc[t]
    for (int64_t chunk = 0; chunk < outs; chunk += kPlaneBlock) {
      const int64_t q = chunk + tid;
      __syncthreads();  // the previous chunk's pairs have been read by every thread
      if (q < outs) {
        const int64_t oh = q / OW, ow = q - oh * OW;
        s_idx[tid] = pi[q];
        s_val[tid] = load(g[oh * ds2 + ow * ds3]);
      }
      __syncthreads();
      const int cnt = int(outs - chunk < kPlaneBlock ? outs - chunk : kPlaneBlock);
      for (int r = 0; r < cnt; ++r) {  // row-major order of the outputs
        const int64_t rel = s_idx[r] - tile_base;
        if (rel >= 0 && rel < tile_len && int(rel % kPlaneBlock) == tid) acc[rel] += s_val[r];
      }
    }
    for (int64_t t = tid; t < tile_len; t += kPlaneBlock) d[tile_base + t] = store<T>(acc[t]);
  }
}

// One thread per output, as the CPU: the clipped window summed row-major, divided by its divisor.
template <class T>
__global__ void avg_pool2d_kernel(const T* __restrict__ x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3,
                                  PoolGeom g, T* __restrict__ out) {
  using Cc = compute_t<T>;
  const int64_t total = g.N * g.C * g.OH * g.OW;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % g.OW, oh = (e / g.OW) % g.OH, c = (e / (g.OW * g.OH)) % g.C, n = e / (g.OW * g.OH * g.C);
    const T* plane = x + n * xs0 + c * xs1;
    int64_t h_lo, h_hi, w_lo, w_hi;
    window_span(oh, g.kh, g.sh, g.ph, g.H, h_lo, h_hi);
    window_span(ow, g.kw, g.sw, g.pw, g.W, w_lo, w_hi);
    const Cc divisor = Cc(window_count(oh, g.kh, g.sh, g.ph, g.H, g.include_pad) *
                          window_count(ow, g.kw, g.sw, g.pw, g.W, g.include_pad));
    Cc s = 0;
    for (int64_t h = h_lo; h < h_hi; ++h)
      for (int64_t w = w_lo; w < w_hi; ++w) s += load(plane[h * xs2 + w * xs3]);
    out[e] = store<T>(s / divisor);
  }
}

// Output rows whose window contains input row h: [lo, hi] (empty when lo > hi). Window of o:
// [o*s - p, o*s - p + k), so o*s <= h + p and o*s > h + p - k.
__device__ __forceinline__ void outputs_covering(int64_t h, int64_t k, int64_t s, int64_t p, int64_t out_n, int64_t& lo,
                                                 int64_t& hi) {
  const int64_t a = h + p - k;  // o*s > a
  lo = a < 0 ? 0 : a / s + 1;
  hi = (h + p) / s;  // h + p >= 0
  if (hi > out_n - 1) hi = out_n - 1;
}

// One thread per input (n, c, h, w), row-major = the contiguous dx position: gathers the
// gradients of the windows that cover it in row-major output order, which is the order in
// which the CPU's scatter adds them, so the sum is bit-identical.
template <class T>
__global__ void avg_pool2d_backward_kernel(const T* __restrict__ dy, int64_t ds0, int64_t ds1, int64_t ds2, int64_t ds3,
                                           PoolGeom g, T* __restrict__ dx) {
  using Cc = compute_t<T>;
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % g.W, h = (e / g.W) % g.H, c = (e / (g.W * g.H)) % g.C, n = e / (g.W * g.H * g.C);
    const T* gp = dy + n * ds0 + c * ds1;
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    outputs_covering(h, g.kh, g.sh, g.ph, g.OH, oh_lo, oh_hi);
    outputs_covering(w, g.kw, g.sw, g.pw, g.OW, ow_lo, ow_hi);
    Cc acc = Cc(0);
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      const int64_t count_h = window_count(oh, g.kh, g.sh, g.ph, g.H, g.include_pad);
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const Cc divisor = Cc(count_h * window_count(ow, g.kw, g.sw, g.pw, g.W, g.include_pad));
        acc += Cc(load(gp[oh * ds2 + ow * ds3])) / divisor;
      }
    }
    dx[e] = store<T>(acc);
  }
}

// Input rows [lo, hi) averaged into output row o of `out` rows over `n` input rows, as the CPU:
// [floor(o n / out), ceil((o + 1) n / out)).
__device__ __forceinline__ void adaptive_span(int64_t o, int64_t n, int64_t out, int64_t& lo, int64_t& hi) {
  lo = o * n / out;
  hi = ((o + 1) * n + out - 1) / out;
}

// One thread per output, as the CPU: the window summed row-major, divided by its size.
template <class T>
__global__ void adaptive_avg_pool2d_kernel(const T* __restrict__ x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3,
                                           int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t total,
                                           T* __restrict__ out) {
  using Cc = compute_t<T>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, c = (e / (OW * OH)) % C, n = e / (OW * OH * C);
    const T* plane = x + n * xs0 + c * xs1;
    int64_t h_lo, h_hi, w_lo, w_hi;
    adaptive_span(oh, H, OH, h_lo, h_hi);
    adaptive_span(ow, W, OW, w_lo, w_hi);
    Cc s = 0;
    for (int64_t h = h_lo; h < h_hi; ++h)
      for (int64_t w = w_lo; w < w_hi; ++w) s += load(plane[h * xs2 + w * xs3]);
    out[e] = store<T>(s / Cc((h_hi - h_lo) * (w_hi - w_lo)));
  }
}

// One thread per input (n, c, h, w): gathers dy / (window size) of the outputs whose windows
// contain it, in row-major output order (the CPU scatter's order), so the sum is bit-identical.
// Output row o covers h when floor(o H / OH) <= h < ceil((o + 1) H / OH), that is
// floor(h OH / H) <= o <= ceil((h + 1) OH / H) - 1.
template <class T>
__global__ void adaptive_avg_pool2d_backward_kernel(const T* __restrict__ dy, int64_t ds0, int64_t ds1, int64_t ds2,
                                                    int64_t ds3, int64_t C, int64_t H, int64_t W, int64_t OH,
                                                    int64_t OW, int64_t total, T* __restrict__ dx) {
  using Cc = compute_t<T>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % W, h = (e / W) % H, c = (e / (W * H)) % C, n = e / (W * H * C);
    const T* gp = dy + n * ds0 + c * ds1;
    const int64_t oh_lo = h * OH / H, oh_hi = ((h + 1) * OH + H - 1) / H;  // [lo, hi)
    const int64_t ow_lo = w * OW / W, ow_hi = ((w + 1) * OW + W - 1) / W;
    Cc acc = Cc(0);
    for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
      int64_t h_lo, h_hi;
      adaptive_span(oh, H, OH, h_lo, h_hi);
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
        int64_t w_lo, w_hi;
        adaptive_span(ow, W, OW, w_lo, w_hi);
        acc += Cc(load(gp[oh * ds2 + ow * ds3])) / Cc((h_hi - h_lo) * (w_hi - w_lo));
      }
    }
    dx[e] = store<T>(acc);
  }
}

// One thread per output (n, c, oh, ow), row-major = the contiguous out position: the taps of its
// row and column (Note [Upsample index math]), read and combined as the CPU does.
template <class T>
__global__ void upsample_kernel(const T* __restrict__ x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3, int64_t C,
                                formulas::UpsampleAxis<compute_t<T>> rows, formulas::UpsampleAxis<compute_t<T>> cols,
                                int64_t total, T* __restrict__ out) {
  using Cc = compute_t<T>;
  const int64_t OH = rows.out, OW = cols.out;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, c = (e / (OW * OH)) % C, n = e / (OW * OH * C);
    const T* plane = x + n * xs0 + c * xs1;
    const formulas::UpsampleTaps<Cc> th = formulas::upsample_taps(rows, oh), tw = formulas::upsample_taps(cols, ow);
    const T* r0 = plane + th.i0 * xs2;
    if (!rows.linear) {
      out[e] = store<T>(Cc(load(r0[tw.i0 * xs3])));
      continue;
    }
    const T* r1 = plane + th.i1 * xs2;
    out[e] = store<T>(formulas::bilinear_value(th, tw, Cc(load(r0[tw.i0 * xs3])), Cc(load(r0[tw.i1 * xs3])),
                                               Cc(load(r1[tw.i0 * xs3])), Cc(load(r1[tw.i1 * xs3]))));
  }
}

// One thread per input (n, c, h, w), row-major = the contiguous dx position: gathers the terms of
// the outputs that read it (upsample_readers: a range of rows times a range of columns) in
// row-major output order and, within an output, in the order (i0, i0), (i0, i1), (i1, i0),
// (i1, i1) of its taps: the order in which the CPU's scatter adds them, so the sum is
// bit-identical, with no atomics and no dependence on the schedule.
template <class T>
__global__ void upsample_backward_kernel(const T* __restrict__ dy, int64_t ds0, int64_t ds1, int64_t ds2, int64_t ds3,
                                         int64_t C, formulas::UpsampleAxis<compute_t<T>> rows,
                                         formulas::UpsampleAxis<compute_t<T>> cols, int64_t total, T* __restrict__ dx) {
  using Cc = compute_t<T>;
  const int64_t H = rows.in, W = cols.in;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = e % W, h = (e / W) % H, c = (e / (W * H)) % C, n = e / (W * H * C);
    const T* gp = dy + n * ds0 + c * ds1;
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    formulas::upsample_readers(rows, h, oh_lo, oh_hi);
    formulas::upsample_readers(cols, w, ow_lo, ow_hi);
    Cc acc = Cc(0);
    for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
      const formulas::UpsampleTaps<Cc> th = formulas::upsample_taps(rows, oh);
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
        const Cc g = load(gp[oh * ds2 + ow * ds3]);
        if (!rows.linear) {  // nearest: every output of the ranges read exactly this input
          acc += g;
          continue;
        }
        const formulas::UpsampleTaps<Cc> tw = formulas::upsample_taps(cols, ow);
        const Cc g0 = g * th.w0, g1 = g * th.w1;
        if (th.i0 == h) {
          if (tw.i0 == w) acc += g0 * tw.w0;
          if (tw.i1 == w) acc += g0 * tw.w1;
        }
        if (th.i1 == h) {
          if (tw.i0 == w) acc += g1 * tw.w0;
          if (tw.i1 == w) acc += g1 * tw.w1;
        }
      }
    }
    dx[e] = store<T>(acc);
  }
}

PoolGeom geom(const Strided& x, const Strided& out, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
              int64_t pw, int64_t dh = 1, int64_t dw = 1, bool include_pad = true) {
  return PoolGeom{x.size(0), x.size(1), x.size(2), x.size(3), out.size(2), out.size(3), kh,         kw,
                  sh,        sw,        ph,        pw,        dh,          dw,          include_pad};
}

}  // namespace

void max_pool2d(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w, int64_t dil_h, int64_t dil_w, const Strided& out, const Strided& indices) {
  DeviceGuard guard(x.device().index);
  MT_CHECK(out.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64,
           "max_pool2d: outputs must be contiguous with i64 indices");
  const PoolGeom g = geom(x, out, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w);
  const int64_t total = out.numel();
  if (total == 0) return;
  const Shape& xs = x.strides();
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool2d_kernel<T>
        <<<grid_for(total), kBlock, 0, stream_of(x)>>>(static_cast<const T*>(x.raw_data()), xs[0], xs[1], xs[2], xs[3],
                                                       g, static_cast<T*>(out.raw_data()), indices.data<int64_t>());
    MT_CUDA_CHECK_LAUNCH("max_pool2d_kernel");
  });
}

void max_pool2d_backward(const Strided& dy, const Strided& indices, const Strided& dx) {
  DeviceGuard guard(dy.device().index);
  MT_CHECK(dx.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64,
           "max_pool2d backward: dx and indices must be contiguous, indices i64");
  const int64_t N = dx.size(0), C = dx.size(1), HW = dx.size(2) * dx.size(3), OH = dy.size(2), OW = dy.size(3);
  const int64_t planes = N * C;
  if (planes == 0 || HW == 0) return;
  MT_CHECK(planes <= 2147483647LL, "max_pool2d backward: ", planes, " planes exceed the grid");
  const Shape& ds = dy.strides();
  dispatch_floating(dx.dtype(), "max_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    max_pool2d_backward_kernel<T><<<unsigned(planes), kPlaneBlock, 0, stream_of(dy)>>>(
        static_cast<const T*>(dy.raw_data()), ds[0], ds[1], ds[2], ds[3], indices.data<int64_t>(),
        static_cast<T*>(dx.raw_data()), C, HW, OH, OW);
    MT_CUDA_CHECK_LAUNCH("max_pool2d_backward_kernel");
  });
}

void avg_pool2d(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w, bool count_include_pad, const Strided& out) {
  DeviceGuard guard(x.device().index);
  MT_CHECK(out.is_contiguous(), "avg_pool2d: output must be contiguous");
  const PoolGeom g = geom(x, out, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, 1, 1, count_include_pad);
  const int64_t total = out.numel();
  if (total == 0) return;
  const Shape& xs = x.strides();
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    avg_pool2d_kernel<T><<<grid_for(total), kBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), xs[0], xs[1], xs[2], xs[3], g, static_cast<T*>(out.raw_data()));
    MT_CUDA_CHECK_LAUNCH("avg_pool2d_kernel");
  });
}

void avg_pool2d_backward(const Strided& dy, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w, bool count_include_pad, const Strided& dx) {
  DeviceGuard guard(dy.device().index);
  MT_CHECK(dx.is_contiguous(), "avg_pool2d backward: dx must be contiguous");
  const PoolGeom g = geom(dx, dy, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, 1, 1, count_include_pad);
  const int64_t total = dx.numel();
  if (total == 0) return;
  const Shape& ds = dy.strides();
  dispatch_floating(dx.dtype(), "avg_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    avg_pool2d_backward_kernel<T><<<grid_for(total), kBlock, 0, stream_of(dy)>>>(
        static_cast<const T*>(dy.raw_data()), ds[0], ds[1], ds[2], ds[3], g, static_cast<T*>(dx.raw_data()));
    MT_CUDA_CHECK_LAUNCH("avg_pool2d_backward_kernel");
  });
}

void adaptive_avg_pool2d(const Strided& x, const Strided& out) {
  DeviceGuard guard(x.device().index);
  MT_CHECK(out.is_contiguous(), "adaptive_avg_pool2d: output must be contiguous");
  const int64_t total = out.numel();
  if (total == 0) return;
  const Shape& xs = x.strides();
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_pool2d_kernel<T><<<grid_for(total), kBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), xs[0], xs[1], xs[2], xs[3], x.size(1), x.size(2), x.size(3), out.size(2),
        out.size(3), total, static_cast<T*>(out.raw_data()));
    MT_CUDA_CHECK_LAUNCH("adaptive_avg_pool2d_kernel");
  });
}

void adaptive_avg_pool2d_backward(const Strided& dy, const Strided& dx) {
  DeviceGuard guard(dy.device().index);
  MT_CHECK(dx.is_contiguous(), "adaptive_avg_pool2d backward: dx must be contiguous");
  const int64_t total = dx.numel();
  if (total == 0) return;
  const Shape& ds = dy.strides();
  dispatch_floating(dx.dtype(), "adaptive_avg_pool2d backward", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_pool2d_backward_kernel<T><<<grid_for(total), kBlock, 0, stream_of(dy)>>>(
        static_cast<const T*>(dy.raw_data()), ds[0], ds[1], ds[2], ds[3], dx.size(1), dx.size(2), dx.size(3),
        dy.size(2), dy.size(3), total, static_cast<T*>(dx.raw_data()));
    MT_CUDA_CHECK_LAUNCH("adaptive_avg_pool2d_backward_kernel");
  });
}

void upsample(const Strided& x, UpsampleMode mode, bool align_corners, double scale_h, double scale_w,
              const Strided& out) {
  DeviceGuard guard(x.device().index);
  MT_CHECK(out.is_contiguous(), "upsample: output must be contiguous");
  const int64_t total = out.numel();
  if (total == 0) return;
  const Shape& xs = x.strides();
  dispatch_floating(x.dtype(), "upsample", [&](auto tag) {
    using T = decltype(tag);
    using Cc = compute_t<T>;
    const auto rows = formulas::upsample_axis<Cc>(x.size(2), out.size(2), mode, align_corners, scale_h);
    const auto cols = formulas::upsample_axis<Cc>(x.size(3), out.size(3), mode, align_corners, scale_w);
    upsample_kernel<T><<<grid_for(total), kBlock, 0, stream_of(x)>>>(static_cast<const T*>(x.raw_data()), xs[0], xs[1],
                                                                     xs[2], xs[3], x.size(1), rows, cols, total,
                                                                     static_cast<T*>(out.raw_data()));
    MT_CUDA_CHECK_LAUNCH("upsample_kernel");
  });
}

void upsample_backward(const Strided& dy, UpsampleMode mode, bool align_corners, double scale_h, double scale_w,
                       const Strided& dx) {
  DeviceGuard guard(dy.device().index);
  MT_CHECK(dx.is_contiguous(), "upsample backward: dx must be contiguous");
  const int64_t total = dx.numel();
  if (total == 0) return;
  const Shape& ds = dy.strides();
  dispatch_floating(dx.dtype(), "upsample backward", [&](auto tag) {
    using T = decltype(tag);
    using Cc = compute_t<T>;
    const auto rows = formulas::upsample_axis<Cc>(dx.size(2), dy.size(2), mode, align_corners, scale_h);
    const auto cols = formulas::upsample_axis<Cc>(dx.size(3), dy.size(3), mode, align_corners, scale_w);
    upsample_backward_kernel<T><<<grid_for(total), kBlock, 0, stream_of(dy)>>>(
        static_cast<const T*>(dy.raw_data()), ds[0], ds[1], ds[2], ds[3], dx.size(1), rows, cols, total,
        static_cast<T*>(dx.raw_data()));
    MT_CUDA_CHECK_LAUNCH("upsample_backward_kernel");
  });
}

}  // namespace mixtape::cuda
