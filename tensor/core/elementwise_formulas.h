// The formulas of the elementwise ops, written once for both devices: tensor/cpu/elementwise.cpp
// and cuda/elementwise.cu instantiate them with their own scalar math (`M`: exp, log, sqrt, abs,
// pow, tanh, erfc, expm1, log1p and the leaky-ReLU slope), so the arithmetic between those calls
// is the same code, in the same order of operations, on the CPU and the GPU (Note [No contracted
// multiply-adds] in CMakeLists.txt keeps it unfused on both). C is the compute type: float for
// f32/f16/bf16 (the kernels round the result once on store), double for f64 (CPU only).
#pragma once

#include "tensor/core/error.h"
#include "tensor/core/host_device.h"
#include "tensor/core/op_kinds.h"

namespace mixtape::formulas {

// GELU's constants: 1/sqrt(2), 1/sqrt(2 pi), sqrt(2/pi), and the cubic coefficient of its tanh form.
//
// Note [GELU with erfc]
// gelu(x) = x Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2 = erfc(-x / sqrt 2) / 2. PyTorch
// computes 1 + erf(...), which cancels for x < 0: erf is near -1 there, and in fp32 each ulp of
// erf (6e-8) moves Phi by 3e-8: at x = -4, where Phi is 3.2e-5, that is a relative 1e-3, and
// where Phi < 3e-8 (x < -5.4) nothing is left (torch 1.13's fp32 gelu(-4) is off by 3e-4 of its
// value, gelu(-6) is 0 for -5.9e-9). erfc has no cancellation, so Phi keeps its relative accuracy
// down to the fp32 underflow. For x >= 0 the two agree to rounding.
inline constexpr double kSqrtHalf = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluKappa = 0.044715;

template <UnaryOp OP, class M, class C>
MT_HOST_DEVICE inline C unary_forward(C x, C a, C b) {
  if constexpr (OP == UnaryOp::neg) return -x;
  else if constexpr (OP == UnaryOp::exp) return M::exp(x);
  else if constexpr (OP == UnaryOp::log) return M::log(x);
  else if constexpr (OP == UnaryOp::sqrt) return M::sqrt(x);
  else if constexpr (OP == UnaryOp::abs) return M::abs(x);
  else if constexpr (OP == UnaryOp::relu) return x < C(0) ? C(0) : x;  // NaN passes through
  else if constexpr (OP == UnaryOp::sigmoid) return C(1) / (C(1) + M::exp(-x));
  else if constexpr (OP == UnaryOp::tanh) return M::tanh(x);
  else if constexpr (OP == UnaryOp::leaky_relu) return x * M::leaky_slope(x, a);
  else if constexpr (OP == UnaryOp::clamp) return x < a ? a : (x > b ? b : x);
  else if constexpr (OP == UnaryOp::pow) return M::pow(x, a);
  else if constexpr (OP == UnaryOp::gelu) return x * (C(0.5) * M::erfc(-x * C(kSqrtHalf)));  // Note [GELU with erfc]
  else if constexpr (OP == UnaryOp::gelu_tanh) {
    const C inner = C(kSqrt2OverPi) * (x + C(kGeluKappa) * (x * x * x));
    return C(0.5) * x * (C(1) + M::tanh(inner));
  } else if constexpr (OP == UnaryOp::silu) return x / (C(1) + M::exp(-x));
  else if constexpr (OP == UnaryOp::elu) return x <= C(0) ? a * M::expm1(x) : x;
  else if constexpr (OP == UnaryOp::softplus) return x * a > b ? x : M::log1p(M::exp(x * a)) / a;
  else if constexpr (OP == UnaryOp::hardtanh) return x < a ? a : (x > b ? b : x);
  else if constexpr (OP == UnaryOp::add_scalar) return x + a;
  else if constexpr (OP == UnaryOp::mul_scalar) return x * a;
  else if constexpr (OP == UnaryOp::div_scalar) return x / a;
  else if constexpr (OP == UnaryOp::rsub_scalar) return a - x;
  else if constexpr (OP == UnaryOp::rdiv_scalar) return a / x;
}

// dy * f'(x), written with the saved output y where that is cheaper or more accurate.
// Each formula is linear in dy, so a power-of-two gradient scale passes through exactly.
//
// Note [NaN in the formulas]
// A mixed-precision run must see a NaN, never lose it: a comparison is false for NaN, so each
// test is written so that its false branch is the one that keeps the value (relu: x < 0 ? 0 : x,
// not x > 0 ? x : 0; relu(-0) = -0, as PyTorch's). At a NaN input relu's backward passes dy
// through, as PyTorch's does; clamp's does too and abs's returns NaN, where PyTorch answers 0 for
// both (checked with torch 1.13): a gradient of 0 there would hide a NaN that dy carries. And
// 0 * inf is NaN: pow with exponent 0 has the derivative 0 everywhere, so its gradient is dy * 0
// (PyTorch's masked derivative times dy), not dy * 0 * x^-1, which is NaN at x = 0.
// The activations follow PyTorch's formulas and agree with it at NaN: elu's and hardtanh's tests
// keep the value in their false branch like relu's (a NaN input passes dy through, y is NaN),
// and gelu, silu and softplus compute with x, so a NaN input gives a NaN gradient. hardtanh's
// gradient is 0 at min_val and max_val themselves, as PyTorch's (clamp's is dy there).
template <UnaryOp OP, class M, class C>
MT_HOST_DEVICE inline C unary_backward(C x, C y, C dy, C a, C b) {
  if constexpr (OP == UnaryOp::neg) return -dy;
  else if constexpr (OP == UnaryOp::exp) return dy * y;
  else if constexpr (OP == UnaryOp::log) return dy / x;
  else if constexpr (OP == UnaryOp::sqrt) return dy / (C(2) * y);
  else if constexpr (OP == UnaryOp::abs) return x > C(0) ? dy : (x < C(0) ? -dy : (x == C(0) ? C(0) : x));
  else if constexpr (OP == UnaryOp::relu) return x <= C(0) ? C(0) : dy;
  else if constexpr (OP == UnaryOp::sigmoid) return dy * (y * (C(1) - y));
  else if constexpr (OP == UnaryOp::tanh) return dy * (C(1) - y * y);
  else if constexpr (OP == UnaryOp::leaky_relu) return dy * M::leaky_slope(x, a);
  else if constexpr (OP == UnaryOp::clamp) return (x < a || x > b) ? C(0) : dy;
  else if constexpr (OP == UnaryOp::pow) return a == C(0) ? dy * C(0) : dy * (a * M::pow(x, a - C(1)));
  else if constexpr (OP == UnaryOp::gelu) {
    // d(x Phi(x)) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    const C cdf = C(0.5) * M::erfc(-x * C(kSqrtHalf));  // Note [GELU with erfc]
    const C pdf = M::exp(C(-0.5) * x * x) * C(kInvSqrt2Pi);
    return dy * (cdf + x * pdf);
  } else if constexpr (OP == UnaryOp::gelu_tanh) {
    // y = u v with u = x / 2, v = 1 + tanh(inner): dy (v / 2 + u (1 - t^2) inner')
    const C x2 = x * x;
    const C t = M::tanh(C(kSqrt2OverPi) * (x + C(kGeluKappa) * (x2 * x)));
    const C dinner = C(kSqrt2OverPi) * (C(1) + C(3) * C(kGeluKappa) * x2);
    return dy * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * dinner);
  } else if constexpr (OP == UnaryOp::silu) {
    const C s = C(1) / (C(1) + M::exp(-x));  // sigmoid(x)
    return dy * (s * (C(1) + x * (C(1) - s)));
  } else if constexpr (OP == UnaryOp::elu) return x <= C(0) ? dy * (a * M::exp(x)) : dy;
  else if constexpr (OP == UnaryOp::softplus) {
    const C z = M::exp(x * a);
    return x * a > b ? dy : dy * (z / (z + C(1)));
  } else if constexpr (OP == UnaryOp::hardtanh) return (x <= a || x >= b) ? C(0) : dy;
  else if constexpr (OP == UnaryOp::add_scalar) return dy;
  else if constexpr (OP == UnaryOp::mul_scalar) return dy * a;
  else if constexpr (OP == UnaryOp::div_scalar) return dy / a;
  else if constexpr (OP == UnaryOp::rsub_scalar) return -dy;
  else if constexpr (OP == UnaryOp::rdiv_scalar) return -(dy * (y / x));  // d(a/x) = -a/x^2 = -y/x
}

// Whether unary_backward<OP> reads its x and its y: a kernel need not load (or, for 16-bit
// tensors, convert) an operand the formula ignores. tests/tensor/test_elementwise_formulas.cpp
// checks each false entry by passing NaN there.
template <UnaryOp OP>
inline constexpr bool backward_reads_y = OP == UnaryOp::exp || OP == UnaryOp::sqrt || OP == UnaryOp::sigmoid ||
                                         OP == UnaryOp::tanh || OP == UnaryOp::rdiv_scalar;
template <UnaryOp OP>
inline constexpr bool backward_reads_x =
    !(OP == UnaryOp::neg || OP == UnaryOp::exp || OP == UnaryOp::sqrt || OP == UnaryOp::sigmoid ||
      OP == UnaryOp::tanh || OP == UnaryOp::add_scalar || OP == UnaryOp::mul_scalar || OP == UnaryOp::div_scalar ||
      OP == UnaryOp::rsub_scalar);

template <BinaryOp OP, class C>
MT_HOST_DEVICE inline C binary(C a, C b) {
  if constexpr (OP == BinaryOp::add) return a + b;
  else if constexpr (OP == BinaryOp::sub) return a - b;
  else if constexpr (OP == BinaryOp::mul) return a * b;
  else if constexpr (OP == BinaryOp::div) return a / b;
}

// The runtime op as a template argument: f.template operator()<OP>() (host code; the device
// kernels are instantiated per OP from there).
template <class F>
void dispatch_unary(UnaryOp op, F&& f) {
  switch (op) {
    // clang-format off
#define MT_CASE(name) case UnaryOp::name: return f.template operator()<UnaryOp::name>();
    MT_CASE(neg) MT_CASE(exp) MT_CASE(log) MT_CASE(sqrt) MT_CASE(abs) MT_CASE(relu)
    MT_CASE(sigmoid) MT_CASE(tanh) MT_CASE(leaky_relu) MT_CASE(clamp) MT_CASE(pow)
    MT_CASE(gelu) MT_CASE(gelu_tanh) MT_CASE(silu) MT_CASE(elu) MT_CASE(softplus) MT_CASE(hardtanh)
    MT_CASE(add_scalar) MT_CASE(mul_scalar) MT_CASE(div_scalar) MT_CASE(rsub_scalar)
    MT_CASE(rdiv_scalar)
#undef MT_CASE
    // clang-format on
  }
  throw Error(detail::cat("unary: unknown UnaryOp ", int(op)));
}

template <class F>
void dispatch_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::add: return f.template operator()<BinaryOp::add>();
    case BinaryOp::sub: return f.template operator()<BinaryOp::sub>();
    case BinaryOp::mul: return f.template operator()<BinaryOp::mul>();
    case BinaryOp::div: return f.template operator()<BinaryOp::div>();
  }
  throw Error(detail::cat("binary: unknown BinaryOp ", int(op)));
}

}  // namespace mixtape::formulas
