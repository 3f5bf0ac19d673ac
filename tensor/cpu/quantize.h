// CPU kernels of the scaled 8-bit operands (tensor/ops/quantize.h): block maxima, the rounding of
// each block to its codes, and the epilogue of the 8-bit GEMM.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// amax[rb][cb] = the largest |x| over block (rb, cb) of the 2-D x (blocks of br x bc elements,
// the last ones ragged); NaN when the block holds a NaN, inf when it holds an inf and no NaN.
// amax holds ceil(R / br) x ceil(C / bc) floats. The result is the same for any split.
void block_amax(const Strided& x, int64_t br, int64_t bc, float* amax);

// What quantize_blocks saw (tensor/ops/quantize.h QuantStats, without the scales).
struct QuantCounts {
  int64_t saturated = 0, flushed = 0, subnormal = 0, nonfinite = 0;
  float amax = 0.0f;  // over the finite elements
};

// codes[r][c] (contiguous [R, C]) = from_float_rn(x[r][c] * s[block of (r, c)], format, overflow):
// every rounding of a tensor to an 8-bit format with a scale happens here.
QuantCounts quantize_blocks(const Strided& x, int64_t br, int64_t bc, const float* s, const bits8::Format& format,
                            bits8::Overflow overflow, uint8_t* codes);

// y[M, N] = c[i][j] * (oa[i] * ob[j]) + bias[j], rounded once to y's dtype: the fp32 products
// of an 8-bit GEMM (c, contiguous f32) scaled by the factors that are constant along K (oa, ob:
// nullptr reads as 1) and biased (bias undefined: none). y is contiguous.
void scaled_gemm_epilogue(const float* c, int64_t M, int64_t N, const float* oa, const float* ob, const Strided& bias,
                          const Strided& y);

}  // namespace mixtape::cpu
