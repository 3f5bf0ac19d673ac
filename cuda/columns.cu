// The pixel-major column matrix as ops of their own on the GPU (tensor/ops/conv.h im2col and
// col2im; the CPU's kernels and Note [Pixel-major columns] are in tensor/cpu/im2col.cpp), which the
// 8-bit convolutions read (Note [8-bit convolutions] in autograd/functions/conv.cpp):
//   im2col  cols[p, k] = x[n, c, oh sh - ph + kh dh, ow sw - pw + kw dw] (0 in the padding), one
//           thread an entry: a copy of the bits, so one kernel per element size serves every
//           dtype, 8-bit codes included
//   col2im  x[n, c, ih, iw] = the sum of the entries im2col reads it into: one thread a pixel, its
//           taps (kh, kw) ascending added to 0 in fp32 and rounded once, the CPU's order (each pixel
//           gets at most one entry a tap), so the same bits and no atomics
#include <cstdint>

#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

struct ColGeom {
  int64_t N, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW;
};

ColGeom col_geom(const Shape& x, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                 int64_t dw, int64_t oh, int64_t ow) {
  return {x[0], x[1], x[2], x[3], kh, kw, sh, sw, ph, pw, dh, dw, oh, ow};
}

// E: an unsigned integer of the element's size (the entries are copied, never computed).
template <class E>
__global__ void im2col_kernel(const E* x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3, ColGeom g, E* cols) {
  const int64_t K = g.C * g.KH * g.KW, total = g.N * g.OH * g.OW * K;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e / K, k = e % K;
    const int64_t ow = p % g.OW, oh = p / g.OW % g.OH, n = p / (g.OW * g.OH);
    const int64_t kw = k % g.KW, kh = k / g.KW % g.KH, c = k / (g.KW * g.KH);
    const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
    cols[e] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? x[n * xs0 + c * xs1 + ih * xs2 + iw * xs3] : E(0);
  }
}

template <class T>
__global__ void col2im_kernel(const T* cols, int64_t rs, int64_t cs, ColGeom g, T* x) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % g.W, ih = e / g.W % g.H, c = e / (g.W * g.H) % g.C, n = e / (g.W * g.H * g.C);
    float acc = 0.0f;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t oh_s = ih + g.ph - kh * g.dh;  // oh * sh
      if (oh_s < 0 || oh_s % g.sh != 0 || oh_s / g.sh >= g.OH) continue;
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t ow_s = iw + g.pw - kw * g.dw;
        if (ow_s < 0 || ow_s % g.sw != 0 || ow_s / g.sw >= g.OW) continue;
        const int64_t p = (n * g.OH + oh_s / g.sh) * g.OW + ow_s / g.sw, k = (c * g.KH + kh) * g.KW + kw;
        acc = add_rn(acc, load(cols[p * rs + k * cs]));
      }
    }
    x[e] = store<T>(acc);
  }
}

}  // namespace

void im2col(const Strided& x, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t out_h, int64_t out_w, const Strided& cols) {
  const ColGeom g =
      col_geom(x.shape(), kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, out_h, out_w);
  const int64_t n = cols.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device().index);
  const Shape& s = x.strides();
  const auto launch = [&]<class E>() {
    im2col_kernel<E><<<grid_for(n), kBlock, 0, stream_of(x)>>>(static_cast<const E*>(x.raw_data()), s[0], s[1], s[2],
                                                               s[3], g, static_cast<E*>(cols.raw_data()));
    MT_CUDA_CHECK_LAUNCH("im2col_kernel");
  };
  switch (dtype_size(x.dtype())) {
    case 1: return launch.template operator()<uint8_t>();
    case 2: return launch.template operator()<uint16_t>();
    case 4: return launch.template operator()<uint32_t>();
    default: throw Error(detail::cat("im2col: the CUDA backend has no kernel for ", dtype_name(x.dtype())));
  }
}

void col2im(const Strided& cols, int64_t kernel_h, int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
            int64_t pad_w, int64_t dil_h, int64_t dil_w, int64_t out_h, int64_t out_w, const Strided& x) {
  const ColGeom g =
      col_geom(x.shape(), kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, out_h, out_w);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device().index);
  dispatch_floating(x.dtype(), "col2im", [&](auto t) {
    using T = decltype(t);
    col2im_kernel<T><<<grid_for(n), kBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(cols.raw_data()), cols.strides()[0], cols.strides()[1], g, static_cast<T*>(x.raw_data()));
    MT_CUDA_CHECK_LAUNCH("col2im_kernel");
  });
}

}  // namespace mixtape::cuda
