// Batch norm on the GPU, forward and backward side by side. Each launcher mirrors the CPU kernel
// of the same name in tensor/cpu/batch_norm.cpp (the readable truth); the front-end in
// tensor/ops/batch_norm.cpp has validated shapes and dtypes and allocated the outputs.
//
// Note [Batch norm on the GPU]
// One block per channel. The statistics follow the CPU scheme: two passes in double (the mean,
// then the squared deviations about it), so the only difference from the CPU is the order of a
// double sum; rounded to fp32 the mean and invstd almost always come out bit for bit as on the
// CPU, and the per-element normalisation y = (x - mean) * invstd * w + b is the CPU's fp32
// expression with every operation rounded on its own (no FMA contraction: *_rn intrinsics).
// The per-channel vectors (weight, bias, running statistics, dweight, dbias) may have any
// floating dtype and stride, as on the CPU: they are read as double and written from double
// with the CPU's store<T>(double) rounding (one rounding, through round-to-odd for 16 bits).
// One block per channel leaves most of the GPU idle when C is small and N*H*W large; a split
// reduction would fix that, at the price of a second launch.
#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

// ---- arithmetic without FMA contraction (CPU expression order, each op rounded) -------------

// A double rounded to the compute type A (the CPU's A(double)).
template <class A>
__device__ __forceinline__ A from_double(double v);
template <>
__device__ __forceinline__ float from_double<float>(double v) {
  return __double2float_rn(v);
}

// The positions of a tensor seen as channels (dim 1) x positions (every other dim), as in the
// CPU's channel_view: the positions' shape, one stride vector per operand, and each operand's
// channel stride.
Shape pos_shape_of(const Strided& t) {
  Shape s;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != 1) s.push_back(t.shape()[size_t(d)]);
  return s;
}
Shape pos_strides_of(const Strided& t) {
  Shape s;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (d != 1) s.push_back(t.strides()[size_t(d)]);
  return s;
}

inline constexpr int kBnBlock = 256;  // threads per channel block (a multiple of 32)

// One block per channel c = blockIdx.x; blockDim.x == kBnBlock. pos maps a position index
// (row-major over the positions' shape, n of them) to offsets in x and y.
template <class T>
__global__ void batch_norm_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t x_cs, int64_t y_cs,
                                          OffsetCalculator<2> pos, int64_t n, ChanVec w, ChanVec b, ChanVec rm,
                                          ChanVec rv, bool training, double momentum, const int64_t* count, double eps,
                                          compute_t<T>* mean, compute_t<T>* invstd) {
  using A = compute_t<T>;
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x;
  const T* xc = x + c * x_cs;
  T* yc = y + c * y_cs;
  int64_t o[2];
  double m, var;
  if (training) {  // block-uniform: every thread reaches both block_sum calls
    double s = 0.0;
    for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
      pos.offsets(p, o);
      s += double(load(xc[o[0]]));
    }
    m = block_sum(s, scratch) / double(n);  // the same value in every thread
    double q = 0.0;
    for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
      pos.offsets(p, o);
      const double d = double(load(xc[o[0]])) - m;
      q = __dadd_rn(q, __dmul_rn(d, d));
    }
    var = block_sum(q, scratch) / double(n);
    if (threadIdx.x == 0 && rm.p) {
      // Running variance tracks the unbiased estimate (PyTorch semantics); n > 1 was checked.
      // A counter makes it the cumulative average (momentum = None): momentum = 1 / count.
      if (count) momentum = 1.0 / double(*count < 1 ? int64_t(1) : *count);
      const double keep = 1.0 - momentum;
      chan_write(rm, c, __dadd_rn(__dmul_rn(keep, chan_read(rm, c)), __dmul_rn(momentum, m)));
      const double unbiased = __dmul_rn(__dmul_rn(momentum, var), double(n)) / double(n - 1);
      chan_write(rv, c, __dadd_rn(__dmul_rn(keep, chan_read(rv, c)), unbiased));
    }
  } else {
    m = chan_read(rm, c);
    var = chan_read(rv, c);
  }
  const A mc = from_double<A>(m);
  const A ic = from_double<A>(1.0 / __dsqrt_rn(var + eps));
  if (threadIdx.x == 0) {
    mean[c] = mc;
    invstd[c] = ic;
  }
  const A wc = w.p ? from_double<A>(chan_read(w, c)) : A(1);
  const A bc = b.p ? from_double<A>(chan_read(b, c)) : A(0);
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
    pos.offsets(p, o);
    const A xv = load(xc[o[0]]);
    yc[o[1]] = store<T>(add_rn(mul_rn(mul_rn(sub_rn(xv, mc), ic), wc), bc));
  }
}

// One block per channel; pos maps a position index to offsets in x, dy and dx (dx undefined:
// dy's strides, never written). The sums run when `sums` (training, or dweight/dbias wanted).
template <class T>
__global__ void batch_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                           int64_t x_cs, int64_t dy_cs, int64_t dx_cs, OffsetCalculator<3> pos,
                                           int64_t n, ChanVec w, const compute_t<T>* mean, int64_t mean_stride,
                                           const compute_t<T>* invstd, int64_t invstd_stride, bool training, bool sums,
                                           ChanVec dweight, ChanVec dbias) {
  using A = compute_t<T>;
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x;
  const T* xc = x + c * x_cs;
  const T* dyc = dy + c * dy_cs;
  const A mc = mean[c * mean_stride], ic = invstd[c * invstd_stride];
  const A wc = w.p ? from_double<A>(chan_read(w, c)) : A(1);
  int64_t o[3];
  // sum(dy) and sum(dy * xhat) over the positions of channel c, in double.
  double sdy = 0.0, sdyxh = 0.0;
  if (sums) {  // block-uniform
    for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
      pos.offsets(p, o);
      const double g = double(load(dyc[o[1]]));
      const A xh = mul_rn(sub_rn(A(load(xc[o[0]])), mc), ic);
      sdy += g;
      sdyxh = __dadd_rn(sdyxh, __dmul_rn(g, double(xh)));
    }
    sdy = block_sum(sdy, scratch);
    sdyxh = block_sum(sdyxh, scratch);
  }
  if (threadIdx.x == 0) {
    if (dweight.p) chan_write(dweight, c, sdyxh);
    if (dbias.p) chan_write(dbias, c, sdy);
  }
  if (!dx) return;
  T* dxc = dx + c * dx_cs;
  const A k = mul_rn(wc, ic);
  if (training) {
    // dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)): the mean and var paths.
    const A mdy = from_double<A>(sdy / double(n)), mdyxh = from_double<A>(sdyxh / double(n));
    for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
      pos.offsets(p, o);
      const A xh = mul_rn(sub_rn(A(load(xc[o[0]])), mc), ic);
      const A t = sub_rn(sub_rn(A(load(dyc[o[1]])), mdy), mul_rn(xh, mdyxh));
      dxc[o[2]] = store<T>(mul_rn(k, t));
    }
  } else {
    for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
      pos.offsets(p, o);
      dxc[o[2]] = store<T>(mul_rn(A(load(dyc[o[1]])), k));
    }
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void batch_norm_forward(const Strided& x, const Strided& weight, const Strided& bias, const Strided& running_mean,
                        const Strided& running_var, bool training, double momentum, double eps, const Strided& count,
                        const Strided& y, const Strided& mean, const Strided& invstd) {
  DeviceGuard guard(x.device().index);
  const int64_t C = x.size(1);
  if (C == 0) return;
  const Shape ps = pos_shape_of(x);
  const int64_t n = numel_of(ps);
  const OffsetCalculator<2> pos = make_offset_calculator<2>(ps, {pos_strides_of(x), pos_strides_of(y)});
  const char* op = "batch_norm";
  const ChanVec w = chan_vec(weight, op), b = chan_vec(bias, op);
  const ChanVec rm = chan_vec(running_mean, op), rv = chan_vec(running_var, op);
  MT_CHECK(mean.is_contiguous() && invstd.is_contiguous(), "batch_norm: statistics outputs must be contiguous");
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    batch_norm_forward_kernel<T><<<unsigned(C), kBnBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), x.strides()[1], y.strides()[1], pos, n, w,
        b, rm, rv, training, momentum, count.defined() ? static_cast<const int64_t*>(count.raw_data()) : nullptr, eps,
        static_cast<A*>(mean.raw_data()), static_cast<A*>(invstd.raw_data()));
    MT_CUDA_CHECK_LAUNCH("batch_norm_forward_kernel");
  });
}

void batch_norm_backward(const Strided& dy, const Strided& x, const Strided& weight, const Strided& mean,
                         const Strided& invstd, bool training, const Strided& dx, const Strided& dweight,
                         const Strided& dbias) {
  DeviceGuard guard(x.device().index);
  const int64_t C = x.size(1);
  if (C == 0) return;
  const Shape ps = pos_shape_of(x);
  const int64_t n = numel_of(ps);
  const Strided& dxl = dx.defined() ? dx : dy;  // layout only when dx is not wanted
  const OffsetCalculator<3> pos =
      make_offset_calculator<3>(ps, {pos_strides_of(x), pos_strides_of(dy), pos_strides_of(dxl)});
  const char* op = "batch_norm backward";
  const ChanVec w = chan_vec(weight, op), dwv = chan_vec(dweight, op), dbv = chan_vec(dbias, op);
  const bool sums = training || dweight.defined() || dbias.defined();
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    T* pdx = dx.defined() ? static_cast<T*>(dx.raw_data()) : nullptr;
    batch_norm_backward_kernel<T><<<unsigned(C), kBnBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(dy.raw_data()), static_cast<const T*>(x.raw_data()), pdx, x.strides()[1], dy.strides()[1],
        dxl.strides()[1], pos, n, w, static_cast<const A*>(mean.raw_data()), mean.strides()[0],
        static_cast<const A*>(invstd.raw_data()), invstd.strides()[0], training, sums, dwv, dbv);
    MT_CUDA_CHECK_LAUNCH("batch_norm_backward_kernel");
  });
}

}  // namespace mixtape::cuda
