// mixtape's own GEMM for f32, f16 and bf16 operands, accumulating in fp32 (Note [Own GEMM] in
// gemm.cpp). f64 stays with OpenBLAS (linalg.h): it only serves the gradient checks.
#pragma once

#include <cstdint>
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

// The arithmetic of a GEMM whose operands are stored as `dtype` (f32, f16 or bf16): dot_bf16 for
// bf16, fma_f32 otherwise.
GemmArith gemm_arith_for(DType dtype);

// One GEMM operand: the logical matrix element (r, c) is p[r * rs + c * cs], stored as dtype
// (f32, f16 or bf16; any strides, 0 included).
struct GemmOperand {
  DType dtype;
  const void* p;
  int64_t rs, cs;
};

// C[M, N] (f32, row-major, leading dimension ldc) = (accumulate ? C : 0) + A[M, K] B[K, N] with
// the given arithmetic. Split over the OpenMP threads by blocks that depend only on the shapes,
// so the result is the same bits for any thread count and any vector path. Under dot_bf16 the
// operands must hold bf16 values (bf16 tensors, or f32 buffers loaded from them).
void gemm(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, bool accumulate,
          float* C, int64_t ldc);

// B[K, N] packed once for many GEMMs that share it, each on one thread (an LSTM layer's
// recurrent weight, read at every time step by every thread's rows): the panels each gemm() call
// would otherwise pack again, laid out for the vector path active when it was made. B's storage
// must outlive it (the reference path reads B in place).
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
