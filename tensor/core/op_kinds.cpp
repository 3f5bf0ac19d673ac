#include "tensor/core/op_kinds.h"

namespace mixtape {

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::abs: return "abs";
    case UnaryOp::relu: return "relu";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::leaky_relu: return "leaky_relu";
    case UnaryOp::clamp: return "clamp";
    case UnaryOp::pow: return "pow";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::gelu_tanh: return "gelu_tanh";
    case UnaryOp::silu: return "silu";
    case UnaryOp::elu: return "elu";
    case UnaryOp::softplus: return "softplus";
    case UnaryOp::hardtanh: return "hardtanh";
    case UnaryOp::add_scalar: return "add_scalar";
    case UnaryOp::mul_scalar: return "mul_scalar";
    case UnaryOp::div_scalar: return "div_scalar";
    case UnaryOp::rsub_scalar: return "rsub_scalar";
    case UnaryOp::rdiv_scalar: return "rdiv_scalar";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::amax: return "amax";
    case ReduceOp::min: return "min";
  }
  return "?";
}

}  // namespace mixtape
