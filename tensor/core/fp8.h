// Floating-point formats of 8 bits and fewer: the OCP FP8 formats E4M3 and E5M2, the OCP
// Microscaling (MX) element formats FP6 E3M2 / E2M3 and FP4 E2M1, and the MX scale E8M0.
//
// Every place mixtape rounds a value to 8 bits or fewer goes through the functions in this header:
//   from_float_rn                  round-to-nearest-even (RNE) from float
//   from_float_sr                  stochastic rounding from a random 32-bit word
//   e8m0_from_float                a power-of-two scale, rounded down or up
// Search for "from_float" to find them all. Decoding is exact: to_float, e8m0_to_float.
//
// The conversions are bit-identical to the CUDA toolkit's host conversions __nv_cvt_float_to_fp8
// (__NV_SATFINITE and __NV_NOSAT), __nv_cvt_float_to_fp6 and __nv_cvt_float_to_fp4
// (cudaRoundNearest) and __nv_cvt_float_to_e8m0 (tests/tensor/test_fp8.cpp compares them bit for
// bit), but written from the format definitions: OCP 8-bit Floating Point Specification (OFP8) 1.0
// and OCP Microscaling Formats (MX) Specification 1.0.
//
// Note [Eight-bit formats]
// A code is sign | exponent field e | mantissa field m in the low 1 + E + M bits of a byte. Its
// value is (1 + m / 2^M) * 2^(e - bias) for e > 0 and (m / 2^M) * 2^(1 - bias) for e = 0 (the
// subnormals and the two zeros).
//
//                    e4m3 (OFP8)       e5m2 (OFP8)       e3m2 (MX fp6)    e2m3 (MX fp6)    e2m1 (MX fp4)
//   bits S.E.M       8 = 1.4.3         8 = 1.5.2         6 = 1.3.2        6 = 1.2.3        4 = 1.2.1
//   bias             7                 15                3                1                1
//   max finite       448               57344             28               7.5              6
//   min normal       2^-6              2^-14             2^-2             1                1
//   min subnormal    2^-9              2^-16             2^-4             2^-3             2^-1
//   specials         NaN S.1111.111    inf S.11111.00    none: every      none             none
//                    (no inf)          NaN S.11111.mm    code is a
//                                      (mm != 0)         number
//   1.0              0.0111.000 0x38   0.01111.00 0x3C   0.011.00 0x0C    0.01.000 0x08    0.01.0 0x2
//   max              0.1111.110 0x7E   0.11110.11 0x7B   0.111.11 0x1F    0.11.111 0x1F    0.11.1 0x7
//   min normal       0.0001.000 0x08   0.00001.00 0x04   0.001.00 0x04    0.01.000 0x08    0.01.0 0x2
//   min subnormal    0.0000.001 0x01   0.00000.01 0x01   0.000.01 0x01    0.00.001 0x01    0.00.1 0x1
//   -0               0x80              0x80              0x20             0x20             0x8
//   a NaN becomes    0x7F (NaN)        0x7F (NaN)        0x1F (+28)       0x1F (+7.5)      0x7 (+6)
//
// E4M3 here is OFP8's E4M3 (E4M3FN elsewhere): its top exponent holds the numbers 256..448, only
// S.1111.111 is NaN. What rounding does at the edges, as CUDA's conversions do (Note [Overflow and
// NaN]):
//   NaN in          nan_code, whatever the sign and payload: the all-ones magnitude, which is a NaN
//                   in E4M3 and E5M2 and +max in the formats without specials (no fp6 or fp4 code
//                   is a NaN; +max is CUDA's choice).
//   inf in          like any value past the range.
//   past the range  saturate: +-max. no_saturate: the code after max, +-inf (0x7C) in E5M2 and
//                   +-NaN (0x7F) in E4M3; the formats without specials saturate in both modes.
//   underflow       |x| <= min_subnormal / 2 becomes a zero of x's sign (the midpoint ties to 0).
//
// E8M0 (the MX scale) is a bare biased exponent: code e is 2^(e - 127), e in 0..254, and 0xFF is
// NaN. It has no sign and no zero (Note [E8M0 scales]).

#pragma once

#include <bit>
#include <cstdint>

#include "tensor/core/half.h"

namespace mixtape {

namespace bits8 {

using bits16::f32_bits;
using bits16::f32_from;

// A sign-exponent-mantissa format of at most 8 bits, stored in the low bits of a byte.
enum class Specials : uint8_t {
  ieee,      // the top exponent holds inf (mantissa 0) and NaNs (E5M2)
  nan_only,  // only S.1..1.1..1 is NaN, the rest of the top exponent is finite; no inf (E4M3)
  none,      // every code is a finite number (MX fp6 E3M2 / E2M3 and fp4 E2M1)
};

struct Format {
  const char* name;  // "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"
  int exp_bits, man_bits, bias;
  Specials specials;
};

inline constexpr Format kE4M3{"e4m3", 4, 3, 7, Specials::nan_only};
inline constexpr Format kE5M2{"e5m2", 5, 2, 15, Specials::ieee};
inline constexpr Format kE3M2{"e3m2", 3, 2, 3, Specials::none};
inline constexpr Format kE2M3{"e2m3", 2, 3, 1, Specials::none};
inline constexpr Format kE2M1{"e2m1", 2, 1, 1, Specials::none};
// A CUDA kernel takes a copy (constexpr bits8::Format f = bits8::kE4M3;) or a Format argument by
// value: nvcc refuses a reference to a host object such as kE4M3 itself in device code.

// What a conversion does past the largest finite value (Note [Overflow and NaN]).
enum class Overflow : uint8_t {
  saturate,     // +-max_finite, inf included (CUDA __NV_SATFINITE)
  no_saturate,  // the code after max: inf in E5M2, NaN in E4M3; fp6 and fp4 saturate (__NV_NOSAT)
};

constexpr int bit_width(const Format& f) { return 1 + f.exp_bits + f.man_bits; }

// The magnitude bits of a code: everything but the sign.
constexpr uint32_t magnitude_mask(const Format& f) { return (1u << (f.exp_bits + f.man_bits)) - 1u; }

// The code of +max_finite: the magnitudes count up to it (Note [Codes count up]), and past it come
// the specials: E5M2 stops below its top exponent, E4M3 one below all ones, fp6 and fp4 at all ones.
constexpr uint8_t max_code(const Format& f) {
  const uint32_t all_ones = magnitude_mask(f);
  if (f.specials == Specials::ieee) return uint8_t(all_ones - (1u << f.man_bits));
  if (f.specials == Specials::nan_only) return uint8_t(all_ones - 1u);
  return uint8_t(all_ones);
}

// The code every NaN converts to: the all-ones magnitude, sign clear (0x7F in E4M3 and E5M2). In
// fp6 and fp4 that is +max_finite, as in CUDA's __nv_cvt_float_to_fp6 / _fp4.
constexpr uint8_t nan_code(const Format& f) { return uint8_t(magnitude_mask(f)); }

constexpr bool is_nan_magnitude(uint32_t mag, const Format& f) {
  if (f.specials == Specials::ieee) return mag > uint32_t(max_code(f)) + 1u;  // top exponent, m != 0
  if (f.specials == Specials::nan_only) return mag == magnitude_mask(f);
  return false;
}

// 2^n as a float, for n in the normal float range.
constexpr float pow2f(int n) { return f32_from(uint32_t(n + 127) << 23); }

// code -> float, exact. NaN codes give a quiet NaN, inf codes inf. The bits above the format's
// width are ignored (as in CUDA's decoders).
constexpr float to_float(uint8_t code, const Format& f) {
  const int m_bits = f.man_bits;
  const uint32_t mag = code & magnitude_mask(f);
  const uint32_t sign = uint32_t((code >> (f.exp_bits + m_bits)) & 1u) << 31;
  if (is_nan_magnitude(mag, f)) return f32_from(0x7FFFFFFFu);
  if (f.specials == Specials::ieee && mag == uint32_t(max_code(f)) + 1u) return f32_from(sign | 0x7F800000u);
  const uint32_t e = mag >> m_bits;
  const uint32_t m = mag & ((1u << m_bits) - 1u);
  // Normal: rebias the exponent (bias -> 127) and left-align the mantissa in float's 23 bits.
  if (e != 0) return f32_from(sign | (uint32_t(int(e) - f.bias + 127) << 23) | (m << (23 - m_bits)));
  // Subnormal: m * 2^(1 - bias - M), a small integer times a power of two: exact.
  const float v = float(m) * pow2f(1 - f.bias - m_bits);
  return sign ? -v : v;
}

constexpr float max_finite(const Format& f) { return to_float(max_code(f), f); }
constexpr float min_normal(const Format& f) { return pow2f(1 - f.bias); }
constexpr float min_subnormal(const Format& f) { return pow2f(1 - f.bias - f.man_bits); }

// ---- float -> code (Note [Codes count up]) ---------------------------------------------------
//
// Note [Codes count up]
// Among codes of one sign, a larger magnitude code is a larger value, and code + 1 is the next
// value: the mantissa field counts up and carries into the exponent field. The code after max is
// the value the format would have if its exponents went on: inf in E5M2 (0x7C), NaN in E4M3
// (0x7F). So all rounding is done on the magnitude code, in one formula for every binade:
// with e = floor(log2 |x|), emin = 1 - bias (the exponent of min normal) and ulp =
// 2^(max(e, emin) - M) the spacing of the format at |x|, |x| = (k + frac) * ulp with the integer
// k and frac in [0, 1), and the code of k * ulp is
//     ((max(e, emin) - emin) << M) + k.
// For a normal value k in [2^M, 2^(M+1)) carries its implicit leading bit, and the "+" adds that
// bit to the exponent field, which makes it e - emin + 1 = e + bias. Below min normal, k < 2^M is
// the mantissa of a subnormal (exponent field 0). Rounding up is code + 1, through any binade
// boundary; the result is then clamped to the largest code the overflow mode allows.
//
// Note [Overflow and NaN]
// Saturation clamps the magnitude code to max_code; otherwise to max_code + 1, the inf of E5M2 or
// the NaN of E4M3, which keeps x's sign: -1000 is 0xFF (a NaN) in E4M3 without saturation, and
// -inf is 0xFC in E5M2. In round-to-nearest, the tie between max and the code after it goes to
// the even one of the two: E5M2's max 0x7B is odd, so 61440 (= max + ulp/2) overflows, while E4M3's
// 0x7E is even, so 464 stays 448. The formats without specials have no code after max and always
// saturate: CUDA's fp6 and fp4 conversions have no saturation parameter and clamp. inf needs no
// case of its own: its code is past every clamp. A NaN becomes nan_code (positive, payload
// dropped), as CUDA's host conversions give.

// The largest magnitude code a conversion returns.
constexpr uint32_t ceiling_code(const Format& f, Overflow o) {
  const bool has_code_after_max = f.specials != Specials::none;
  return uint32_t(max_code(f)) + (o == Overflow::no_saturate && has_code_after_max ? 1u : 0u);
}

// |x| cut toward zero to the format, with what was cut off: |x| = (code's value) + rest * 2^-shift
// * ulp. The code is not clamped (it goes on past max, Note [Codes count up]).
struct Truncated {
  uint32_t code;
  uint64_t rest;  // the dropped low bits of the float's significand
  int shift;      // how many there are: ulp = 2^shift units of the float's last bit
};

// ax: the bits of |x|, not NaN (inf is fine: its code lands past every clamp).
constexpr Truncated truncate_magnitude(uint32_t ax, const Format& f) {
  const int fe = ax >= 0x00800000u ? int(ax >> 23) : 1;                          // float subnormals: scale of fe = 1
  const uint64_t sig = (ax & 0x7FFFFFu) | (ax >= 0x00800000u ? 0x800000u : 0u);  // |x| = sig * 2^(fe - 150)
  const int emin = 1 - f.bias;
  const int e = fe - 127 > emin ? fe - 127 : emin;
  // The format's ulp 2^(e - M) in units of the float's last bit 2^(fe - 150). At least 20 (M <= 3).
  // Every shift from 25 up drops all of sig; capping it keeps the 64-bit shifts below defined and
  // changes no result (sig < 2^24 stays below half an ulp, and below 2^-32 of one).
  int shift = (e - f.man_bits) - (fe - 150);
  if (shift > 63) shift = 63;
  const uint64_t k = sig >> shift;
  return {(uint32_t(e - emin) << f.man_bits) + uint32_t(k), sig & ((uint64_t(1) << shift) - 1u), shift};
}

// The magnitude code of |x| (bits ax, not NaN) rounded to nearest even, not yet clamped: past
// max_code when the value lies beyond the range (Note [Codes count up]). Two cases, each one
// rounding by the float hardware's own rule or by integer arithmetic on the bits:
//   below min normal  the format's values are the multiples of min_subnormal = 2^(emin - M).
//                     Adding m = 2^(emin - M + 23), whose float ulp is min_subnormal, rounds |x|
//                     to one of them (float addition rounds to nearest even), and the sum's bits
//                     minus m's count them: the code k (k = 2^M is min normal's code).
//   from min normal   round the float's 23 mantissa bits to M, to nearest even (add half an ulp
//                     less one, plus the kept lsb, then drop: a carry runs into the exponent),
//                     then rebias the exponent from 127 to the format's bias. inf lands past max.
constexpr uint32_t rne_magnitude_code(uint32_t ax, const Format& f) {
  const int emin = 1 - f.bias, drop = 23 - f.man_bits;
  if (ax < uint32_t(emin + 127) << 23) {
    const float m = f32_from(uint32_t(emin - f.man_bits + 23 + 127) << 23);
    return f32_bits(f32_from(ax) + m) - f32_bits(m);
  }
  const uint32_t r = (ax + ((1u << (drop - 1)) - 1u) + ((ax >> drop) & 1u)) >> drop;
  return r - (uint32_t(127 - f.bias) << f.man_bits);
}

// A code rounded to nearest even, and whether the rounding went past max_finite (the values
// saturation clamps, and that become inf or NaN without it; x within half an ulp above max rounds
// to max and is not past it).
struct Rounded {
  uint8_t code;
  bool past_max;
};

constexpr Rounded from_float_rn_checked(float x, const Format& f, Overflow o = Overflow::saturate) {
  const uint32_t b = f32_bits(x);
  const uint32_t ax = b & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return {nan_code(f), false};
  const uint32_t sign = (b >> 31) << (f.exp_bits + f.man_bits);
  const uint32_t code = rne_magnitude_code(ax, f);
  const uint32_t ceiling = ceiling_code(f, o);
  return {uint8_t(sign | (code < ceiling ? code : ceiling)), code > max_code(f)};
}

// float -> code, round to nearest even.
constexpr uint8_t from_float_rn(float x, const Format& f, Overflow o = Overflow::saturate) {
  return from_float_rn_checked(x, f, o).code;
}

// float -> code, stochastic rounding (Note [Stochastic rounding] in half.h): t = |x| rounded toward
// zero, u = t + 1 the next magnitude code, p = (|x| - |t|) / (|u| - |t|) = rest / 2^shift, and the
// result is u when r < floor(p * 2^32). floor(p * 2^32) is rest shifted to 32 fraction bits: the
// same integer the rule's double arithmetic gives (p is exact in double), without a rounding to
// think about, on both devices. Exact values (rest = 0) never move.
//
// Past the range the rule runs on as if the format went on (Note [Codes count up]), then the clamp
// of Note [Overflow and NaN] applies. So without saturation, max < |x| < max + ulp becomes max or,
// with probability p = (|x| - max) / ulp, the code after max (E5M2 inf, E4M3 NaN), and |x| >= max +
// ulp (inf included) always that code; with saturation, and in fp6 / fp4, everything past max is
// max. A NaN becomes nan_code.
constexpr uint8_t from_float_sr(float x, uint32_t r, const Format& f, Overflow o = Overflow::saturate) {
  const uint32_t b = f32_bits(x);
  const uint32_t ax = b & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return nan_code(f);
  const uint32_t sign = (b >> 31) << (f.exp_bits + f.man_bits);
  const Truncated t = truncate_magnitude(ax, f);
  const uint64_t threshold = t.shift <= 32 ? t.rest << (32 - t.shift) : t.rest >> (t.shift - 32);
  const uint32_t code = t.code + (uint64_t(r) < threshold ? 1u : 0u);
  const uint32_t ceiling = ceiling_code(f, o);
  return uint8_t(sign | (code < ceiling ? code : ceiling));
}

// ---- E8M0 scales ----------------------------------------------------------------------------
//
// Note [E8M0 scales]
// An MX block shares one scale 2^(e - 127), stored as e. Rounding a float to a scale is finding
// its power of two, as __nv_cvt_float_to_e8m0 does:
//   down  2^floor(log2 |x|): e is the float's exponent field
//   up    2^ceil(log2 |x|): the exponent field, plus one unless |x| is a power of two
// The sign is ignored (a scale is a magnitude). Code 0, 2^-127, is the smallest scale: zero and
// the floats below 2^-127 get it in both modes, though rounding down it lies above them ("up"
// gives 1 from just above 2^-127). 2^128 would be code 255, which is the NaN: |x| > 2^127 rounding
// up, and inf rounding either way, give 255 without saturation and 254 (2^127) with it. A NaN
// gives 255 in both modes.

enum class E8m0Rounding : uint8_t {
  down,  // toward zero (CUDA cudaRoundZero)
  up,    // toward +inf, on |x| (CUDA cudaRoundPosInf)
};

constexpr uint8_t e8m0_from_float(float x, E8m0Rounding mode, Overflow o = Overflow::saturate) {
  const uint32_t ax = f32_bits(x) & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0xFF;
  uint32_t e = ax >> 23;
  if (mode == E8m0Rounding::up) {
    // A float subnormal rounds up to 2^-126 when above 2^-127 (0x00400000); a normal float when its
    // mantissa is not zero (inf's is).
    e += e == 0 ? uint32_t(ax > 0x00400000u) : uint32_t((ax & 0x7FFFFFu) != 0);
  }
  if (e == 0xFF && o == Overflow::saturate) e = 0xFE;
  return uint8_t(e);
}

// 2^(e - 127), exact: the float with exponent field e, except e = 0, 2^-127, which float holds as
// the subnormal 0x00400000. 0xFF is NaN.
constexpr float e8m0_to_float(uint8_t e) {
  if (e == 0xFF) return f32_from(0x7FFFFFFFu);
  return f32_from(e == 0 ? 0x00400000u : uint32_t(e) << 23);
}

}  // namespace bits8

}  // namespace mixtape
