// Note [16-bit GEMM]
// A 16-bit GEMM hands its operands to the own GEMM (gemm.h) as they are stored: the GEMM widens
// f16 to f32, or pairs bf16 values for its bf16 dot products, while it packs its panels, so there
// is no conversion pass over the operands. Products are accumulated in fp32 (Note [Own GEMM]),
// the bias is added in fp32, and each output element is rounded once with store_n (RNE). This is
// what a Tensor Core GEMM with fp32 accumulation computes, up to summation order (and, for bf16,
// the flushing of values below 2^-126).
#include "tensor/cpu/linalg.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_blocks.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/workspace.h"

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

}  // namespace

bool blas_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return blas_operand(rows, cols, row_stride, col_stride).ok;
}

namespace {

// OpenBLAS's OpenMP build takes its thread count from omp_get_max_threads() on every call made
// outside a parallel region; its pthreads build (when the OpenMP one is not installed) keeps its
// own count. Each block of a blocked f64 GEMM (Note [Deterministic GEMM] in gemm_blocks.h) runs
// with both set to one, so it is computed on the calling thread whatever --threads says.
struct OneBlasThread {
  int saved = omp_get_max_threads();
  OneBlasThread() {
    static const bool pinned = [] {
      openblas_set_num_threads(1);  // the OpenMP build also sets the OpenMP count: restored below
      return true;
    }();
    (void)pinned;
    omp_set_num_threads(1);
  }
  ~OneBlasThread() { omp_set_num_threads(saved); }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;
};

}  // namespace

void gemm_raw(GemmArith arith, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
              const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  const GemmOperand a = trans_a ? GemmOperand{DType::f32, A, 1, lda} : GemmOperand{DType::f32, A, lda, 1};
  const GemmOperand b = trans_b ? GemmOperand{DType::f32, B, 1, ldb} : GemmOperand{DType::f32, B, ldb, 1};
  gemm(arith, M, N, K, a, b, accumulate, C, ldc);
}

void gemm_raw(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
              const double* B, int64_t ldb, bool accumulate, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0);
    return;
  }
  check_blas_sizes(M, N, K, lda, ldb, ldc);
  // Element (r, c) of op(A) is at a_at(r, c), of op(B) at b_at(r, c).
  auto a_at = [&](int64_t r, int64_t c) { return trans_a ? A + c * lda + r : A + r * lda + c; };
  auto b_at = [&](int64_t r, int64_t c) { return trans_b ? B + c * ldb + r : B + r * ldb + c; };
  gemm_blocked(
      M, N, K, accumulate, C, ldc,
      [&](int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t k0, int64_t k, bool acc, double* c, int64_t ldc_c) {
    const OneBlasThread one;
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(m),
                blasint(n), blasint(k), 1.0, a_at(i0, k0), blasint(lda), b_at(k0, j0), blasint(ldb), acc ? 1.0 : 0.0, c,
                blasint(ldc_c));
      });
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
    if constexpr (std::is_same_v<T, double>) {
      // f64: BLAS reads the operands in place; transposed views become CblasTrans.
      const BlasOperand la = blas_operand(M, K, ars, acs), lb = blas_operand(K, N, brs, bcs);
      MT_ASSERT(la.ok && lb.ok, "matmul: operand layout not BLAS-compatible: ", a.meta(), " ", shape_str(a.strides()),
                " x ", b.meta(), " ", shape_str(b.strides()));
      for (size_t i = 0; i < offs.size(); ++i) {
        T* c = po + int64_t(i) * M * N;
        if (bias.defined())
          for (int64_t r = 0; r < M; ++r) std::copy(bias_c.begin(), bias_c.end(), c + r * N);
        gemm_raw(la.trans, lb.trans, M, N, K, pa + offs[i][0], la.ld, pb + offs[i][1], lb.ld, bias.defined(), c, N);
      }
    } else {
      // f32, f16, bf16: the own GEMM reads the operands as they are stored (Note [16-bit GEMM]);
      // each sum starts from the bias. A 16-bit output is summed in an f32 buffer, rounded once.
      float* cbuf = std::is_same_v<T, float> ? nullptr : workspace<float>(Workspace::matmul_output, M * N);
      for (size_t i = 0; i < offs.size(); ++i) {
        float* c = std::is_same_v<T, float> ? reinterpret_cast<float*>(po) + int64_t(i) * M * N : cbuf;
        if (bias.defined())
          for (int64_t r = 0; r < M; ++r) std::copy(bias_c.begin(), bias_c.end(), c + r * N);
        gemm(gemm_arith_for(out.dtype()), M, N, K, {a.dtype(), pa + offs[i][0], ars, acs},
             {b.dtype(), pb + offs[i][1], brs, bcs}, bias.defined(), c, N);
        if constexpr (!std::is_same_v<T, float>) store_n(cbuf, po + int64_t(i) * M * N, M * N);
      }
    }
  });
}

}  // namespace mixtape::cpu
