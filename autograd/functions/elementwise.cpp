#include "autograd/functions/elementwise.h"

#include "autograd/tape.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

namespace {
OpId unary_op_id(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return OpId::neg;
    case UnaryOp::exp: return OpId::exp;
    case UnaryOp::log: return OpId::log;
    case UnaryOp::sqrt: return OpId::sqrt;
    case UnaryOp::abs: return OpId::abs;
    case UnaryOp::relu: return OpId::relu;
    case UnaryOp::sigmoid: return OpId::sigmoid;
    case UnaryOp::tanh: return OpId::tanh;
    case UnaryOp::leaky_relu: return OpId::leaky_relu;
    case UnaryOp::clamp: return OpId::clamp;
    case UnaryOp::pow: return OpId::pow;
    case UnaryOp::gelu: return OpId::gelu;
    case UnaryOp::gelu_tanh: return OpId::gelu_tanh;
    case UnaryOp::silu: return OpId::silu;
    case UnaryOp::elu: return OpId::elu;
    case UnaryOp::softplus: return OpId::softplus;
    case UnaryOp::hardtanh: return OpId::hardtanh;
    case UnaryOp::add_scalar: return OpId::add_scalar;
    case UnaryOp::mul_scalar: return OpId::mul_scalar;
    case UnaryOp::div_scalar: return OpId::div_scalar;
    case UnaryOp::rsub_scalar: return OpId::rsub_scalar;
    case UnaryOp::rdiv_scalar: return OpId::rdiv_scalar;
  }
  return OpId::neg;
}

OpId binary_op_id(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return OpId::add;
    case BinaryOp::sub: return OpId::sub;
    case BinaryOp::mul: return OpId::mul;
    case BinaryOp::div: return OpId::div;
  }
  return OpId::add;
}
}  // namespace

Variable unary(UnaryOp op, const Variable& x, double a, double b) {
  Tensor y = mixtape::unary(op, x.data(), a, b);
  // Save only what the backward formula reads.
  Tensor sx = unary_backward_needs_input(op) ? x.data() : Tensor();
  Tensor sy = unary_backward_needs_output(op) ? y : Tensor();
  return record(unary_op_id(op), {x}, y, [op, a, b, sx, sy](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{unary_backward(op, sx, sy, dy[0], a, b)};
  });
}

Variable binary(BinaryOp op, const Variable& a, const Variable& b) {
  Tensor y = mixtape::binary(op, a.data(), b.data());
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  // mul reads the other operand; div reads b (for both) and y (for db = -dy * y / b).
  Tensor sa = (op == BinaryOp::mul && need_b) ? a.data() : Tensor();
  Tensor sb = ((op == BinaryOp::mul && need_a) || op == BinaryOp::div) ? b.data() : Tensor();
  Tensor sy = (op == BinaryOp::div && need_b) ? y : Tensor();
  const Shape ashape = a.shape(), bshape = b.shape();
  return record(binary_op_id(op), {a, b}, y,
                [op, sa, sb, sy, ashape, bshape](const std::vector<Tensor>& dys, const std::vector<bool>& needs) {
    const Tensor& dy = dys[0];
    Tensor da, db;
    switch (op) {
      case BinaryOp::add:
        if (needs[0]) da = dy;
        if (needs[1]) db = dy;
        break;
      case BinaryOp::sub:
        if (needs[0]) da = dy;
        if (needs[1]) db = mixtape::neg(dy);
        break;
      case BinaryOp::mul:
        if (needs[0]) da = mixtape::mul(dy, sb);
        if (needs[1]) db = mixtape::mul(dy, sa);
        break;
      case BinaryOp::div:
        if (needs[0]) da = mixtape::div(dy, sb);
        if (needs[1]) db = mixtape::neg(mixtape::div(mixtape::mul(dy, sy), sb));  // -dy * y / b
        break;
    }
    // Broadcast inputs get their gradient summed back to their own shape.
    if (da.defined()) da = sum_to(da, ashape);
    if (db.defined()) db = sum_to(db, bshape);
    return std::vector<Tensor>{da, db};
  });
}

}  // namespace mixtape
