// Elementwise kernels: unary ops forward and backward, binary ops with broadcasting, dropout.
// Device twins of tensor/cpu/elementwise.cpp and cpu::dropout (tensor/cpu/nn.cpp); each formula
// below is the CPU one, in the same order of fp32 operations, so the results match it bit for
// bit except where Note [Device libm] says otherwise.
//
// Note [No FMA contraction]
// nvcc contracts a * b + c into one fused multiply-add by default (--fmad=true), which rounds
// once where the CPU kernels (built without -ffp-contract, no -march) round twice. Wherever a
// product feeds an addition or subtraction the kernels below spell the operations with
// __fmul_rn / __fsub_rn (mul_rn / sub_rn), which are never fused. Division and sqrt are IEEE
// correctly rounded under nvcc's defaults (-prec-div=true, -prec-sqrt=true, -ftz=false; the build
// never passes --use_fast_math), as on the CPU.
//
// Note [Device libm]
// exp, log, pow (and through exp: sigmoid, tanh) call CUDA's libdevice, whose results may differ
// from glibc's by an ulp or a few (the CUDA Programming Guide bounds expf by 2 ulp, logf by 1,
// powf by a few; glibc stays within about half an ulp). These ops are therefore close to the
// CPU, not bit-identical, in their f32 result (tests/cuda/test_elementwise.cpp allows a few
// ulps); rounded to 16 bits they almost always agree, and differ by one 16-bit ulp when not.
// tanh on f32 mirrors the CPU's tanh_f32 (Note [Float tanh] in tensor/cpu/math.h): the same
// double-precision formula, so only exp's last double bit can differ, which changes the float
// result only when the double lies within a few double ulps of a float rounding boundary
// (about one element in 2^28); its series branch (|x| < 2^-10) is plain arithmetic.
// The backward formulas take the forward output y as an input, so only pow's backward calls
// libm: every other backward is plain arithmetic and bit-identical.
#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/elementwise.cuh"

namespace mixtape::cuda {

namespace {

// ---- scalar math in the compute type C (float, or double for f64) ----------------------------


__device__ __forceinline__ float dexp(float x) { return expf(x); }
__device__ __forceinline__ float dlog(float x) { return logf(x); }
__device__ __forceinline__ float dsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float dabs(float x) { return fabsf(x); }
__device__ __forceinline__ float dpow(float x, float a) { return powf(x, a); }

// cpu::tanh_f32 (Note [Float tanh]) on the device: same branches, same double operations, no
// contraction (Note [No FMA contraction]).
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

// ---- the formulas: tensor/cpu/elementwise.cpp, operation for operation ------------------------

// Note [Branch-free leaky ReLU] (cpu/elementwise.cpp): x * slope gives the same bits as the
// branch in every case; on the GPU the select costs nothing either way.
template <class C>
__device__ __forceinline__ C leaky_slope(C x, C a) {
  return x > C(0) ? C(1) : a;
}

template <UnaryOp OP, class C>
__device__ __forceinline__ C forward(C x, C a, C b) {
  if constexpr (OP == UnaryOp::neg) return -x;
  else if constexpr (OP == UnaryOp::exp) return dexp(x);
  else if constexpr (OP == UnaryOp::log) return dlog(x);
  else if constexpr (OP == UnaryOp::sqrt) return dsqrt(x);
  else if constexpr (OP == UnaryOp::abs) return dabs(x);
  else if constexpr (OP == UnaryOp::relu) return x > C(0) ? x : C(0);
  else if constexpr (OP == UnaryOp::sigmoid) return C(1) / (C(1) + dexp(-x));
  else if constexpr (OP == UnaryOp::tanh) return dtanh(x);
  else if constexpr (OP == UnaryOp::leaky_relu) return x * leaky_slope(x, a);
  else if constexpr (OP == UnaryOp::clamp) return x < a ? a : (x > b ? b : x);
  else if constexpr (OP == UnaryOp::pow) return dpow(x, a);
  else if constexpr (OP == UnaryOp::add_scalar) return x + a;
  else if constexpr (OP == UnaryOp::mul_scalar) return x * a;
  else if constexpr (OP == UnaryOp::div_scalar) return x / a;
  else if constexpr (OP == UnaryOp::rsub_scalar) return a - x;
  else if constexpr (OP == UnaryOp::rdiv_scalar) return a / x;
}

// dy * f'(x), as cpu::backward (linear in dy, so power-of-two gradient scales pass exactly).
template <UnaryOp OP, class C>
__device__ __forceinline__ C backward(C x, C y, C dy, C a, C b) {
  if constexpr (OP == UnaryOp::neg) return -dy;
  else if constexpr (OP == UnaryOp::exp) return dy * y;
  else if constexpr (OP == UnaryOp::log) return dy / x;
  else if constexpr (OP == UnaryOp::sqrt) return dy / (C(2) * y);
  else if constexpr (OP == UnaryOp::abs) return x > C(0) ? dy : (x < C(0) ? -dy : C(0));
  else if constexpr (OP == UnaryOp::relu) return x > C(0) ? dy : C(0);
  else if constexpr (OP == UnaryOp::sigmoid) return dy * (y * (C(1) - y));
  else if constexpr (OP == UnaryOp::tanh) return dy * sub_rn(C(1), mul_rn(y, y));  // 1 - y*y unfused
  else if constexpr (OP == UnaryOp::leaky_relu) return dy * leaky_slope(x, a);
  else if constexpr (OP == UnaryOp::clamp) return (x >= a && x <= b) ? dy : C(0);
  else if constexpr (OP == UnaryOp::pow) return dy * (a * dpow(x, a - C(1)));
  else if constexpr (OP == UnaryOp::add_scalar) return dy;
  else if constexpr (OP == UnaryOp::mul_scalar) return dy * a;
  else if constexpr (OP == UnaryOp::div_scalar) return dy / a;
  else if constexpr (OP == UnaryOp::rsub_scalar) return -dy;
  else if constexpr (OP == UnaryOp::rdiv_scalar) return -(dy * (y / x));  // d(a/x) = -a/x^2 = -y/x
}

template <BinaryOp OP, class C>
__device__ __forceinline__ C binary_fn(C a, C b) {
  if constexpr (OP == BinaryOp::add) return a + b;
  else if constexpr (OP == BinaryOp::sub) return a - b;
  else if constexpr (OP == BinaryOp::mul) return a * b;
  else if constexpr (OP == BinaryOp::div) return a / b;
}

// ---- the ops: loads to the compute type, one rounding on store (Note [Rounding on the device]) --

// out[o0] = f(x[o1]).
template <UnaryOp OP, class T>
struct UnaryForward {
  using C = compute_t<T>;
  const T* x;
  T* out;
  C a, b;
  __device__ void operator()(int64_t, const int64_t (&o)[2]) const {
    out[o[0]] = store_value<T>(forward<OP, C>(load_value(x[o[1]]), a, b));
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
    dx[o[0]] = store_value<T>(backward<OP, C>(load_value(x[o[1]]), load_value(y[o[2]]), load_value(dy[o[3]]), a, b));
  }
};

// out[o0] = a[o1] op b[o2]; a and b broadcast to out's shape (stride 0).
template <BinaryOp OP, class T>
struct BinaryElementwise {
  const T* a;
  const T* b;
  T* out;
  __device__ void operator()(int64_t, const int64_t (&o)[3]) const {
    out[o[0]] = store_value<T>(binary_fn<OP, compute_t<T>>(load_value(a[o[1]]), load_value(b[o[2]])));
  }
};

// Note [Dropout mask] (cpu::dropout): element i (row-major in x) is kept when the 53-bit uniform
// made of words 0 (high) and 1 (low) of Philox block (seed, offset + i) is below keep = 1 - p;
// kept values are scaled by 1 / keep in the compute type. philox_words and uniform01_f64
// (tensor/rng.h) are not constexpr, so the block is built here from the constexpr
// philox4x32_10 with philox_words' exact counter and key layout; tests/cuda/test_elementwise.cpp
// checks the mask against the CPU's.
__device__ __forceinline__ PhiloxBlock philox_block(uint64_t seed, uint64_t index) {
  return philox4x32_10({uint32_t(index), uint32_t(index >> 32), 0u, 0u}, {uint32_t(seed), uint32_t(seed >> 32)});
}
__device__ __forceinline__ double uniform01_53(uint32_t hi, uint32_t lo) {
  return double((uint64_t(hi) << 21) | (lo >> 11)) * (1.0 / 9007199254740992.0);  // exact
}

// out[o1] = kept(i) ? x[o0] * scale : 0, as cpu::dropout orders its operands (x first).
template <class T>
struct Dropout {
  using C = compute_t<T>;
  const T* x;
  T* out;
  double keep;
  C scale;
  uint64_t seed, offset;
  __device__ void operator()(int64_t i, const int64_t (&o)[2]) const {
    const PhiloxBlock r = philox_block(seed, offset + uint64_t(i));
    const bool kept = uniform01_53(r[0], r[1]) < keep;
    out[o[1]] = kept ? store_value<T>(C(load_value(x[o[0]])) * scale) : store_value<T>(C(0));
  }
};

// ---- op dispatch: the runtime op becomes a template argument ---------------------------------

template <class F>
void dispatch_unary(UnaryOp op, F&& f) {
  switch (op) {
#define MT_CASE(name) case UnaryOp::name: return f.template operator()<UnaryOp::name>();
    MT_CASE(neg) MT_CASE(exp) MT_CASE(log) MT_CASE(sqrt) MT_CASE(abs) MT_CASE(relu)
    MT_CASE(sigmoid) MT_CASE(tanh) MT_CASE(leaky_relu) MT_CASE(clamp) MT_CASE(pow)
    MT_CASE(add_scalar) MT_CASE(mul_scalar) MT_CASE(div_scalar) MT_CASE(rsub_scalar)
    MT_CASE(rdiv_scalar)
#undef MT_CASE
  }
  throw Error(detail::cat("cuda::unary: unknown UnaryOp ", int(op)));
}

template <class F>
void dispatch_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::add: return f.template operator()<BinaryOp::add>();
    case BinaryOp::sub: return f.template operator()<BinaryOp::sub>();
    case BinaryOp::mul: return f.template operator()<BinaryOp::mul>();
    case BinaryOp::div: return f.template operator()<BinaryOp::div>();
  }
  throw Error(detail::cat("cuda::binary: unknown BinaryOp ", int(op)));
}

template <class T>
const T* cptr(const Tensor& t) { return static_cast<const T*>(t.raw_data()); }
template <class T>
T* mptr(Tensor& t) { return static_cast<T*>(t.raw_data()); }

}  // namespace

// x may be any strided view; out (from the front-end) is contiguous but written through its
// strides anyway. The scalars a, b are rounded to the compute type first, as C(a) on the CPU.
void unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b) {
  DeviceGuard guard(x.device().index);
  const OffsetCalculator<2> calc = offsets_for<2>(out.shape(), {&out, &x});
  dispatch_floating(
      x.dtype(), unary_op_name(op),
      [&](auto tag) {
        using T = decltype(tag);
        using C = compute_t<T>;
        dispatch_unary(op, [&]<UnaryOp OP>() {
          const UnaryForward<OP, T> f{cptr<T>(x), mptr<T>(out), C(a), C(b)};
          launch_elementwise<2>("unary_forward", out.numel(), calc, f, stream_of(out));
        });
      });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, double a, double b) {
  DeviceGuard guard(dy.device().index);
  const OffsetCalculator<4> calc = offsets_for<4>(dx.shape(), {&dx, &x, &y, &dy});
  dispatch_floating(
      dx.dtype(), unary_op_name(op),
      [&](auto tag) {
        using T = decltype(tag);
        using C = compute_t<T>;
        dispatch_unary(op, [&]<UnaryOp OP>() {
          const UnaryBackward<OP, T> f{cptr<T>(x), cptr<T>(y), cptr<T>(dy), mptr<T>(dx), C(a), C(b)};
          launch_elementwise<4>("unary_backward", dx.numel(), calc, f, stream_of(dx));
        });
      });
}

// a and b broadcast to out's shape (offsets_for gives size-1 and missing leading dims stride 0).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  DeviceGuard guard(out.device().index);
  const OffsetCalculator<3> calc = offsets_for<3>(out.shape(), {&out, &a, &b});
  dispatch_floating(
      out.dtype(), binary_op_name(op),
      [&](auto tag) {
        using T = decltype(tag);
        dispatch_binary(op, [&]<BinaryOp OP>() {
          const BinaryElementwise<OP, T> f{cptr<T>(a), cptr<T>(b), mptr<T>(out)};
          launch_elementwise<3>("binary", out.numel(), calc, f, stream_of(out));
        });
      });
}

// p in [0, 1) (checked by the front-end). keep and scale are computed on the host exactly as
// cpu::dropout computes them.
void dropout(const Tensor& x, Tensor& out, double p, uint64_t seed, uint64_t offset) {
  DeviceGuard guard(x.device().index);
  const double keep = 1.0 - p;
  const OffsetCalculator<2> calc = offsets_for<2>(x.shape(), {&x, &out});
  dispatch_floating(
      x.dtype(), "dropout",
      [&](auto tag) {
        using T = decltype(tag);
        using C = compute_t<T>;
        const Dropout<T> f{cptr<T>(x), mptr<T>(out), keep, C(1.0 / keep), seed, offset};
        launch_elementwise<2>("dropout", x.numel(), calc, f, stream_of(out));
      });
}

}  // namespace mixtape::cuda
