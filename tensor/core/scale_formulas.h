// How an 8-bit operand's scales are chosen from the largest magnitude (amax) of each block: the
// rules of the recipes the field uses, one function each, compiled by both devices.
//
// Note [Scaling rules]
// A block of values x is stored as codes q = round(x * s) in an 8-bit format (fp8.h) and read
// back as q * (1 / s). Each rule chooses s from the block's amax:
//   amax        Transformer Engine's and torchao's: s = (max_finite / amax) / 2^margin, an fp32
//               number, so that the largest value lands on (or 2^margin below) the format's
//               largest. amax = 0 or not finite keeps the fallback (1 for current scaling, the
//               previous scale for delayed scaling, as TE does); an s that overflows fp32 (a tiny
//               amax) becomes FLT_MAX, also as TE does.
//   pow2_floor  the OCP Microscaling spec v1.0 (section 6.3): the block's scale is the power of
//               two X = 2^(floor(log2 amax) - emax_elem), emax_elem the exponent of the element
//               format's largest value; s = 1 / X. The largest value then lands in
//               [2^emax_elem, 2^(emax_elem+1)), which is above max_finite for E4M3 (448 < 512)
//               and the fp6/fp4 formats: those elements saturate. The exponent is clamped to
//               E8M0's [-127, 127] (a block of tiny values would ask for less).
//   pow2_up     the round-up rule (cuBLAS's MXFP8 and DeepSeek-V3's power-of-two scales): the
//               smallest power of two X with amax <= max_finite * X, so nothing saturates, at the
//               price of up to one binade of precision at the top; clamped likewise.
//   nvfp4       NVIDIA's NVFP4 (two levels, Note [Two-level scales]): an E4M3 scale per block
//               under an fp32 scale per tensor.
// Power-of-two scales are exact: q * X is the stored value itself, and a GEMM can apply them
// while widening its operands (Note [8-bit GEMM operands] in tensor/cpu/gemm.cpp). A block of
// zeros takes X = 1 under both power-of-two rules; a block holding inf or NaN takes X = NaN (E8M0's
// 0xFF), so that every element of it reads back as NaN, as the MX spec says.
//
// Note [Two-level scales]
// NVFP4 stores E2M1 codes with an E4M3 decode scale per block of 16 and an fp32 scale per tensor,
// so a value is code x d_b x (1 / S). With A the tensor's amax and a_b the block's, in the fp32
// operations of Transformer Engine's NVFP4 quantizer (its emulation, which the GPU kernels match):
//   S    = min(448 * max_finite / A, FLT_MAX), or 1 when A is 0 or not finite
//   d_b  = e4m3_rn_satfinite(a_b * (S * (1 / max_finite)))        (max_finite: 6 for E2M1)
//   s_b  = min(1 / (d_b * (1 / S)), FLT_MAX)                      codes = rn(x * s_b)
// so a block's largest value lands near max_finite and the scales use E4M3's whole range over the
// tensor. Two departures, both for what a reader sees: a block whose d_b is 0 (all of it below
// 2^-10 of A) takes s_b = 0, so its codes are zeros counted as flushed (TE's FLT_MAX saturates them
// to +-6, which read back as zeros too); a block holding inf or NaN takes d_b = NaN and reads back
// as NaN, as under the power-of-two rules (S then comes from A = inf or NaN: 1). The product
// code x d_b has at most 2 + 4 significant bits (8 with any other element format), so a GEMM
// widens it exactly like a power-of-two block scale; 1 / S multiplies the fp32 sums, once per
// output element. The rule takes any element format (max_finite is the format's): the nvfp4 recipe
// applies it to its E5M2 gradients too.
#pragma once

#include <bit>
#include <cstdint>

#include "tensor/core/dtype.h"
#include "tensor/core/fp8.h"
#include "tensor/core/host_device.h"

namespace mixtape {

enum class ScaleRule : uint8_t { amax, pow2_floor, pow2_up, nvfp4 };

// What a quantize kernel (either device) is asked to do with a matrix [rows, K]: blocks of
// block_rows x block_cols elements (both >= 1), each with its own s from the rule, codes in
// `format` (tensor/ops/quantize.h QuantSpec says what each field means).
struct BlockQuant {
  DType format = DType::e4m3;
  int64_t block_rows = 1, block_cols = 1;
  ScaleRule rule = ScaleRule::amax;
  bits8::Overflow overflow = bits8::Overflow::saturate;
  int margin = 0;
  float given_scale = 0.0f;
  float fallback_scale = 1.0f;
};

// The quantize kernels' statistics, an i64 [kQuantStats] tensor on the kernel's device: counts,
// and three floats as their bit patterns.
enum QuantStat : int {
  kStatCount,
  kStatSaturated,
  kStatFlushed,
  kStatSubnormal,
  kStatNonfinite,
  kStatAmaxBits,         // the largest finite |x|
  kStatScaleInvMinBits,  // the range of 1 / s over the blocks
  kStatScaleInvMaxBits,  // (nvfp4: of d_b / S, Note [Two-level scales])
  kQuantStats
};

namespace scales {

// How many blocks of b elements cover n (the last one ragged): the scales along one dim.
MT_HOST_DEVICE constexpr int64_t blocks_of(int64_t n, int64_t b) { return (n + b - 1) / b; }

// floor(log2 a) for a finite a > 0, exactly (subnormals too).
MT_HOST_DEVICE constexpr int floor_log2(float a) {
  const uint32_t b = std::bit_cast<uint32_t>(a) & 0x7FFFFFFFu;
  const int e = int(b >> 23);
  return e > 0 ? e - 127 : int(std::bit_width(b)) - 150;  // subnormal: b * 2^-149
}

// 2^k as a float, k in [-149, 127].
MT_HOST_DEVICE constexpr float pow2(int k) {
  return k >= -126 ? std::bit_cast<float>(uint32_t(k + 127) << 23) : std::bit_cast<float>(1u << (k + 149));
}

// E8M0's exponent range: 2^-127 .. 2^127.
inline constexpr int kMinScaleExp = -127, kMaxScaleExp = 127;

MT_HOST_DEVICE constexpr int clamp_exp(int k) {
  return k < kMinScaleExp ? kMinScaleExp : (k > kMaxScaleExp ? kMaxScaleExp : k);
}

// Whether a is a positive power of two (normal or subnormal).
MT_HOST_DEVICE constexpr bool is_pow2(float a) {
  const uint32_t b = std::bit_cast<uint32_t>(a);
  const uint32_t e = b >> 23, m = b & 0x7FFFFFu;  // e includes the sign bit: negative -> e > 255
  return e == 0 ? std::has_single_bit(m) : (e < 255 && m == 0);
}

MT_HOST_DEVICE constexpr bool finite(float a) { return (std::bit_cast<uint32_t>(a) & 0x7F800000u) != 0x7F800000u; }

// The amax rule: s = (max_finite / amax) / 2^margin, or `fallback` for amax 0 or not finite.
MT_HOST_DEVICE constexpr float amax_scale(float amax, float max_finite, int margin, float fallback) {
  if (!(amax > 0.0f) || !finite(amax)) return fallback;
  const float s = (max_finite / amax) / pow2(margin);
  return finite(s) ? s : 3.4028234663852886e38f;  // FLT_MAX
}

// The exponent k of the power-of-two scale X = 2^k of the pow2_floor rule (amax > 0, finite).
MT_HOST_DEVICE constexpr int pow2_floor_exp(float amax, const bits8::Format& f) {
  return clamp_exp(floor_log2(amax) - floor_log2(bits8::max_finite(f)));
}

// The same for the pow2_up rule: the smallest k with amax <= max_finite * 2^k (compared in
// double, where both sides are exact).
MT_HOST_DEVICE constexpr int pow2_up_exp(float amax, const bits8::Format& f) {
  const float fmax = bits8::max_finite(f);
  const int k = floor_log2(amax) - floor_log2(fmax);  // amax / fmax lies in (2^(k-1), 2^(k+1))
  const double two_k = std::bit_cast<double>(uint64_t(k + 1023) << 52);
  return clamp_exp(double(amax) <= double(fmax) * two_k ? k : k + 1);
}

// ---- Note [Two-level scales] ---------------------------------------------------------------------

inline constexpr float kE4M3Max = 448.0f;

// S from the tensor's amax.
MT_HOST_DEVICE constexpr float nvfp4_tensor_scale(float amax, const bits8::Format& f) {
  if (!finite(amax) || amax == 0.0f) return 1.0f;
  const float s = kE4M3Max * bits8::max_finite(f) / amax;
  return finite(s) ? (s == 0.0f ? 1.0f : s) : 3.4028234663852886e38f;  // FLT_MAX
}

// d_b, the E4M3 decode scale of a block with amax a_b under S (NaN for a block holding inf or NaN).
MT_HOST_DEVICE constexpr float nvfp4_block_decode(float block_amax, float tensor_scale, const bits8::Format& f) {
  if (!finite(block_amax)) return std::bit_cast<float>(0x7FC00000u);
  constexpr bits8::Format e4m3 = bits8::kE4M3;
  const float d = block_amax * (tensor_scale * (1.0f / bits8::max_finite(f)));
  return bits8::to_float(bits8::from_float_rn(d, e4m3, bits8::Overflow::saturate), e4m3);
}

// s_b, the block's encode scale (0 for d_b = 0, NaN for d_b = NaN).
MT_HOST_DEVICE constexpr float nvfp4_block_scale(float decode, float tensor_scale) {
  if (decode != decode) return decode;
  if (decode == 0.0f) return 0.0f;
  const float s = 1.0f / (decode * (1.0f / tensor_scale));
  return finite(s) ? s : 3.4028234663852886e38f;  // FLT_MAX
}

// s of one block with this amax under q's rule (Note [Scaling rules]). Not the nvfp4 rule, whose
// kernels first take S from the whole tensor, then each block's d_b and s_b from the functions
// above (Note [Two-level scales]).
MT_HOST_DEVICE constexpr float block_scale(const BlockQuant& q, const bits8::Format& f, float amax) {
  if (q.given_scale > 0.0f) return q.given_scale;
  if (q.rule == ScaleRule::amax) return amax_scale(amax, bits8::max_finite(f), q.margin, q.fallback_scale);
  if (!finite(amax)) return std::bit_cast<float>(0x7FC00000u);  // inf or NaN: the block reads back as NaN
  if (amax == 0.0f) return 1.0f;
  const int k = q.rule == ScaleRule::pow2_floor ? pow2_floor_exp(amax, f) : pow2_up_exp(amax, f);
  return pow2(-k);  // s = 1 / X: exact, k in [-127, 127]
}

}  // namespace scales

}  // namespace mixtape
