// Scaled 8-bit GEMM operands: quantize a matrix to an 8-bit format with one scale per block,
// read it back, and multiply two of them (Note [Scaled 8-bit operands]).
//
// Note [Scaled 8-bit operands]
// An 8-bit format holds a few binades (E4M3: 2^-9 .. 448, E5M2: 2^-16 .. 57344, E2M1: 0.5 .. 6),
// so a tensor is stored as codes of x * s with a scale s chosen per block of elements, and each
// GEMM reads the codes together with 1 / s. The operand is always a matrix [rows, K] whose
// columns run along the GEMM's reduction dim K (a caller that needs the other orientation
// quantizes a transposed view, as Transformer Engine keeps a transposed copy). The recipes of the
// field are layouts of blocks plus a scaling rule (Note [Scaling rules] in scale_formulas.h):
//   per tensor      one block                       {0, 0}      amax rule (current or delayed)
//   rowwise         one block per row               {1, 0}      amax rule (torchao)
//   MX              1 x 32 along K                  {1, 32}     pow2_floor (OCP) or pow2_up
//   DeepSeek-V3     1 x 128 activations/gradients   {1, 128}    pow2_up
//                   128 x 128 weights               {128, 128}  pow2_up
//   NVFP4           1 x 16 activations/gradients    {1, 16}     nvfp4 (E4M3 block scales under an
//                   16 x 16 weights                 {16, 16}    fp32 tensor scale)
// (ScaleLayout's 0 means "the whole extent".) In the GEMM, a scale that is constant along K
// (per tensor, rowwise) factors out of every dot product and multiplies the fp32 result; a
// scale that changes along K (MX, DeepSeek) must be a power of two, and the GEMM applies it
// exactly while it widens the codes (Note [8-bit GEMM operands] in tensor/cpu/gemm.cpp). NVFP4's
// E4M3 block scales are applied the same way (exact too), and its tensor scale multiplies the fp32
// result (Note [Two-level scales] in tensor/core/scale_formulas.h).
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/core/scale_formulas.h"
#include "tensor/tensor.h"

namespace mixtape {

// ScaleRule (tensor/core/scale_formulas.h): amax, pow2_floor, pow2_up.
const char* scale_rule_name(ScaleRule r);  // "amax", "pow2-floor", "pow2-up", "nvfp4"

// Blocks of block_rows x block_cols elements of the [rows, K] operand; 0: the whole extent.
struct ScaleLayout {
  int64_t block_rows = 0, block_cols = 0;
  bool operator==(const ScaleLayout&) const = default;
};

struct QuantSpec {
  DType format = DType::e4m3;  // e4m3, e5m2, e3m2, e2m3, e2m1
  ScaleLayout layout{};
  ScaleRule rule = ScaleRule::amax;
  bits8::Overflow overflow = bits8::Overflow::saturate;
  int margin = 0;               // the amax rule's 2^-margin headroom
  float given_scale = 0.0f;     // > 0: this s for every block instead of the rule's (delayed scaling;
                                // per-tensor layout only); 0: the rule's s from each block's amax
  float fallback_scale = 1.0f;  // the amax rule's s for a block whose amax is 0 or not finite
  bool operator==(const QuantSpec&) const = default;
};

// What quantizing did, over the finite elements (telemetry: Note [Scaled 8-bit operands]).
struct QuantStats {
  int64_t count = 0;      // elements
  int64_t saturated = 0;  // finite x whose x s rounds past max_finite: clamped, or inf / NaN without saturation
  int64_t flushed = 0;    // finite nonzero x whose code is zero
  int64_t subnormal = 0;  // codes that are nonzero subnormals of the format
  int64_t nonfinite = 0;  // inf or NaN elements of x
  float amax = 0.0f;      // the largest finite |x| (the history of delayed scaling records it)
  float scale_inv_min = 0.0f, scale_inv_max = 0.0f;  // the range of 1 / s over the blocks
};

namespace cpu {
struct ReusedB;  // tensor/cpu/quantize.h
}

// What a backend keeps from multiplying an operand as a GEMM's B, for its next use (Note [Reused
// 8-bit B operands] in tensor/cpu/quantize.cpp): one entry per orientation (the operand, and
// its t()), shared by the operand's copies.
struct PreparedOperand {
  std::shared_ptr<cpu::ReusedB> as_b[2];
};

// An 8-bit operand: element (r, c) of the [rows, cols] matrix stands for
// to_float(codes[r][c]) * scale_inv[r / block_rows][c / block_cols] (* tensor_scale_inv[0]: the
// nvfp4 rule's second level).
struct Quantized {
  Tensor codes;                            // [rows, cols], an 8-bit dtype (quantize: contiguous)
  Tensor scale_inv;                        // f32 [ceil(rows / block_rows), ceil(cols / block_cols)]
  Tensor tensor_scale_inv;                 // f32 [1], 1 / S under the nvfp4 rule; else undefined
  int64_t block_rows = 1, block_cols = 1;  // the layout with 0 resolved to the extents
  ScaleRule rule = ScaleRule::amax;
  QuantStats stats;
  std::shared_ptr<PreparedOperand> prepared;  // made by quantize(); t() keeps it
  bool transposed = false;                    // t() of the operand quantize() made
  int64_t rows() const { return codes.size(0); }
  int64_t cols() const { return codes.size(1); }
  // The operand of x^T, without a copy: the codes transposed (a view) and the scales with them.
  Quantized t() const;
};

// x: a floating 2-D tensor (any strides). Throws for a non-8-bit format, a given_scale with a
// block layout, or a block size < 0.
Quantized quantize(const Tensor& x, const QuantSpec& spec);
// Each element as the value it stands for (code x scale, rounded once to dtype).
Tensor dequantize(const Quantized& q, DType dtype = DType::f32);
// y [M, N] = a [M, K] b [N, K]^T (+ bias [N]), the values a and b stand for multiplied exactly and
// summed in fp32, scaled and biased in fp32, rounded once to out_dtype (f32, f16 or bf16). A
// scale that changes along K must be a power of two (rules pow2_floor and pow2_up) or a two-level
// operand's E4M3 block scale (rule nvfp4).
Tensor scaled_matmul_nt(const Quantized& a, const Quantized& b, const Tensor& bias, DType out_dtype);

// Note [Image rows]
// A convolution over pixel-major columns (autograd/functions/conv.cpp) multiplies rows that are
// the pixels of N images, and wants its output as NCHW. This product returns it so: y [images,
// N, M / images], element (n, j, p) the product's row n M/images + p, column j. The CPU kernel
// stores each tile of 32 rows column by column as it leaves the epilogue, so no transposing copy
// of the [M, N] result is made; elsewhere the result is copied. The values are
// scaled_matmul_nt's, bit for bit.
Tensor scaled_matmul_nt_images(const Quantized& a, const Quantized& b, const Tensor& bias, DType out_dtype,
                               int64_t images);

}  // namespace mixtape
