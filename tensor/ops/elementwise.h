// Elementwise op front-ends on plain tensors (no autograd): validate, pick the device once,
// call the cpu:: or cuda:: kernel. Binary ops broadcast; both operands must share a dtype.
#pragma once

#include <string_view>

#include "tensor/core/op_kinds.h"
#include "tensor/tensor.h"

namespace mixtape {

Tensor unary(UnaryOp op, const Tensor& x, double a = 0.0, double b = 0.0);
// Gradient of a unary op. `x` and `y` (the forward output) may be undefined when the op's
// formula does not read them (see cpu/elementwise.cpp).
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, double a = 0.0, double b = 0.0);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

// Which of x / y the backward formula of `op` reads.
bool unary_backward_needs_input(UnaryOp op);
bool unary_backward_needs_output(UnaryOp op);

inline Tensor neg(const Tensor& x) { return unary(UnaryOp::neg, x); }
inline Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, x); }
inline Tensor log(const Tensor& x) { return unary(UnaryOp::log, x); }
inline Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, x); }
inline Tensor abs(const Tensor& x) { return unary(UnaryOp::abs, x); }
inline Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x); }
inline Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::sigmoid, x); }
inline Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x); }
inline Tensor leaky_relu(const Tensor& x, double slope = 0.01) { return unary(UnaryOp::leaky_relu, x, slope); }
inline Tensor clamp(const Tensor& x, double lo, double hi) { return unary(UnaryOp::clamp, x, lo, hi); }
inline Tensor pow(const Tensor& x, double e) { return unary(UnaryOp::pow, x, e); }
// As torch.nn.functional.gelu: approximate "none" for x Phi(x) with erf, "tanh" for the tanh
// form; gelu_op throws on anything else.
UnaryOp gelu_op(std::string_view approximate);
inline Tensor gelu(const Tensor& x, std::string_view approximate = "none") { return unary(gelu_op(approximate), x); }
inline Tensor silu(const Tensor& x) { return unary(UnaryOp::silu, x); }
inline Tensor elu(const Tensor& x, double alpha = 1.0) { return unary(UnaryOp::elu, x, alpha); }
inline Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0) {
  return unary(UnaryOp::softplus, x, beta, threshold);
}
inline Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0) {
  return unary(UnaryOp::hardtanh, x, min_val, max_val);
}

inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b); }

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return unary(UnaryOp::add_scalar, x, s); }
inline Tensor operator+(double s, const Tensor& x) { return unary(UnaryOp::add_scalar, x, s); }
inline Tensor operator-(const Tensor& x, double s) { return unary(UnaryOp::add_scalar, x, -s); }
inline Tensor operator-(double s, const Tensor& x) { return unary(UnaryOp::rsub_scalar, x, s); }
inline Tensor operator*(const Tensor& x, double s) { return unary(UnaryOp::mul_scalar, x, s); }
inline Tensor operator*(double s, const Tensor& x) { return unary(UnaryOp::mul_scalar, x, s); }
inline Tensor operator/(const Tensor& x, double s) { return unary(UnaryOp::div_scalar, x, s); }
inline Tensor operator/(double s, const Tensor& x) { return unary(UnaryOp::rdiv_scalar, x, s); }

}  // namespace mixtape
