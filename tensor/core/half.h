// 16-bit floating-point scalars: IEEE binary16 (`half`) and bfloat16 (`bfloat16`).
//
// Every place mixtape rounds a value to 16 bits goes through the functions in this header:
//   round_to_half / round_to_bf16                  round-to-nearest-even (RNE) from float
//   round_to_half_f64 / round_to_bf16_f64 (_i64)   RNE from double (int64), rounding once
//   round_to_half_stochastic / ..._bf16_...        stochastic rounding from a random 32-bit word
// Search for "round_to_" to find them all. Kernels that move 16-bit values without widening them
// (ReLU, the max-pool gradient) write the bits the round trip to float and back would give:
//   round_trip_half_bits / round_trip_bf16_bits    x itself, or the canonical NaN for a NaN
//
// The RNE conversions are bit-identical to CUDA's __float2half_rn and __float2bfloat16_rn:
// subnormals, signed zero, overflow to inf (values >= max + ulp/2 round to inf), and every NaN
// becomes the canonical NaN 0x7FFF.
//
// Note [Stochastic rounding]
// Let t be x rounded toward zero to the 16-bit format and u = t + ulp the next value away from
// zero (when |x| exceeds the largest finite value, u is the infinity). With p = (|x| - |t|) / ulp
// in [0, 1), the result is u when r < floor(p * 2^32) and t otherwise, where r is a uniform
// 32-bit word. So P(u) = p up to 2^-32, E[result] = x, and exact values never move. For bf16
// this is the familiar "add r >> 16 to the float bits, then truncate". Being integer arithmetic
// on the float's bits, a CUDA kernel reproduces it bit for bit from the same random words.
#pragma once

#include <bit>
#include <cstdint>

namespace mixtape {

namespace bits16 {

constexpr uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
constexpr float f32_from(uint32_t u) { return std::bit_cast<float>(u); }

// ---- binary16 ------------------------------------------------------------------------------

// float -> binary16, round to nearest even.
constexpr uint16_t float_to_half_rn(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return ax == 0x7F800000u ? uint16_t(sign | 0x7C00u) : uint16_t(0x7FFFu);
  if (ax >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520 = 65504 + ulp/2: inf
  if (ax >= 0x38800000u) {                                 // >= 2^-14: normal half
    // Rebias exponent (127 -> 15) and keep 10 mantissa bits; round on the 13 dropped bits.
    const uint32_t mant = ax & 0x7FFFFFu;
    const uint32_t exp = (ax >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent
    return uint16_t(sign | h);
  }
  if (ax < 0x33000000u) return uint16_t(sign);  // < 2^-25: rounds to zero (2^-25 itself ties to 0)
  // Subnormal half: value = m * 2^-24, m in [0, 1024]. Shift the full 24-bit significand.
  const uint32_t e = ax >> 23;  // biased float exponent, 102..112
  const uint32_t sig = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // (e - 127) - (-24) = value exponent offset
  uint32_t m = sig >> shift;
  const uint32_t rest = sig & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (m & 1u))) ++m;  // m == 1024 is the smallest normal
  return uint16_t(sign | m);
}

// binary16 -> float, exact.
constexpr float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return f32_from(sign | 0x7F800000u | (mant << 13));  // inf / NaN (payload kept)
  if (exp != 0) return f32_from(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return f32_from(sign);
  // Subnormal: value = mant * 2^-24, converted exactly through float arithmetic.
  const float v = float(mant) * f32_from(0x33800000u);  // 2^-24
  return sign ? -v : v;
}

// ---- bfloat16 ------------------------------------------------------------------------------

constexpr uint16_t float_to_bf16_rn(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  const uint32_t lsb = (x >> 16) & 1u;
  return uint16_t((x + 0x7FFFu + lsb) >> 16);  // overflow carries into the inf pattern
}

constexpr float bf16_to_float(uint16_t b) { return f32_from(uint32_t(b) << 16); }

// ---- from f64 and i64: one rounding (Note [Rounding f64 and i64 to 16 bits]) --------------
//
// Note [Rounding f64 and i64 to 16 bits]
// Going through float rounds twice and can land on the wrong side of a tie: the double
// 1 + 2^-11 + 2^-40 becomes the tie 1 + 2^-11 in float, then 1.0 in fp16, where the nearest fp16
// is 1 + 2^-10 (likewise 65520 - 2^-30 would overflow to inf). Rounding to float *to odd* first
// (truncate, then set the last bit when anything was dropped) keeps the information that the
// value is not a tie; a round-to-odd value with at least two more significand bits than the
// target then rounds to nearest even exactly as the original does (Boldo & Melquiond, "When
// double rounding is odd", 2005). float keeps >= 13 more bits than fp16 and 16 more than bf16 at
// every magnitude, subnormals included, and values past FLT_MAX become FLT_MAX, which still
// rounds to inf in both formats.

// double -> float, rounded to odd.
constexpr float f64_to_f32_round_odd(double d) {
  const float f = float(d);  // nearest even
  const double back = double(f);
  if (back == d || d != d) return f;  // exact (zeros, inf included) or NaN
  uint32_t b = f32_bits(f);
  if ((back > d) == (d > 0)) --b;  // rounded away from zero: step the magnitude back (inf -> FLT_MAX)
  return f32_from(b | 1u);
}

// int64 -> float, rounded to odd.
constexpr float i64_to_f32_round_odd(int64_t v) {
  const uint64_t a = v < 0 ? 0 - uint64_t(v) : uint64_t(v);
  const int n = std::bit_width(a);
  if (n <= 24) return float(v);  // exact
  const int shift = n - 24;      // 1..40
  const uint64_t m = (a >> shift) | uint64_t((a & ((uint64_t(1) << shift) - 1)) != 0);
  const float f = float(m) * float(uint64_t(1) << shift);  // 24-bit m times a power of two: exact
  return v < 0 ? -f : f;
}

constexpr uint16_t double_to_half_rn(double d) { return float_to_half_rn(f64_to_f32_round_odd(d)); }
constexpr uint16_t double_to_bf16_rn(double d) { return float_to_bf16_rn(f64_to_f32_round_odd(d)); }
constexpr uint16_t i64_to_half_rn(int64_t v) { return float_to_half_rn(i64_to_f32_round_odd(v)); }
constexpr uint16_t i64_to_bf16_rn(int64_t v) { return float_to_bf16_rn(i64_to_f32_round_odd(v)); }

// ---- stochastic rounding (Note [Stochastic rounding]) --------------------------------------

constexpr bool sr_round_up(double frac, uint32_t r) {
  // frac in [0, 1): probability of rounding away from zero.
  return uint64_t(r) < uint64_t(frac * 4294967296.0);
}

constexpr uint16_t float_to_bf16_sr(float f, uint32_t r) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7FFFFFFFu) >= 0x7F800000u) return float_to_bf16_rn(f);  // inf, NaN
  const uint32_t low = x & 0xFFFFu;                                  // remainder in units of ulp / 2^16
  const uint32_t t = x >> 16;                                        // truncated toward zero (sign-magnitude)
  return uint16_t(((r >> 16) < low) ? t + 1u : t);                   // t + 1 carries into inf past the max
}

constexpr uint16_t float_to_half_sr(float f, uint32_t r) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return float_to_half_rn(f);
  const float af = f32_from(ax);
  if (ax >= 0x47800000u) return uint16_t(sign | 0x7C00u);  // >= 2^16: past every finite neighbour
  // Truncate toward zero: t and the ulp at |x|.
  uint32_t t;
  double ulp;
  if (ax >= 0x38800000u) {  // normal range
    t = (((ax >> 23) - 112u) << 10) | ((ax & 0x7FFFFFu) >> 13);
    ulp = double(f32_from(((ax >> 23) - 10u) << 23));  // 2^(e - 10)
  } else {                                             // subnormal range: multiples of 2^-24
    ulp = 1.0 / 16777216.0;
    t = uint32_t(double(af) / ulp);
  }
  const double frac = (double(af) - double(half_to_float(uint16_t(t)))) / ulp;
  if (frac == 0.0) return uint16_t(sign | t);
  return uint16_t(sign | (sr_round_up(frac, r) ? t + 1u : t));  // t + 1 = 0x7C00 is inf
}

// The bits of a 16-bit value widened to float and rounded back to nearest: its own, except that
// every NaN becomes the canonical 0x7FFF (the round trip rounds nothing else).
constexpr uint16_t round_trip_half_bits(uint16_t x) { return (x & 0x7FFFu) > 0x7C00u ? uint16_t(0x7FFFu) : x; }
constexpr uint16_t round_trip_bf16_bits(uint16_t x) { return (x & 0x7FFFu) > 0x7F80u ? uint16_t(0x7FFFu) : x; }

}  // namespace bits16

// Storage types. Arithmetic is done by converting to float (docs/design.md numerics contract).
struct half {
  uint16_t bits = 0;
  half() = default;
  explicit half(float f) : bits(bits16::float_to_half_rn(f)) {}
  static constexpr half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return bits16::half_to_float(bits); }
  friend bool operator==(half a, half b) { return float(a) == float(b); }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(bits16::float_to_bf16_rn(f)) {}
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return bits16::bf16_to_float(bits); }
  friend bool operator==(bfloat16 a, bfloat16 b) { return float(a) == float(b); }
};

inline float to_float(half h) { return bits16::half_to_float(h.bits); }
inline float to_float(bfloat16 b) { return bits16::bf16_to_float(b.bits); }

inline half round_to_half(float f) { return half::from_bits(bits16::float_to_half_rn(f)); }
inline bfloat16 round_to_bf16(float f) { return bfloat16::from_bits(bits16::float_to_bf16_rn(f)); }
inline half round_to_half_f64(double d) { return half::from_bits(bits16::double_to_half_rn(d)); }
inline bfloat16 round_to_bf16_f64(double d) { return bfloat16::from_bits(bits16::double_to_bf16_rn(d)); }
inline half round_to_half_i64(int64_t v) { return half::from_bits(bits16::i64_to_half_rn(v)); }
inline bfloat16 round_to_bf16_i64(int64_t v) { return bfloat16::from_bits(bits16::i64_to_bf16_rn(v)); }
inline half round_to_half_stochastic(float f, uint32_t r) { return half::from_bits(bits16::float_to_half_sr(f, r)); }
inline bfloat16 round_to_bf16_stochastic(float f, uint32_t r) {
  return bfloat16::from_bits(bits16::float_to_bf16_sr(f, r));
}

// Format limits used by loss scaling and telemetry (lambda_min / lambda_max in Zhao et al.).
struct FormatLimits {
  double max_finite;     // lambda_max
  double min_subnormal;  // lambda_min
  double min_normal;
};
inline constexpr FormatLimits kHalfLimits{65504.0, 5.9604644775390625e-08, 6.103515625e-05};
inline constexpr FormatLimits kBf16Limits{3.3895313892515355e+38, 9.183549615799121e-41, 1.1754943508222875e-38};

}  // namespace mixtape
