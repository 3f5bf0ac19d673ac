// CPU kernels of the scaled 8-bit operands (tensor/ops/quantize.h): quantizing a matrix block by
// block, and the 8-bit GEMM with its epilogue. The CUDA launchers of the same names mirror them.
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/core/half.h"
#include "tensor/core/scale_formulas.h"
#include "tensor/core/strided.h"
#include "tensor/cpu/gemm.h"

namespace mixtape::cpu {

// x [R, K] (floating, any strides) -> codes [R, K] (contiguous, q.format) and scale_inv
// [ceil(R / br), ceil(K / bc)] (f32, contiguous): each block's amax (NaN wins; inf when the block
// holds one), its s = scales::block_scale(q, amax), codes = from_float_rn(x * s), scale_inv =
// 1 / s. Under the nvfp4 rule (Note [Two-level scales] in scale_formulas.h) scale_inv holds each
// block's d_b and tensor_scale_inv (f32 [1]; undefined under the other rules) 1 / S. stats: i64
// [kQuantStats] (QuantStat). Every rounding of a tensor to an 8-bit format with a scale happens
// here. The result is the same for any thread count.
void quantize(const Strided& x, const BlockQuant& q, const Strided& codes, const Strided& scale_inv,
              const Strided& tensor_scale_inv, const Strided& stats);

// B's packed panels kept across the GEMMs of one operand b (Note [Reused 8-bit B operands] in
// quantize.cpp): which codes they were packed from, and how often b has been multiplied.
struct ReusedB {
  std::unique_ptr<PackedB> packed;
  const void* codes = nullptr;
  int64_t rs = 0, cs = 0, n = 0, k = 0;
  int uses = 0;
};

// y [M, N] = a [M, K] b [N, K]^T (+ bias [N]) in the values the codes stand for; each operand is its
// codes (any strides) with scale_inv (contiguous) over blocks of *_br x *_bc, and, for a two-level
// operand (the nvfp4 rule), its 1 / S in *_tensor_inv (f32 [1], else undefined). Scales that
// change along K (blocks shorter than K: powers of two, or a two-level operand's d_b at any block
// size) are applied by the GEMM as it widens the codes, scales constant along K (and 1 / S)
// multiply the fp32 sums: y = sum * (sa[i] * sb[j]) + bias[j], rounded once. `reuse`
// (optional): b's entry, which keeps b packed from its second GEMM on (the same bits). With
// `images` > 0 the M rows are the pixels of that many images and y (contiguous, M N elements) is
// laid out [images, N, M / images]: row n HW + p, column j at y[n][j][p] (Note [Image rows]).
void scaled_matmul_nt(const Strided& a, const Strided& a_scale_inv, int64_t a_br, int64_t a_bc,
                      const Strided& a_tensor_inv, const Strided& b, const Strided& b_scale_inv, int64_t b_br,
                      int64_t b_bc, const Strided& b_tensor_inv, const Strided& bias, const Strided& y,
                      ReusedB* reuse = nullptr, int64_t images = 0);

// The fp32 sums of scaled_matmul_nt(a, b) into y [M, N] (f32, contiguous) before its epilogue, for
// two operands of one block each (per tensor), and the factor fa * fb of that epilogue:
// scaled_matmul_nt's f32 output without a bias is scaled_sum(y, fa, fb, 0) = y * factor + 0,
// element by element. For a consumer that applies the factor as it reads y (col2im's scale).
float scaled_sums_nt(const Strided& a, const Strided& a_scale_inv, const Strided& b, const Strided& b_scale_inv,
                     const Strided& y);

// The pieces of quantize() for a kernel that quantizes rows of its own (the 8-bit LSTM recurrence,
// tensor/cpu/lstm.cpp): the same maximum, the same codes and counts, row by row.
struct RowCounts {
  int64_t saturated = 0, flushed = 0, subnormal = 0, nonfinite = 0;
  float amax = 0.0f;  // over the finite elements
  RowCounts& operator+=(const RowCounts& o) {
    saturated += o.saturated;
    flushed += o.flushed;
    subnormal += o.subnormal;
    nonfinite += o.nonfinite;
    amax = amax > o.amax ? amax : o.amax;
    return *this;
  }
};
// max(m, |v[i]|) over i < n, NaN when any v[i] is NaN (quantize's amax pass).
float row_amax(const bfloat16* v, int64_t n, float m);
float row_amax(const half* v, int64_t n, float m);
float row_amax(const float* v, int64_t n, float m);
// The maximum of two row_amax results, NaN winning (their order does not matter).
float amax_join(float m, float a);
// out[i] = the code of v[i] * s in q.format with q.overflow, and the counts (quantize's codes pass).
void quantize_row(const BlockQuant& q, const bfloat16* v, int64_t n, float s, uint8_t* out, RowCounts& c);
void quantize_row(const BlockQuant& q, const half* v, int64_t n, float s, uint8_t* out, RowCounts& c);
void quantize_row(const BlockQuant& q, const float* v, int64_t n, float s, uint8_t* out, RowCounts& c);
// The 8-bit GEMM's epilogue for one element: the fp32 sum times the factors of the two operands'
// scales constant along K, plus the bias (scaled_matmul_nt's expression, in one place).
inline float scaled_sum(float sum, float fa, float fb, float bias) { return sum * (fa * fb) + bias; }

}  // namespace mixtape::cpu
