// Differentiable matrix products. These are GEMM-like nodes (Zhao et al., autograd/scaling.h):
// the gradient of each activation operand is computed from beta * dY with beta from gemm_beta
// and carries scale beta * alpha; weight and bias gradients keep the incoming scale alpha.
#pragma once

#include "autograd/variable.h"

namespace mixtape {

// Same shapes and broadcasting as the tensor-level matmul (tensor/ops/linalg.h). Both operands
// are treated as activations: each gradient asks gemm_beta with the other operand as `w`.
Variable matmul(const Variable& a, const Variable& b);
// [B, M, K] x [B, K, N] -> [B, M, N]; both operands are activations, as in matmul.
Variable bmm(const Variable& a, const Variable& b);
// y = x w^T + b: x [..., in], w [out, in], b [out] or an undefined Variable for none.
Variable linear(const Variable& x, const Variable& w, const Variable& b = Variable());

}  // namespace mixtape
