// Note [16-bit GEMM]
// A 16-bit GEMM loads both operands into f32 buffers (exact: every f16/bf16 value is an f32),
// multiplies them with sgemm, so products and sums are formed and accumulated in fp32, adds the
// bias in fp32, and rounds each output element once with store<T> (RNE). This is what a Tensor
// Core GEMM with fp32 accumulation computes, up to summation order; on small integer inputs
// (exact in fp32) the result is bit-identical to rounding the f32 GEMM.
#include "tensor/cpu/linalg.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/loops.h"

namespace mixtape::cpu {

namespace {

// A [rows, cols] matrix view as a row-major BLAS operand: trans = stored column-major.
struct BlasOperand {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

BlasOperand blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const int64_t min_ld_rm = std::max<int64_t>(1, cols), min_ld_cm = std::max<int64_t>(1, rows);
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= min_ld_rm)) return {true, false, rows == 1 ? min_ld_rm : rs};
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= min_ld_cm)) return {true, true, cols == 1 ? min_ld_cm : cs};
  return {};
}

void check_blas_sizes(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    MT_CHECK(v <= INT_MAX, "gemm: size ", v, " exceeds the BLAS integer range (M=", M, ", N=", N, ", K=", K, ")");
}

// dst[r * cols + c] = src[r * rs + c * cs] in fp32; the loop order follows the contiguous side.
template <class T>
void load_matrix_f32(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  if (cs == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* s = src + r * rs;
      float* d = dst + r * cols;
      for (int64_t c = 0; c < cols; ++c) d[c] = load(s[c]);
    }
  } else if (rs == 1) {
    for (int64_t c = 0; c < cols; ++c) {
      const T* s = src + c * cs;
      for (int64_t r = 0; r < rows; ++r) dst[r * cols + c] = load(s[r]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = load(src[r * rs + c * cs]);
  }
}

}  // namespace

bool blas_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return blas_operand(rows, cols, row_stride, col_stride).ok;
}

void gemm_raw(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  check_blas_sizes(M, N, K, lda, ldb, ldc);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(M),
              blasint(N), blasint(K), 1.0f, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

void gemm_raw(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[i * ldc + j];
    return;
  }
  check_blas_sizes(M, N, K, lda, ldb, ldc);
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(M),
              blasint(N), blasint(K), 1.0, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

void matmul(const Strided& a, const Strided& b, const Strided& bias, const Strided& out) {
  const size_t nd = size_t(out.dim());
  MT_ASSERT(nd >= 2 && a.dim() == out.dim() && b.dim() == out.dim() && out.is_contiguous());
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[nd - 1];
  if (out.numel() == 0) return;
  const int64_t ars = a.strides()[nd - 2], acs = a.strides()[nd - 1];
  const int64_t brs = b.strides()[nd - 2], bcs = b.strides()[nd - 1];

  // Offsets of each batch entry's A and B (out is contiguous: entry i starts at i * M * N).
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const Shape a_bst(a.strides().begin(), a.strides().end() - 2), b_bst(b.strides().begin(), b.strides().end() - 2);
  std::vector<std::array<int64_t, 2>> offs;
  for_each_offset<2>(batch, {a_bst, b_bst}, [&](const std::array<int64_t, 2>& o) { offs.push_back(o); });

  dispatch_floating(out.dtype(), "matmul", [&]<class T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    std::vector<C> bias_c;
    if (bias.defined()) {
      const T* pbias = static_cast<const T*>(bias.raw_data());
      bias_c.resize(size_t(N));
      for (int64_t j = 0; j < N; ++j) bias_c[size_t(j)] = load(pbias[j * bias.strides()[0]]);
    }
    if constexpr (std::is_same_v<T, C>) {
      // f32 / f64: BLAS reads the operands in place; transposed views become CblasTrans.
      const BlasOperand la = blas_operand(M, K, ars, acs), lb = blas_operand(K, N, brs, bcs);
      MT_ASSERT(la.ok && lb.ok, "matmul: operand layout not BLAS-compatible: ", a.meta(), " ", shape_str(a.strides()),
                " x ", b.meta(), " ", shape_str(b.strides()));
      for (size_t i = 0; i < offs.size(); ++i) {
        T* c = po + int64_t(i) * M * N;
        if (bias.defined())
          for (int64_t r = 0; r < M; ++r) std::copy(bias_c.begin(), bias_c.end(), c + r * N);
        gemm_raw(la.trans, lb.trans, M, N, K, pa + offs[i][0], la.ld, pb + offs[i][1], lb.ld,
                 bias.defined() ? T(1) : T(0), c, N);
      }
    } else {
      // f16 / bf16: Note [16-bit GEMM]. A broadcast operand (same offset as the previous entry)
      // is converted once.
      std::vector<float> abuf(size_t(M * K)), bbuf(size_t(K * N)), cbuf(size_t(M * N));
      int64_t last_a = -1, last_b = -1;
      for (size_t i = 0; i < offs.size(); ++i) {
        if (offs[i][0] != last_a) load_matrix_f32(pa + offs[i][0], M, K, ars, acs, abuf.data());
        if (offs[i][1] != last_b) load_matrix_f32(pb + offs[i][1], K, N, brs, bcs, bbuf.data());
        last_a = offs[i][0];
        last_b = offs[i][1];
        gemm_raw(false, false, M, N, K, abuf.data(), std::max<int64_t>(1, K), bbuf.data(), std::max<int64_t>(1, N),
                 0.0f, cbuf.data(), N);
        T* c = po + int64_t(i) * M * N;
        if (bias.defined()) {
          for (int64_t r = 0; r < M; ++r)
            for (int64_t j = 0; j < N; ++j) c[r * N + j] = store<T>(cbuf[size_t(r * N + j)] + bias_c[size_t(j)]);
        } else {
          for (int64_t k = 0; k < M * N; ++k) c[k] = store<T>(cbuf[size_t(k)]);
        }
      }
    }
  });
}

}  // namespace mixtape::cpu
