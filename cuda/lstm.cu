// LSTM and GRU cells on the GPU, forward and backward side by side; mirrors tensor/cpu/lstm.cpp
// (Note [LSTM cell backward] there: the backward recomputes the activations from gates and
// c_prev, or reads the ones the forward saved in `acts` [B, 5H], i | f | g | o | tanh(c), compute
// type; Note [GRU cell backward]: recomputed from gx, gh and h_prev). Shapes: LSTM gates [B, 4H]
// (chunks i, f, g, o), GRU gx and gh [B, 3H] (chunks r, z, n), everything else [B, H]; inputs
// any strides. One thread per (b, j); the GRU kernels follow the LSTM's numerics (the Note below).
//
// Note [LSTM cell numerics on the GPU]
// The arithmetic is the CPU's fp32 expression tree with each + - * / rounded on its own (the
// *_rn intrinsics keep nvcc from contracting a*b + c into an FMA, which the CPU does not do), so
// the only possible differences are in the transcendentals:
//   sigmoid(x) = 1 / (1 + exp(-x)): the CPU calls glibc's expf (error <= 0.502 ulp); here exp
//     is evaluated in double and rounded to float, the correctly rounded value. The two agree
//     except where glibc's result is the other neighbour of a near-tie: rare, and then 1 ulp.
//   tanh: the CPU's tanh_f32 (tensor/cpu/math.h, Note [Float tanh]) evaluates in double and
//     rounds once; tanh_f32_device is the same double expression. Only the double exp may
//     differ (CUDA's is within 1 ulp of double, glibc's within 0.52), which survives the
//     rounding to float only for values within ~2^-29 ulp of a float midpoint.
// In f64 (gradient checks) std::exp / std::tanh against CUDA's exp / tanh may differ by an ulp
// of double. The tests compare with a tight tolerance and require most elements bit-identical.
#include <cmath>

#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

// The CPU's tanh_f32 (Note [Float tanh]), operation for operation in double.
__device__ __forceinline__ float tanh_f32_device(float x) {
  const double d = x, a = fabs(d);
  if (a < 0x1p-10) {
    const double d2 = __dmul_rn(d, d);
    return __double2float_rn(
        __dmul_rn(d, __dsub_rn(1.0, __dmul_rn(d2, __dsub_rn(1.0 / 3.0, __dmul_rn(d2, 2.0 / 15.0))))));
  }
  const double e = exp(-2.0 * a);  // -2a is exact
  return __double2float_rn(copysign(__ddiv_rn(__dsub_rn(1.0, e), __dadd_rn(1.0, e)), d));
}

__device__ __forceinline__ float tanh_c(float x) { return tanh_f32_device(x); }

// exp rounded to the compute type (float: through double, see the Note).
__device__ __forceinline__ float exp_c(float x) { return __double2float_rn(exp(double(x))); }

template <class C>
__device__ __forceinline__ C sigmoid(C x) {
  return div_rn(C(1), add_rn(C(1), exp_c(-x)));
}

// Element (b, j) of a 2-D tensor through its strides.
template <class T>
struct Strided2d {
  T* p;
  int64_t s0, s1;
  __device__ __forceinline__ T& operator()(int64_t b, int64_t j) const { return p[b * s0 + j * s1]; }
};

template <class T>
Strided2d<T> strided(const Strided& t) {
  return Strided2d<T>{static_cast<T*>(t.raw_data()), t.strides()[0], t.strides()[1]};
}

// The gate activations of one (b, j), computed in C.
template <class T, class C = compute_t<T>>
struct Gates {
  C i, f, g, o;
  __device__ __forceinline__ Gates(const Strided2d<const T>& gates, int64_t b, int64_t j, int64_t H)
      : i(sigmoid(C(load(gates(b, j))))),
        f(sigmoid(C(load(gates(b, H + j))))),
        g(tanh_c(C(load(gates(b, 2 * H + j))))),
        o(sigmoid(C(load(gates(b, 3 * H + j))))) {}
};

// One thread per (b, j), row-major over [B, H]. acts: nullptr, or [B, 5H] contiguous.
template <class T>
__global__ void lstm_cell_kernel(Strided2d<const T> gates, Strided2d<const T> c_prev, Strided2d<T> c, Strided2d<T> h,
                                 compute_t<T>* acts, int64_t B, int64_t H) {
  using C = compute_t<T>;
  const int64_t total = B * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const Gates<T> a(gates, b, j, H);
    const C cv = add_rn(mul_rn(a.f, C(load(c_prev(b, j)))), mul_rn(a.i, a.g));
    const C tc = tanh_c(cv);  // from the unrounded c
    c(b, j) = store<T>(cv);
    h(b, j) = store<T>(mul_rn(a.o, tc));
    if (acts) {
      C* s = acts + b * 5 * H + j;
      s[0] = a.i;
      s[H] = a.f;
      s[2 * H] = a.g;
      s[3 * H] = a.o;
      s[4 * H] = tc;
    }
  }
}

// The gradients of one (b, j) from its activations: the CPU's expressions, each rounded alone.
template <class T, class C = compute_t<T>>
__device__ __forceinline__ void cell_grads(C i, C f, C g, C o, C tc, C cp, C gc, C gh, Strided2d<T> d_gates,
                                           Strided2d<T> d_c_prev, int64_t b, int64_t j, int64_t H) {
  const C one = C(1);
  const C dc_tot = add_rn(gc, mul_rn(gh, mul_rn(o, sub_rn(one, mul_rn(tc, tc)))));
  d_gates(b, j) = store<T>(mul_rn(dc_tot, mul_rn(g, mul_rn(i, sub_rn(one, i)))));
  d_gates(b, H + j) = store<T>(mul_rn(dc_tot, mul_rn(cp, mul_rn(f, sub_rn(one, f)))));
  d_gates(b, 2 * H + j) = store<T>(mul_rn(dc_tot, mul_rn(i, sub_rn(one, mul_rn(g, g)))));
  d_gates(b, 3 * H + j) = store<T>(mul_rn(gh, mul_rn(tc, mul_rn(o, sub_rn(one, o)))));
  d_c_prev(b, j) = store<T>(mul_rn(dc_tot, f));
}

template <class T>
__global__ void lstm_cell_backward_kernel(Strided2d<const T> gates, Strided2d<const T> c_prev, Strided2d<const T> dc,
                                          Strided2d<const T> dh, Strided2d<T> d_gates, Strided2d<T> d_c_prev, int64_t B,
                                          int64_t H) {
  using C = compute_t<T>;
  const int64_t total = B * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const Gates<T> a(gates, b, j, H);
    const C cp = load(c_prev(b, j));
    const C tc = tanh_c(add_rn(mul_rn(a.f, cp), mul_rn(a.i, a.g)));
    cell_grads<T>(a.i, a.f, a.g, a.o, tc, cp, C(load(dc(b, j))), C(load(dh(b, j))), d_gates, d_c_prev, b, j, H);
  }
}

template <class T>
__global__ void lstm_cell_backward_saved_kernel(const compute_t<T>* acts, Strided2d<const T> c_prev,
                                                Strided2d<const T> dc, Strided2d<const T> dh, Strided2d<T> d_gates,
                                                Strided2d<T> d_c_prev, int64_t B, int64_t H) {
  using C = compute_t<T>;
  const int64_t total = B * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const C* s = acts + b * 5 * H + j;
    cell_grads<T>(s[0], s[H], s[2 * H], s[3 * H], s[4 * H], C(load(c_prev(b, j))), C(load(dc(b, j))), C(load(dh(b, j))),
                  d_gates, d_c_prev, b, j, H);
  }
}

// The GRU activations of one (b, j) and h' = n + z * (h_prev - n): the CPU's GruGates.
template <class T, class C = compute_t<T>>
struct GruGates {
  C r, z, gh_n, n;
  __device__ __forceinline__ GruGates(const Strided2d<const T>& gx, const Strided2d<const T>& gh, int64_t b, int64_t j,
                                      int64_t H)
      : r(sigmoid(add_rn(C(load(gx(b, j))), C(load(gh(b, j)))))),
        z(sigmoid(add_rn(C(load(gx(b, H + j))), C(load(gh(b, H + j)))))),
        gh_n(load(gh(b, 2 * H + j))),
        n(tanh_c(add_rn(C(load(gx(b, 2 * H + j))), mul_rn(r, gh_n)))) {}
  __device__ __forceinline__ C h(C hp) const { return add_rn(n, mul_rn(z, sub_rn(hp, n))); }
};

template <class T>
__global__ void gru_cell_kernel(Strided2d<const T> gx, Strided2d<const T> gh, Strided2d<const T> h_prev, Strided2d<T> h,
                                int64_t B, int64_t H) {
  using C = compute_t<T>;
  const int64_t total = B * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    h(b, j) = store<T>(GruGates<T>(gx, gh, b, j, H).h(C(load(h_prev(b, j)))));
  }
}

// Note [GRU cell backward]'s expressions in the CPU's order, each operation rounded alone.
template <class T>
__global__ void gru_cell_backward_kernel(Strided2d<const T> gx, Strided2d<const T> gh, Strided2d<const T> h_prev,
                                         Strided2d<const T> dh, Strided2d<T> d_gx, Strided2d<T> d_gh,
                                         Strided2d<T> d_h_prev, int64_t B, int64_t H) {
  using C = compute_t<T>;
  const C one = C(1);
  const int64_t total = B * H;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / H, j = e - b * H;
    const GruGates<T> a(gx, gh, b, j, H);
    const C gd = load(dh(b, j)), hp = load(h_prev(b, j));
    const C dn_pre = mul_rn(mul_rn(gd, sub_rn(one, a.z)), sub_rn(one, mul_rn(a.n, a.n)));
    const C dz_pre = mul_rn(mul_rn(gd, sub_rn(hp, a.n)), mul_rn(a.z, sub_rn(one, a.z)));
    const C dr_pre = mul_rn(mul_rn(dn_pre, a.gh_n), mul_rn(a.r, sub_rn(one, a.r)));
    d_gx(b, j) = d_gh(b, j) = store<T>(dr_pre);
    d_gx(b, H + j) = d_gh(b, H + j) = store<T>(dz_pre);
    d_gx(b, 2 * H + j) = store<T>(dn_pre);
    d_gh(b, 2 * H + j) = store<T>(mul_rn(dn_pre, a.r));
    d_h_prev(b, j) = store<T>(mul_rn(gd, a.z));
  }
}

}  // namespace

void lstm_cell(const Strided& gates, const Strided& c_prev, const Strided& c, const Strided& h, const Strided& acts) {
  DeviceGuard guard(gates.device().index);
  const int64_t B = c_prev.size(0), H = c_prev.size(1);
  if (B * H == 0) return;
  dispatch_floating(c.dtype(), "lstm_cell", [&](auto tag) {
    using T = decltype(tag);
    compute_t<T>* const pa = acts.defined() ? static_cast<compute_t<T>*>(acts.raw_data()) : nullptr;
    lstm_cell_kernel<T><<<grid_for(B * H), kBlock, 0, stream_of(gates)>>>(
        strided<const T>(gates), strided<const T>(c_prev), strided<T>(c), strided<T>(h), pa, B, H);
    MT_CUDA_CHECK_LAUNCH("lstm_cell_kernel");
  });
}

void lstm_cell_backward(const Strided& gates, const Strided& c_prev, const Strided& dc, const Strided& dh,
                        const Strided& d_gates, const Strided& d_c_prev) {
  DeviceGuard guard(gates.device().index);
  const int64_t B = c_prev.size(0), H = c_prev.size(1);
  if (B * H == 0) return;
  dispatch_floating(d_gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    lstm_cell_backward_kernel<T><<<grid_for(B * H), kBlock, 0, stream_of(gates)>>>(
        strided<const T>(gates), strided<const T>(c_prev), strided<const T>(dc), strided<const T>(dh),
        strided<T>(d_gates), strided<T>(d_c_prev), B, H);
    MT_CUDA_CHECK_LAUNCH("lstm_cell_backward_kernel");
  });
}

void lstm_cell_backward_saved(const Strided& acts, const Strided& c_prev, const Strided& dc, const Strided& dh,
                              const Strided& d_gates, const Strided& d_c_prev) {
  DeviceGuard guard(acts.device().index);
  const int64_t B = c_prev.size(0), H = c_prev.size(1);
  if (B * H == 0) return;
  dispatch_floating(d_gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    lstm_cell_backward_saved_kernel<T><<<grid_for(B * H), kBlock, 0, stream_of(acts)>>>(
        static_cast<const compute_t<T>*>(acts.raw_data()), strided<const T>(c_prev), strided<const T>(dc),
        strided<const T>(dh), strided<T>(d_gates), strided<T>(d_c_prev), B, H);
    MT_CUDA_CHECK_LAUNCH("lstm_cell_backward_saved_kernel");
  });
}

void gru_cell(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& h) {
  DeviceGuard guard(gx.device().index);
  const int64_t B = h_prev.size(0), H = h_prev.size(1);
  if (B * H == 0) return;
  dispatch_floating(h.dtype(), "gru_cell", [&](auto tag) {
    using T = decltype(tag);
    gru_cell_kernel<T><<<grid_for(B * H), kBlock, 0, stream_of(gx)>>>(strided<const T>(gx), strided<const T>(gh),
                                                                      strided<const T>(h_prev), strided<T>(h), B, H);
    MT_CUDA_CHECK_LAUNCH("gru_cell_kernel");
  });
}

void gru_cell_backward(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& dh,
                       const Strided& d_gx, const Strided& d_gh, const Strided& d_h_prev) {
  DeviceGuard guard(gx.device().index);
  const int64_t B = h_prev.size(0), H = h_prev.size(1);
  if (B * H == 0) return;
  dispatch_floating(d_gx.dtype(), "gru_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    gru_cell_backward_kernel<T><<<grid_for(B * H), kBlock, 0, stream_of(gx)>>>(
        strided<const T>(gx), strided<const T>(gh), strided<const T>(h_prev), strided<const T>(dh), strided<T>(d_gx),
        strided<T>(d_gh), strided<T>(d_h_prev), B, H);
    MT_CUDA_CHECK_LAUNCH("gru_cell_backward_kernel");
  });
}

}  // namespace mixtape::cuda
