// The formulas of the elementwise ops, written once for both devices: tensor/cpu/elementwise.cpp
// and cuda/elementwise.cu instantiate them with their own scalar math (`M`: exp, log, sqrt, abs,
// pow, tanh and the leaky-ReLU slope), so the arithmetic between those calls is the same code,
// in the same order of operations, on the CPU and the GPU (Note [No contracted multiply-adds] in
// CMakeLists.txt keeps it unfused on both). C is the compute type: float for f32/f16/bf16 (the
// kernels round the result once on store), double for f64 (CPU only).
#pragma once

#include "tensor/core/error.h"
#include "tensor/core/host_device.h"
#include "tensor/core/op_kinds.h"

namespace mixtape::formulas {

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
  else if constexpr (OP == UnaryOp::add_scalar) return dy;
  else if constexpr (OP == UnaryOp::mul_scalar) return dy * a;
  else if constexpr (OP == UnaryOp::div_scalar) return dy / a;
  else if constexpr (OP == UnaryOp::rsub_scalar) return -dy;
  else if constexpr (OP == UnaryOp::rdiv_scalar) return -(dy * (y / x));  // d(a/x) = -a/x^2 = -y/x
}

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
