// Layer norm and group norm on the GPU, forward and backward side by side. Each launcher mirrors
// the CPU kernel of the same name in tensor/cpu/norm.cpp (the readable truth): x and dy are
// contiguous, seen as [N, C, L] with the C channels in G groups of K = C / G, and each (n, g) is
// a group of M = K * L consecutive elements. The front-end (tensor/ops/norm.cpp) has validated
// the arguments and allocated the outputs.
//
// Note [Norm on the GPU]
// One block per group for the statistics and dx, one block per channel for dweight and dbias.
// As for batch norm (Note [Batch norm on the GPU] in cuda/batch_norm.cu), the sums are in double
// and differ from the CPU's only in their order; everything per element is the CPU's fp32
// expression with each operation rounded on its own (*_rn), so the results are almost always
// the CPU's bits. One block per group leaves the GPU underused for a few large groups (a layer
// norm over a few long rows); a split reduction would fix that at the price of a second launch.
#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

inline constexpr int kNormBlock = 256;  // threads per block (a multiple of 32)

__device__ __forceinline__ float param_or(const ChanVec& v, int64_t c, float none) {
  return v.p ? __double2float_rn(chan_read(v, c)) : none;
}

// Block ng = n * G + g normalizes the group's M elements at ng * M.
template <class T>
__global__ void group_norm_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t G, int64_t K, int64_t L,
                                          ChanVec w, ChanVec b, double eps, float* __restrict__ mean,
                                          float* __restrict__ invstd) {
  __shared__ double scratch[32];
  const int64_t ng = blockIdx.x, g = ng % G, M = K * L;
  const T* xg = x + ng * M;
  T* yg = y + ng * M;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += double(load(xg[j]));
  const double m = block_sum(s, scratch) / double(M);
  double q = 0.0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const double d = double(load(xg[j])) - m;
    q = __dadd_rn(q, __dmul_rn(d, d));
  }
  const double var = block_sum(q, scratch) / double(M);
  const float mc = __double2float_rn(m), ic = __double2float_rn(1.0 / __dsqrt_rn(var + eps));
  if (threadIdx.x == 0) {
    mean[ng] = mc;
    invstd[ng] = ic;
  }
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const int64_t c = g * K + j / L;
    const float xv = load(xg[j]);
    yg[j] = store<T>(add_rn(mul_rn(mul_rn(sub_rn(xv, mc), ic), param_or(w, c, 1.0f)), param_or(b, c, 0.0f)));
  }
}

// Block ng: dx = invstd * (g - mean(g) - xhat * mean(g * xhat)) over the group, g = dy * w.
template <class T>
__global__ void group_norm_backward_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                              int64_t G, int64_t K, int64_t L, ChanVec w,
                                              const float* __restrict__ mean, const float* __restrict__ invstd) {
  __shared__ double scratch[32];
  const int64_t ng = blockIdx.x, g = ng % G, M = K * L, base = ng * M;
  const float mc = mean[ng], ic = invstd[ng];
  double sg = 0.0, sgx = 0.0;
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const double gl = __dmul_rn(double(load(dy[base + j])), double(param_or(w, g * K + j / L, 1.0f)));
    const float xh = mul_rn(sub_rn(float(load(x[base + j])), mc), ic);
    sg += gl;
    sgx = __dadd_rn(sgx, __dmul_rn(gl, double(xh)));
  }
  sg = block_sum(sg, scratch);
  sgx = block_sum(sgx, scratch);
  const float mg = __double2float_rn(sg / double(M)), mgx = __double2float_rn(sgx / double(M));
  for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
    const float xh = mul_rn(sub_rn(float(load(x[base + j])), mc), ic);
    const float gl = mul_rn(float(load(dy[base + j])), param_or(w, g * K + j / L, 1.0f));
    dx[base + j] = store<T>(mul_rn(ic, sub_rn(sub_rn(gl, mg), mul_rn(xh, mgx))));
  }
}

// Block c: dweight[c] = sum(dy * xhat), dbias[c] = sum(dy) over the rows and inner positions.
template <class T>
__global__ void group_norm_backward_params_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t rows,
                                                  int64_t C, int64_t G, int64_t L, const float* __restrict__ mean,
                                                  const float* __restrict__ invstd, ChanVec dweight, ChanVec dbias) {
  __shared__ double scratch[32];
  const int64_t c = blockIdx.x, K = C / G;
  double sdy = 0.0, sdyx = 0.0;
  for (int64_t p = threadIdx.x; p < rows * L; p += blockDim.x) {
    const int64_t n = p / L, l = p % L, o = (n * C + c) * L + l, ng = n * G + c / K;
    const double gl = double(load(dy[o]));
    const float xh = mul_rn(sub_rn(float(load(x[o])), mean[ng]), invstd[ng]);
    sdy += gl;
    sdyx = __dadd_rn(sdyx, __dmul_rn(gl, double(xh)));
  }
  sdy = block_sum(sdy, scratch);
  sdyx = block_sum(sdyx, scratch);
  if (threadIdx.x != 0) return;
  if (dweight.p) chan_write(dweight, c, sdyx);
  if (dbias.p) chan_write(dbias, c, sdy);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void group_norm_forward(const Strided& x, int64_t channels, int64_t inner, int64_t groups, const Strided& weight,
                        const Strided& bias, double eps, const Strided& y, const Strided& mean, const Strided& invstd) {
  DeviceGuard guard(x.device().index);
  const int64_t blocks = x.numel() / (channels * inner) * groups;
  if (blocks == 0) return;
  MT_CHECK(x.is_contiguous() && y.is_contiguous() && mean.is_contiguous() && invstd.is_contiguous(),
           "group_norm: operands must be contiguous");
  const char* op = "group_norm";
  const ChanVec w = chan_vec(weight, op), b = chan_vec(bias, op);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    group_norm_forward_kernel<T><<<unsigned(blocks), kNormBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), groups, channels / groups, inner, w, b, eps,
        mean.data<float>(), invstd.data<float>());
    MT_CUDA_CHECK_LAUNCH("group_norm_forward_kernel");
  });
}

void group_norm_backward(const Strided& dy, const Strided& x, int64_t channels, int64_t inner, int64_t groups,
                         const Strided& weight, const Strided& mean, const Strided& invstd, const Strided& dx,
                         const Strided& dweight, const Strided& dbias) {
  DeviceGuard guard(x.device().index);
  const int64_t rows = x.numel() / (channels * inner);
  if (rows == 0) return;
  MT_CHECK(x.is_contiguous() && dy.is_contiguous() && (!dx.defined() || dx.is_contiguous()),
           "group_norm backward: operands must be contiguous");
  const char* op = "group_norm backward";
  const ChanVec w = chan_vec(weight, op), dwv = chan_vec(dweight, op), dbv = chan_vec(dbias, op);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pdy = static_cast<const T*>(dy.raw_data());
    if (dx.defined()) {
      group_norm_backward_dx_kernel<T><<<unsigned(rows * groups), kNormBlock, 0, stream_of(x)>>>(
          pdy, px, static_cast<T*>(dx.raw_data()), groups, channels / groups, inner, w, mean.data<float>(),
          invstd.data<float>());
      MT_CUDA_CHECK_LAUNCH("group_norm_backward_dx_kernel");
    }
    if (dwv.p || dbv.p) {
      group_norm_backward_params_kernel<T><<<unsigned(channels), kNormBlock, 0, stream_of(x)>>>(
          pdy, px, rows, channels, groups, inner, mean.data<float>(), invstd.data<float>(), dwv, dbv);
      MT_CUDA_CHECK_LAUNCH("group_norm_backward_params_kernel");
    }
  });
}

}  // namespace mixtape::cuda
