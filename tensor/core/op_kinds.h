// Names of the elementwise and reduction ops, shared by the front-ends, the CPU kernels and the
// CUDA launchers so that one kernel per family serves every op of the family.
#pragma once

#include <cstdint>

namespace mixtape {

// y = f(x; a, b). Scalars a, b are used by the ops that name them.
enum class UnaryOp : uint8_t {
  neg,
  exp,
  log,
  sqrt,
  abs,
  relu,
  sigmoid,
  tanh,
  leaky_relu,   // a: negative slope
  clamp,        // a: lo, b: hi
  pow,          // a: exponent
  gelu,         // x * Phi(x), Phi the standard normal CDF (erf)
  gelu_tanh,    // GELU's tanh approximation
  silu,         // x * sigmoid(x)
  elu,          // a: alpha
  softplus,     // a: beta, b: threshold (x where beta x > threshold)
  hardtanh,     // a: min_val, b: max_val
  add_scalar,   // x + a
  mul_scalar,   // x * a
  div_scalar,   // x / a
  rsub_scalar,  // a - x
  rdiv_scalar,  // a / x
};
const char* unary_op_name(UnaryOp op);

enum class BinaryOp : uint8_t { add, sub, mul, div };
const char* binary_op_name(BinaryOp op);

enum class ReduceOp : uint8_t { sum, mean, max, amax, min };
const char* reduce_op_name(ReduceOp op);

}  // namespace mixtape
