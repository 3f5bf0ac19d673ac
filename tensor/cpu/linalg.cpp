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

#include "tensor/cpu/convert.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/parallel.h"

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

// The [rows, cols] matrix src[r * rs + c * cs] in fp32, in dst, keeping the stored order of a
// contiguous side (each stored row or column is one load_n): returns how BLAS reads dst.
template <class T>
BlasOperand load_matrix_f32(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, float* dst) {
  if (cs == 1 || rows == 1) {
    for (int64_t r = 0; r < rows; ++r) load_row_to(src + r * rs, cs, cols, dst + r * cols);
    return {true, false, std::max<int64_t>(1, cols)};
  }
  if (rs == 1 || cols == 1) {  // stored column by column: dst holds the transpose
    for (int64_t c = 0; c < cols; ++c) load_row_to(src + c * cs, rs, rows, dst + c * rows);
    return {true, true, std::max<int64_t>(1, rows)};
  }
  for (int64_t r = 0; r < rows; ++r) load_row_to(src + r * rs, cs, cols, dst + r * cols);
  return {true, false, std::max<int64_t>(1, cols)};
}

}  // namespace

bool blas_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return blas_operand(rows, cols, row_stride, col_stride).ok;
}

namespace {

// Note [Deterministic GEMM]
// OpenBLAS splits a GEMM over its threads in a way that depends on the thread count, and the
// sums it forms change with it: the same cnn run gave different weights with 1 and 2 threads.
// So OpenBLAS always runs on one thread (OneBlasThread below), and gemm_raw splits the work
// itself into blocks that depend only on the shapes, handed to the OpenMP threads (Note
// [Deterministic threads] in parallel.h):
//   - wide or tall outputs: blocks of columns (or rows) of C, each a single-threaded GEMM over
//     all of K, so every element is summed exactly as the one-block call sums it;
//   - small outputs with long sums (weight gradients: dW [OC, C*KH*KW] sums over N*OH*OW): K
//     is cut into fixed chunks whose partial products are added to C in chunk order.
// Whatever the thread count, the same blocks are computed by the same calls and combined in the
// same order, so the result is the same bits.
constexpr int64_t kSerialFlops = int64_t(1) << 22;  // below this one call does it all
constexpr int64_t kMaxBlocks = 8;
constexpr int64_t kMinBlockSide = 64;  // columns or rows of C per block
constexpr int64_t kMinBlockK = 2048;   // length of a K chunk

// OpenBLAS's OpenMP build takes its thread count from omp_get_max_threads() on every call made
// outside a parallel region; its pthreads build (when the OpenMP one is not installed) keeps its
// own count. Each call gemm_blocked makes runs with both set to one, so every block is computed
// on the calling thread whatever --threads says.
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

template <class T, class Gemm>
void gemm_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                  int64_t ldb, T beta, T* C, int64_t ldc, Gemm gemm) {
  // The pieces of A, B and C a block reads: row i0 of op(A), column j0 of op(B), row k0 of op(B).
  auto a_at = [&](int64_t i0, int64_t k0) { return trans_a ? A + k0 * lda + i0 : A + i0 * lda + k0; };
  auto b_at = [&](int64_t k0, int64_t j0) { return trans_b ? B + j0 * ldb + k0 : B + k0 * ldb + j0; };
  // Splits [0, n) into `blocks` nearly equal pieces: piece t is [n t / blocks, n (t + 1) / blocks).
  auto bounds = [](int64_t n, int64_t blocks, int64_t t) { return n * t / blocks; };
  if (M * N * K < kSerialFlops) {
    const OneBlasThread one;
    gemm(M, N, K, A, B, beta, C, ldc);
    return;
  }
  if (N >= 2 * kMinBlockSide || M >= 2 * kMinBlockSide) {
    const bool by_columns = N >= M;
    const int64_t side = by_columns ? N : M;
    const int64_t blocks = std::min(kMaxBlocks, side / kMinBlockSide);
    parallel_for(blocks, 1, [&](int64_t t0, int64_t t1) {
      const OneBlasThread one;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t lo = bounds(side, blocks, t), hi = bounds(side, blocks, t + 1);
        if (by_columns) gemm(M, hi - lo, K, a_at(0, 0), b_at(0, lo), beta, C + lo, ldc);
        else gemm(hi - lo, N, K, a_at(lo, 0), b_at(0, 0), beta, C + lo * ldc, ldc);
      }
    });
    return;
  }
  const int64_t blocks = std::clamp<int64_t>(K / kMinBlockK, 1, kMaxBlocks);
  if (blocks == 1) {
    const OneBlasThread one;
    gemm(M, N, K, A, B, beta, C, ldc);
    return;
  }
  std::vector<T> partial(size_t(blocks * M * N));
  parallel_for(blocks, 1, [&](int64_t t0, int64_t t1) {
    const OneBlasThread one;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t lo = bounds(K, blocks, t), hi = bounds(K, blocks, t + 1);
      T* P = partial.data() + t * M * N;
      gemm(M, N, hi - lo, a_at(0, lo), b_at(lo, 0), T(0), P, N);
    }
  });
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T c = beta == T(0) ? T(0) : beta * C[i * ldc + j];
      for (int64_t t = 0; t < blocks; ++t) c += partial[size_t((t * M + i) * N + j)];
      C[i * ldc + j] = c;
    }
}

}  // namespace

void gemm_raw(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum: C = beta * C
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  check_blas_sizes(M, N, K, lda, ldb, ldc);
  gemm_blocked(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc,
               [&](int64_t m, int64_t n, int64_t k, const float* a, const float* b, float bt, float* c, int64_t ldc_) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(m),
                blasint(n), blasint(k), 1.0f, a, blasint(lda), b, blasint(ldb), bt, c, blasint(ldc_));
  });
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
  gemm_blocked(
      trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc,
      [&](int64_t m, int64_t n, int64_t k, const double* a, const double* b, double bt, double* c, int64_t ldc_) {
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(m),
                blasint(n), blasint(k), 1.0, a, blasint(lda), b, blasint(ldb), bt, c, blasint(ldc_));
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
      BlasOperand la, lb;
      for (size_t i = 0; i < offs.size(); ++i) {
        if (offs[i][0] != last_a) la = load_matrix_f32(pa + offs[i][0], M, K, ars, acs, abuf.data());
        if (offs[i][1] != last_b) lb = load_matrix_f32(pb + offs[i][1], K, N, brs, bcs, bbuf.data());
        last_a = offs[i][0];
        last_b = offs[i][1];
        gemm_raw(la.trans, lb.trans, M, N, K, abuf.data(), la.ld, bbuf.data(), lb.ld, 0.0f, cbuf.data(), N);
        if (bias.defined())
          for (int64_t r = 0; r < M; ++r)
            for (int64_t j = 0; j < N; ++j) cbuf[size_t(r * N + j)] += bias_c[size_t(j)];
        store_n(cbuf.data(), po + int64_t(i) * M * N, M * N);
      }
    }
  });
}

}  // namespace mixtape::cpu
