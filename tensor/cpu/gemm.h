// mixtape's own GEMM for f32, f16, bf16 and 8-bit operands, accumulating in fp32 (Note [Own GEMM]
// and Note [8-bit GEMM operands] in gemm.cpp). f64 stays with OpenBLAS (linalg.h): it only serves
// the gradient checks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/core/dtype.h"

namespace mixtape::cpu {

// How a GEMM forms each output element c[i][j] from c0 (C's old value when accumulating, else 0)
// and the products a[i][k] b[k][j]. Both are fixed sequences of fp32 operations, so every vector
// path computes the same bits (Note [Own GEMM]).
enum class GemmArith {
  // acc = c0; for k = 0 .. K-1: acc = fma(a[i][k], b[k][j], acc).
  fma_f32,
  // The operands hold bf16 values; k runs in pairs (2p, 2p+1), K odd counting a zero at K:
  //   acc = daz(c0); for p: acc = ftz(fma(a[2p+1] b[2p+1] + acc)); acc = ftz(fma(a[2p] b[2p] + acc))
  // with subnormal operands read as zero (daz) and subnormal results flushed to zero (ftz): what
  // one lane of AVX512_BF16's vdpbf16ps computes.
  dot_bf16,
};

// The arithmetic of a GEMM whose operands are stored as `dtype`: dot_bf16 for bf16 and the 8-bit
// dtypes (their values are bf16 values), fma_f32 for f32 and f16. For two operands: dot_bf16 when
// both take it, else fma_f32 (an 8-bit or bf16 operand against an f32 or f16 one).
GemmArith gemm_arith_for(DType dtype);
GemmArith gemm_arith_for(DType a, DType b);

// The power-of-two scales of an 8-bit operand's blocks (Note [8-bit GEMM operands]): the logical
// element (r, c) stands for to_float(code) * s[((r + r0) / br) * srs + ((c + c0) / bc) * scs].
// s == nullptr: no scales (each element is its decoded code). r0, c0 (>= 0): where this operand
// starts within the matrix the scales describe (the GEMM moves them with the pointer as it cuts
// the operand into blocks). Each scale must be a power of two (or NaN, which makes its block
// NaN); like the codes, the scales must outlive a PackedB made of them. A scale that factors out
// of the whole dot product (per tensor, per row of A, per column of B) need not be one: apply it
// to the fp32 output instead.
struct GemmScales {
  const float* s = nullptr;
  int64_t br = 1, bc = 1, srs = 0, scs = 0, r0 = 0, c0 = 0;
};

// One GEMM operand: the logical matrix element (r, c) is p[r * rs + c * cs] (any strides, 0
// included), stored as dtype: f32, f16, bf16, or one of the 8-bit dtypes (e4m3, e5m2, e3m2, e2m3,
// e2m1: one code a byte), whose element is its code's value times its block's scale.
struct GemmOperand {
  DType dtype;
  const void* p;
  int64_t rs, cs;
  GemmScales scales{};  // 8-bit dtypes only
};

// C[M, N] (f32, row-major, leading dimension ldc) = (accumulate ? C : 0) + A[M, K] B[K, N] with
// the given arithmetic. Split over the OpenMP threads by blocks that depend only on the shapes,
// so the result is the same bits for any thread count and any vector path. Under dot_bf16 the
// operands must hold bf16 values (bf16 tensors, f32 buffers loaded from them, or 8-bit codes).
void gemm(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, bool accumulate,
          float* C, int64_t ldc);
// The same, calling done(i0, m, j0, n) for each block of C (rows [i0, i0 + m), columns [j0, j0 + n))
// once its values are final, on the thread that computed it (gemm_blocks.h's gemm_blocked): an
// epilogue without a parallel region of its own.
using GemmBlockDone = std::function<void(int64_t i0, int64_t m, int64_t j0, int64_t n)>;
void gemm(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, bool accumulate,
          float* C, int64_t ldc, const GemmBlockDone& done);

// B[K, N] packed once for many GEMMs that share it, each on one thread (an LSTM layer's
// recurrent weight, read at every time step by every thread's rows): the panels each gemm() call
// would otherwise pack again, laid out for the vector path active when it was made. B's storage
// (and its scales) must outlive it (the reference path reads B in place).
class PackedB {
 public:
  PackedB(GemmArith arith, int64_t N, int64_t K, const GemmOperand& B);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }

 private:
  friend void gemm_on_thread(int64_t M, const GemmOperand& A, const PackedB& B, bool accumulate, float* C, int64_t ldc);
  GemmArith arith_;
  int64_t n_, k_;
  GemmOperand b_;
  const void* path_;                   // the path whose panel layout this is
  std::vector<float> f32_panels_;      // fma_f32
  std::vector<uint32_t> pair_panels_;  // dot_bf16: bf16 pairs
};

// C[M, N] = (accumulate ? C : 0) + A B on the calling thread alone, for kernels that split their
// work over the threads themselves (by rows of A). Each element is summed over all of K in one
// chain, which is gemm()'s result for every shape but the split-K ones of gemm_blocks.h (M and N
// below 128 with K of 4096 or more).
void gemm_on_thread(int64_t M, const GemmOperand& A, const PackedB& B, bool accumulate, float* C, int64_t ldc);

// The same with B as it is (packed here, block by block, as gemm() packs it): gemm()'s bits
// for every shape gemm_splits_k (gemm_blocks.h) says it does not cut along K.
void gemm_on_thread(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B,
                    bool accumulate, float* C, int64_t ldc);

// The GEMM's vector path: "avx512bf16" (AVX-512 with vdpbf16ps), "avx512" (AVX-512F; dot_bf16
// emulated), "avx2" (AVX2 + FMA), or "scalar" (the reference: the formulas above, one element at
// a time). gemm_paths() lists those this CPU runs, the reference first and the default last;
// set_gemm_path selects one for the whole process (tests compare them) and throws for a path the
// CPU lacks.
const char* gemm_path();
std::vector<std::string> gemm_paths();
void set_gemm_path(std::string_view name);

}  // namespace mixtape::cpu
