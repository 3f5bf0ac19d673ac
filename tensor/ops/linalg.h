// Matrix products on plain tensors (no autograd): matmul, bmm, linear, and the tensor-level
// pieces of their gradients. Every product accumulates in fp32 (f64 for f64) and rounds its
// output once (Note [16-bit GEMM] in tensor/cpu/linalg.cpp). Transposed views are handed to
// BLAS as they are (CblasTrans); other non-contiguous operands are copied first.
#pragma once

#include "tensor/tensor.h"

namespace mixtape {

// a [..., M, K] x b [..., K, N] -> [..., M, N] with the batch dims broadcast (NumPy/PyTorch).
// A 1-D a acts as [1, K] and a 1-D b as [K, 1]; that unit dim is dropped from the result.
// [..., M, K] x [K, N] folds the leading dims into M and runs one GEMM.
Tensor matmul(const Tensor& a, const Tensor& b);
// [B, M, K] x [B, K, N] -> [B, M, N], no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
// y = x w^T + b: x [..., in], w [out, in], b [out] or undefined -> [..., out]. The bias is
// added in the accumulation type before the output is rounded.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// Gradients of y = matmul(a, b) for operands with at least 2 dims, summed over the batch dims
// the operand was broadcast along. A 2-D operand against a batched dy folds the batch into the
// contraction, so its gradient is one GEMM with one rounding.
// da = dy b^T: (..., M, K) = (..., M, N) (..., K, N)^T
Tensor matmul_backward_a(const Tensor& dy, const Tensor& b, const Shape& a_shape);
// db = a^T dy: (..., K, N) = (..., M, K)^T (..., M, N)
Tensor matmul_backward_b(const Tensor& dy, const Tensor& a, const Shape& b_shape);

// Gradients of y = linear(x, w, b) with dy [..., out].
// dx = dy w: (..., in) = (..., out) (out, in)
Tensor linear_backward_input(const Tensor& dy, const Tensor& w);
// dw = dy^T x over every row: (out, in) = (rows, out)^T (rows, in)
Tensor linear_backward_weight(const Tensor& dy, const Tensor& x);
// db = sum of dy over every row: (out)
Tensor linear_backward_bias(const Tensor& dy);

}  // namespace mixtape
