// Differentiable elementwise ops on Variables. Each records one node whose backward calls the
// tensor-level backward kernel (tensor/ops/elementwise.h); the scale passes through.
#pragma once

#include "autograd/variable.h"
#include "tensor/core/op_kinds.h"
#include "tensor/ops/elementwise.h"

namespace mixtape {

Variable unary(UnaryOp op, const Variable& x, double a = 0.0, double b = 0.0);
Variable binary(BinaryOp op, const Variable& a, const Variable& b);

inline Variable neg(const Variable& x) { return unary(UnaryOp::neg, x); }
inline Variable exp(const Variable& x) { return unary(UnaryOp::exp, x); }
inline Variable log(const Variable& x) { return unary(UnaryOp::log, x); }
inline Variable sqrt(const Variable& x) { return unary(UnaryOp::sqrt, x); }
inline Variable abs(const Variable& x) { return unary(UnaryOp::abs, x); }
inline Variable relu(const Variable& x) { return unary(UnaryOp::relu, x); }
inline Variable sigmoid(const Variable& x) { return unary(UnaryOp::sigmoid, x); }
inline Variable tanh(const Variable& x) { return unary(UnaryOp::tanh, x); }
inline Variable leaky_relu(const Variable& x, double slope = 0.01) { return unary(UnaryOp::leaky_relu, x, slope); }
inline Variable clamp(const Variable& x, double lo, double hi) { return unary(UnaryOp::clamp, x, lo, hi); }
inline Variable pow(const Variable& x, double e) { return unary(UnaryOp::pow, x, e); }
// approximate: "none" or "tanh", as torch.nn.functional.gelu (gelu_op in tensor/ops/elementwise.h).
inline Variable gelu(const Variable& x, std::string_view approximate = "none") {
  return unary(gelu_op(approximate), x);
}
inline Variable silu(const Variable& x) { return unary(UnaryOp::silu, x); }
inline Variable elu(const Variable& x, double alpha = 1.0) { return unary(UnaryOp::elu, x, alpha); }
inline Variable softplus(const Variable& x, double beta = 1.0, double threshold = 20.0) {
  return unary(UnaryOp::softplus, x, beta, threshold);
}
inline Variable hardtanh(const Variable& x, double min_val = -1.0, double max_val = 1.0) {
  return unary(UnaryOp::hardtanh, x, min_val, max_val);
}

inline Variable add(const Variable& a, const Variable& b) { return binary(BinaryOp::add, a, b); }
inline Variable sub(const Variable& a, const Variable& b) { return binary(BinaryOp::sub, a, b); }
inline Variable mul(const Variable& a, const Variable& b) { return binary(BinaryOp::mul, a, b); }
inline Variable div(const Variable& a, const Variable& b) { return binary(BinaryOp::div, a, b); }

inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
inline Variable operator-(const Variable& x) { return neg(x); }
inline Variable operator+(const Variable& x, double s) { return unary(UnaryOp::add_scalar, x, s); }
inline Variable operator+(double s, const Variable& x) { return unary(UnaryOp::add_scalar, x, s); }
inline Variable operator-(const Variable& x, double s) { return unary(UnaryOp::add_scalar, x, -s); }
inline Variable operator-(double s, const Variable& x) { return unary(UnaryOp::rsub_scalar, x, s); }
inline Variable operator*(const Variable& x, double s) { return unary(UnaryOp::mul_scalar, x, s); }
inline Variable operator*(double s, const Variable& x) { return unary(UnaryOp::mul_scalar, x, s); }
inline Variable operator/(const Variable& x, double s) { return unary(UnaryOp::div_scalar, x, s); }
inline Variable operator/(double s, const Variable& x) { return unary(UnaryOp::rdiv_scalar, x, s); }

}  // namespace mixtape
