// Elementwise kernels: unary ops forward and backward, binary ops with broadcasting. Device twins
// of tensor/cpu/elementwise.cpp; each formula below is the CPU one, in the same order of fp32
// operations, so the results match it bit for bit except where Note [Device libm] says otherwise.
//
// The formulas themselves are tensor/core/elementwise_formulas.h, the CPU's own, compiled without
// contracted multiply-adds on both devices (Note [No contracted multiply-adds] in CMakeLists.txt).
// Division and sqrt are IEEE correctly rounded under nvcc's defaults (-prec-div=true,
// -prec-sqrt=true, -ftz=false; the build never passes --use_fast_math), as on the CPU.
//
// Note [Device libm]
// exp, log, pow, erfc, expm1, log1p (and through them: sigmoid, tanh, gelu, gelu_tanh, silu, elu,
// softplus) call CUDA's libdevice, whose results may differ
// from glibc's by an ulp or a few (the CUDA Programming Guide bounds expf by 2 ulp, logf by 1,
// powf by a few; glibc stays within about half an ulp). These ops are therefore close to the
// CPU, not bit-identical, in their f32 result (tests/cuda/test_elementwise.cpp allows a few
// ulps); rounded to 16 bits they almost always agree, and differ by one 16-bit ulp when not.
// tanh on f32 mirrors the CPU's tanh_f32 (Note [Float tanh] in tensor/cpu/math.h): the same
// double-precision formula, so only exp's last double bit can differ, which changes the float
// result only when the double lies within a few double ulps of a float rounding boundary
// (about one element in 2^28); its series branch (|x| < 2^-10) is plain arithmetic.
// The backward formulas of exp, sigmoid and tanh take the forward output y as an input and are
// plain arithmetic, bit-identical; pow's and the activations' (gelu, gelu_tanh, silu, elu,
// softplus) compute from x and call libm. erfcf, expm1f and log1pf are within 4, 1 and 1 ulp.
#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"
#include "tensor/core/elementwise_formulas.h"

namespace mixtape::cuda {

namespace {

// ---- scalar math in the compute type C (float, or double for f64) ----------------------------

__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float dabs(float x) { return fabsf(x); }
__device__ __forceinline__ float dpow(float x, float a) { return powf(x, a); }
__device__ __forceinline__ float derfc(float x) { return erfcf(x); }
__device__ __forceinline__ float dexpm1(float x) { return expm1f(x); }
__device__ __forceinline__ float dlog1p(float x) { return log1pf(x); }

// cpu::tanh_f32 (Note [Float tanh]) on the device: same branches, same double operations, no
// contraction (Note [No contracted multiply-adds] in CMakeLists.txt).
__device__ __forceinline__ float dtanh(float x) {
  const double d = x, a = ::fabs(d);
  if (a < 0x1p-10) {
    const double d2 = __dmul_rn(d, d);
    // d * (1.0 - d2 * (1.0 / 3.0 - d2 * (2.0 / 15.0)))
    const double inner = __dsub_rn(1.0 / 3.0, __dmul_rn(d2, 2.0 / 15.0));
    return float(__dmul_rn(d, __dsub_rn(1.0, __dmul_rn(d2, inner))));
  }
  const double e = ::exp(__dmul_rn(-2.0, a));
  return float(::copysign((1.0 - e) / (1.0 + e), d));
}

// ---- the formulas: shared with the CPU (tensor/core/elementwise_formulas.h) ---------------------------

// Note [Branch-free leaky ReLU] (tensor/cpu/math.h): x * slope gives the same bits as the
// branch in every case; on the GPU the select costs nothing either way.
template <class C>
__device__ __forceinline__ C leaky_slope(C x, C a) {
  return x > C(0) ? C(1) : a;
}

// The device's scalar math for the shared formulas (tensor/core/elementwise_formulas.h).
struct DeviceMath {
  static __device__ __forceinline__ float exp(float x) { return dexp(x); }
  static __device__ __forceinline__ float log(float x) { return dlog(x); }
  static __device__ __forceinline__ float sqrt(float x) { return dsqrt(x); }
  static __device__ __forceinline__ float abs(float x) { return dabs(x); }
  static __device__ __forceinline__ float pow(float x, float a) { return dpow(x, a); }
  static __device__ __forceinline__ float tanh(float x) { return dtanh(x); }
  static __device__ __forceinline__ float erfc(float x) { return derfc(x); }
  static __device__ __forceinline__ float expm1(float x) { return dexpm1(x); }
  static __device__ __forceinline__ float log1p(float x) { return dlog1p(x); }
  static __device__ __forceinline__ float leaky_slope(float x, float a) { return cuda::leaky_slope(x, a); }
};

// ---- the ops: loads to the compute type, one rounding on store (Note [Rounding on the device]) --

// out[o0] = f(x[o1]).
template <UnaryOp OP, class T>
struct UnaryForward {
  using C = compute_t<T>;
  const T* x;
  T* out;
  C a, b;
  __device__ void operator()(int64_t, const int64_t (&o)[2]) const {
    out[o[0]] = store<T>(formulas::unary_forward<OP, DeviceMath>(load(x[o[1]]), a, b));
  }
};

// dx[o0] = g(x[o1], y[o2], dy[o3]).
template <UnaryOp OP, class T>
struct UnaryBackward {
  using C = compute_t<T>;
  const T* x;
  const T* y;
  const T* dy;
  T* dx;
  C a, b;
  __device__ void operator()(int64_t, const int64_t (&o)[4]) const {
    dx[o[0]] = store<T>(formulas::unary_backward<OP, DeviceMath>(load(x[o[1]]), load(y[o[2]]), load(dy[o[3]]), a, b));
  }
};

// out[o0] = a[o1] op b[o2]; a and b broadcast to out's shape (stride 0).
template <BinaryOp OP, class T>
struct BinaryElementwise {
  const T* a;
  const T* b;
  T* out;
  __device__ void operator()(int64_t, const int64_t (&o)[3]) const {
    out[o[0]] = store<T>(formulas::binary<OP, compute_t<T>>(load(a[o[1]]), load(b[o[2]])));
  }
};

template <class T>
const T* cptr(const Strided& t) {
  return static_cast<const T*>(t.raw_data());
}
template <class T>
T* mptr(const Strided& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace

// x may be any strided view; out (from the front-end) is contiguous but written through its
// strides anyway. The scalars a, b are rounded to the compute type first, as C(a) on the CPU.
void unary(UnaryOp op, const Strided& x, const Strided& out, double a, double b) {
  DeviceGuard guard(x.device().index);
  const OffsetCalculator<2> calc = offsets_for<2>(out.shape(), {&out, &x});
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    formulas::dispatch_unary(op, [&]<UnaryOp OP>() {
      const UnaryForward<OP, T> f{cptr<T>(x), mptr<T>(out), C(a), C(b)};
      launch_elementwise<2>("unary_forward", out.numel(), calc, f, stream_of(out));
    });
  });
}

void unary_backward(UnaryOp op, const Strided& x, const Strided& y, const Strided& dy, const Strided& dx, double a,
                    double b) {
  DeviceGuard guard(dy.device().index);
  const OffsetCalculator<4> calc = offsets_for<4>(dx.shape(), {&dx, &x, &y, &dy});
  dispatch_floating(dx.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    formulas::dispatch_unary(op, [&]<UnaryOp OP>() {
      const UnaryBackward<OP, T> f{cptr<T>(x), cptr<T>(y), cptr<T>(dy), mptr<T>(dx), C(a), C(b)};
      launch_elementwise<4>("unary_backward", dx.numel(), calc, f, stream_of(dx));
    });
  });
}

// a and b broadcast to out's shape (offsets_for gives size-1 and missing leading dims stride 0).
void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& out) {
  DeviceGuard guard(out.device().index);
  const OffsetCalculator<3> calc = offsets_for<3>(out.shape(), {&out, &a, &b});
  dispatch_floating(out.dtype(), binary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    formulas::dispatch_binary(op, [&]<BinaryOp OP>() {
      const BinaryElementwise<OP, T> f{cptr<T>(a), cptr<T>(b), mptr<T>(out)};
      launch_elementwise<3>("binary", out.numel(), calc, f, stream_of(out));
    });
  });
}

}  // namespace mixtape::cuda
