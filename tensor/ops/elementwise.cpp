#include "tensor/ops/elementwise.h"

#include "cuda/backend.h"
#include "tensor/cpu/elementwise.h"
#include "tensor/ops/common.h"

namespace mixtape {

bool unary_backward_needs_input(UnaryOp op) {
  switch (op) {
    case UnaryOp::log:
    case UnaryOp::abs:
    case UnaryOp::relu:
    case UnaryOp::leaky_relu:
    case UnaryOp::clamp:
    case UnaryOp::pow:
    case UnaryOp::gelu:
    case UnaryOp::gelu_tanh:
    case UnaryOp::silu:
    case UnaryOp::elu:
    case UnaryOp::softplus:
    case UnaryOp::hardtanh:
    case UnaryOp::rdiv_scalar: return true;
    default: return false;
  }
}

bool unary_backward_needs_output(UnaryOp op) {
  switch (op) {
    case UnaryOp::exp:
    case UnaryOp::sqrt:
    case UnaryOp::sigmoid:
    case UnaryOp::tanh:
    case UnaryOp::rdiv_scalar: return true;
    default: return false;
  }
}

UnaryOp gelu_op(std::string_view approximate) {
  MT_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
           std::string(approximate), "\"");
  return approximate == "tanh" ? UnaryOp::gelu_tanh : UnaryOp::gelu;
}

Tensor unary(UnaryOp op, const Tensor& x, double a, double b) {
  const char* name = unary_op_name(op);
  ops::check_same(name, {&x});
  ops::check_floating(name, x);
  if (op == UnaryOp::clamp) MT_CHECK(a <= b, "clamp: lo ", a, " > hi ", b);
  if (op == UnaryOp::hardtanh) MT_CHECK(a <= b, "hardtanh: min_val ", a, " > max_val ", b);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  on_device(
      x.device(), [&] { cpu::unary(op, x, out, a, b); }, [&] { cuda::unary(op, x, out, a, b); });
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, double a, double b) {
  const char* name = unary_op_name(op);
  // Stand in for what the formula does not read, so kernels always get valid tensors.
  const Tensor& xx = x.defined() ? x : y.defined() ? y : dy;
  const Tensor& yy = y.defined() ? y : xx;
  ops::check_same(name, {&xx, &yy, &dy});
  MT_CHECK(xx.shape() == dy.shape() && yy.shape() == dy.shape(), name, " backward: gradient ", dy.meta(),
           " does not match input ", xx.meta());
  Tensor dx = empty(dy.shape(), dy.dtype(), dy.device());
  on_device(
      dy.device(), [&] { cpu::unary_backward(op, xx, yy, dy, dx, a, b); },
      [&] { cuda::unary_backward(op, xx, yy, dy, dx, a, b); });
  return dx;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  ops::check_same(name, {&a, &b});
  ops::check_floating(name, a);
  Tensor out = empty(broadcast_shapes(a.shape(), b.shape(), name), a.dtype(), a.device());
  on_device(
      a.device(), [&] { cpu::binary(op, a, b, out); }, [&] { cuda::binary(op, a, b, out); });
  return out;
}

}  // namespace mixtape
