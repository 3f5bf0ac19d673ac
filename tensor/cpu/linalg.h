// GEMM CPU kernels. f32, f16 and bf16 run on the own GEMM (gemm.h, Note [Own GEMM]), which
// reads 16-bit operands as they are stored and accumulates in fp32; a 16-bit output is rounded
// once (Note [16-bit GEMM] in linalg.cpp). f64 goes to OpenBLAS's dgemm.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"
#include "tensor/cpu/gemm.h"

namespace mixtape::cpu {

// Row-major C[M, N] = op(A)[M, K] op(B)[K, N] (+ C when accumulating), where op(A) = A^T when
// trans_a (A then stored as [K, M] with leading dimension lda). The f32 form runs the own GEMM
// with the given arithmetic (its operands hold bf16 values under dot_bf16); the f64 form runs
// OpenBLAS, whose sizes must fit a blasint. Both split over the threads as gemm_blocks.h says.
void gemm_raw(GemmArith arith, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
              const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc);
void gemm_raw(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
              const double* B, int64_t ldb, bool accumulate, double* C, int64_t ldc);

// out[..., M, N] = a[..., M, K] b[..., K, N] (+ bias[N] on every row), one GEMM per batch entry.
// a and b carry out's batch dims (broadcast entries with stride 0); the last two dims of each
// are row-major or column-major (blas_layout_ok). `bias` may be undefined. `out` is contiguous.
void matmul(const Strided& a, const Strided& b, const Strided& bias, const Strided& out);

// Whether a logical [rows, cols] matrix with these strides is a BLAS operand as it is: row-major
// (col stride 1) or column-major (row stride 1) with a valid leading dimension.
bool blas_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

}  // namespace mixtape::cpu
