// 16-bit scalars (tensor/core/half.h) against references written independently of it:
//   fp16: the hardware's conversion (F16C's _cvtss_sh / _cvtsh_ss on x86-64, FCVT on aarch64)
//         and GCC's _Float16 conversion (libgcc's soft-float on x86-64),
//   bf16: a rounder that compares the distances to the two neighbours in double.
// Plus stochastic rounding (Note [Stochastic rounding] in half.h), through the scalar functions
// and through Tensor::to(dtype, Rounding::stochastic, &gen).
#include "support/catch.h"
#if defined(__x86_64__)
#include <immintrin.h>
#else
#include <cfenv>
#include <cstring>
#endif

#include <bit>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "tensor/core/half.h"
#include "tensor/core/rng.h"
#include "tensor/tensor.h"

using namespace mixtape;
using bits16::bf16_to_float;
using bits16::f32_bits;
using bits16::f32_from;
using bits16::float_to_bf16_rn;
using bits16::float_to_half_rn;
using bits16::half_to_float;

// ---- libgcc's _Float16 conversions: the second fp16 reference --------------------------------
// Where the compiler has _Float16 on x86-64 (GCC 12; clang only from 15, so not the clang 14 of
// the asan preset; GCC 12 for aarch64 has it in C, not C++, and no libgcc conversion to call).
// Without it the references are nullopt and the comparisons are skipped, with a WARN in each test
// case that uses them; the default (GCC, x86-64) build always runs them.
#if defined(__FLT16_MANT_DIG__) && defined(__x86_64__)
#define MT_TEST_LIBGCC_F16 1
#else
#define MT_TEST_LIBGCC_F16 0
#endif
#if MT_TEST_LIBGCC_F16
// libgcc's software float -> _Float16 conversion. Called by name: with -mf16c, GCC compiles a
// plain _Float16 cast to the same F16C instruction as the first reference.
extern "C" _Float16 __truncsfhf2(float);
#endif

namespace {

#if MT_TEST_LIBGCC_F16
constexpr bool kHaveLibgccF16 = true;
std::optional<uint16_t> gcc_f16(float x) { return std::bit_cast<uint16_t>(__truncsfhf2(x)); }
// GCC converts double and int64 to _Float16 directly (libgcc __truncdfhf2; int64 exactly through
// long double, then __truncxfhf2).
[[gnu::noinline]] std::optional<uint16_t> gcc_f16_from_f64(double x) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
}
[[gnu::noinline]] std::optional<uint16_t> gcc_f16_from_i64(int64_t x) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
}
#else
constexpr bool kHaveLibgccF16 = false;
std::optional<uint16_t> gcc_f16(float) { return std::nullopt; }
std::optional<uint16_t> gcc_f16_from_f64(double) { return std::nullopt; }
std::optional<uint16_t> gcc_f16_from_i64(int64_t) { return std::nullopt; }
#endif

void warn_without_libgcc_f16() {
  if (!kHaveLibgccF16) WARN("no _Float16 in this compiler: the comparisons with libgcc's fp16 conversions are skipped");
}

// ---- references ------------------------------------------------------------------------------

// The hardware's conversion (the names say F16C, x86-64's; aarch64 converts with FCVT).
#if defined(__x86_64__)
uint16_t f16c_rn(float x) { return uint16_t(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }
uint16_t f16c_rz(float x) { return uint16_t(_cvtss_sh(x, _MM_FROUND_TO_ZERO)); }
float f16c_decode(uint16_t h) { return _cvtsh_ss(h); }
#elif defined(__aarch64__)
uint16_t fcvt_half(float x) {  // in the FPCR's rounding mode
  const volatile float v = x;
  const __fp16 h = v;
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}
uint16_t f16c_rn(float x) { return fcvt_half(x); }
uint16_t f16c_rz(float x) {
  const int mode = std::fegetround();
  std::fesetround(FE_TOWARDZERO);
  const volatile uint16_t bits = fcvt_half(x);  // (stored before the mode is restored)
  std::fesetround(mode);
  return bits;
}
float f16c_decode(uint16_t bits) {
  __fp16 h;
  std::memcpy(&h, &bits, sizeof h);
  return float(h);
}
#else
#error "test_half.cpp: a hardware fp16 conversion for this CPU is missing (x86-64 F16C, aarch64 FCVT)"
#endif

// 2^k as a double, exactly (k in the normal double range).
double pow2(int k) { return std::bit_cast<double>(uint64_t(k + 1023) << 52); }

// bf16 reference: the neighbours below and above |x| (bf16 magnitudes t and t + 1 in bits),
// distances in double, ties to even. The neighbour above the largest finite bf16 is 2^128,
// which is the inf pattern 0x7F80: values >= max + ulp/2 overflow.
uint16_t ref_bf16(float x) {
  const uint32_t b = f32_bits(x);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t mag = b & 0x7FFFFFFFu;
  const uint32_t t = mag >> 16;
  if (t >= 0x7F80u) return uint16_t(sign | 0x7F80u);  // inf (NaN never reaches here)
  const double lo = double(f32_from(t << 16));
  const int e = int(t >> 7);
  const double hi = lo + pow2((e == 0 ? 1 : e) - 127 - 7);
  const double v = double(f32_from(mag));
  const double dlo = v - lo, dhi = hi - v;
  const uint32_t r = dlo < dhi ? t : dhi < dlo ? t + 1 : ((t & 1u) ? t + 1 : t);
  return uint16_t(sign | r);
}

bool half_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0; }

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

// A float with magnitude in [2^-27, 2^17), around the fp16 range; random sign and mantissa.
float random_fp16_range_float(std::mt19937& rng) {
  const uint32_t w = rng();
  const uint32_t exp = 100u + rng() % 44u;
  return f32_from((w & 0x807FFFFFu) | (exp << 23));
}

// Count mismatches rather than REQUIRE in the inner loop (Catch2 assertions are slow); report the
// first few.
struct Mismatches {
  const char* what;
  uint64_t count = 0;
  void add(float x, uint32_t got, uint32_t want) {
    if (count++ < 8)
      std::printf("%s: x = %a (0x%08X): got 0x%04X, want 0x%04X\n", what, double(x), f32_bits(x), got, want);
  }
};

// Checks one float against both fp16 references and the bf16 reference.
void check_both(float x, Mismatches& mh, Mismatches& mg, Mismatches& mb) {
  const uint16_t h = float_to_half_rn(x);
  const uint16_t b = float_to_bf16_rn(x);
  if (std::isnan(x)) {
    if (!half_is_nan(h)) mh.add(x, h, 0x7FFF);
    if (!bf16_is_nan(b)) mb.add(x, b, 0x7FFF);
    return;
  }
  if (const uint16_t r = f16c_rn(x); h != r) mh.add(x, h, r);
  if (const uint16_t r = ref_bf16(x); b != r) mb.add(x, b, r);
  // The slower soft-float reference where fp16 rounding happens: |x| in [2^-27, 2^17). Below, both
  // references give a signed zero, above an infinity, and F16C checks those.
  const uint32_t e = (f32_bits(x) >> 23) & 0xFFu;
  if (e >= 100 && e < 144)
    if (const std::optional<uint16_t> r = gcc_f16(x); r && h != *r) mg.add(x, h, *r);
}

}  // namespace

// ---- round trips and decoding ------------------------------------------------------------------

TEST_CASE("every fp16 and bf16 bit pattern round-trips through float", "[half]") {
  uint64_t bad_half = 0, bad_bf16 = 0, bad_decode = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t p = uint16_t(i);
    const float fh = half_to_float(p);
    const float fb = bf16_to_float(p);
    const uint16_t h = float_to_half_rn(fh);
    const uint16_t b = float_to_bf16_rn(fb);
    if (half_is_nan(p)) {
      bad_half += !(std::isnan(fh) && half_is_nan(h));
      bad_decode += !std::isnan(f16c_decode(p));
    } else {
      bad_half += h != p;
      bad_decode += f32_bits(fh) != f32_bits(f16c_decode(p));  // exact decode, signed zeros included
    }
    if (bf16_is_nan(p)) bad_bf16 += !(std::isnan(fb) && bf16_is_nan(b));
    else bad_bf16 += b != p;
  }
  CHECK(bad_half == 0);
  CHECK(bad_bf16 == 0);
  CHECK(bad_decode == 0);
  // The canonical NaN of both formats (what CUDA's __float2half_rn / __float2bfloat16_rn return).
  CHECK(float_to_half_rn(std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);
  CHECK(float_to_bf16_rn(-std::numeric_limits<float>::quiet_NaN()) == 0x7FFF);
  CHECK(float_to_half_rn(f32_from(0x7F800001u)) == 0x7FFF);  // signalling NaN
}

TEST_CASE("format limits agree with the bit patterns", "[half]") {
  CHECK(kHalfLimits.max_finite == double(half_to_float(0x7BFF)));
  CHECK(kHalfLimits.min_subnormal == double(half_to_float(0x0001)));
  CHECK(kHalfLimits.min_normal == double(half_to_float(0x0400)));
  CHECK(kBf16Limits.max_finite == double(bf16_to_float(0x7F7F)));
  CHECK(kBf16Limits.min_subnormal == double(bf16_to_float(0x0001)));
  CHECK(kBf16Limits.min_normal == double(bf16_to_float(0x0080)));
}

TEST_CASE("half and bfloat16 scalar types", "[half]") {
  CHECK(half(1.0f).bits == 0x3C00);
  CHECK(float(half(-2.5f)) == -2.5f);
  CHECK(half(0.0f) == half(-0.0f));  // compares values
  CHECK_FALSE(half::from_bits(0x7E00) == half::from_bits(0x7E00));
  CHECK(round_to_half(65504.0f).bits == 0x7BFF);
  CHECK(to_float(half::from_bits(0x3555)) == half_to_float(0x3555));
  CHECK(bfloat16(1.0f).bits == 0x3F80);
  CHECK(float(bfloat16(-2.5f)) == -2.5f);
  CHECK(round_to_bf16(3.0f).bits == 0x4040);
  CHECK(to_float(bfloat16::from_bits(0x4049)) == 3.140625f);
}

// ---- RNE against the references ----------------------------------------------------------------

TEST_CASE("float -> fp16 at every midpoint and its float neighbours", "[half]") {
  warn_without_libgcc_f16();
  Mismatches m16{"fp16 vs F16C"}, mgcc{"fp16 vs libgcc"}, mtie{"fp16 midpoint tie-to-even"};
  uint64_t checked = 0;
  for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
    for (uint32_t h = 0; h <= 0x7BFF; ++h) {
      // Neighbours lo = h, hi = h + 1 (65536 above the largest finite value, as if the exponent
      // went on). Midpoints need 12 significant bits, so they are exact floats.
      const double lo = double(f16c_decode(uint16_t(h)));
      const double hi = h == 0x7BFF ? 65536.0 : double(f16c_decode(uint16_t(h + 1)));
      const float mid = float((lo + hi) / 2);
      REQUIRE(double(mid) == (lo + hi) / 2);
      const float s = sign ? -1.0f : 1.0f;
      const uint16_t even = uint16_t(sign | ((h & 1u) ? h + 1 : h));  // 0x7BFF + 1 = inf
      for (float x : {mid, next_down(mid), next_up(mid)}) {
        const float sx = s * x;
        const uint16_t got = float_to_half_rn(sx);
        if (const uint16_t r = f16c_rn(sx); got != r) m16.add(sx, got, r);
        if (const std::optional<uint16_t> r = gcc_f16(sx); r && got != *r) mgcc.add(sx, got, *r);
        ++checked;
      }
      // Reference-free statement of RNE: below -> lo, above -> hi, exactly at -> the even one.
      if (float_to_half_rn(s * mid) != even) mtie.add(s * mid, float_to_half_rn(s * mid), even);
      if (float_to_half_rn(s * next_down(mid)) != (sign | h)) mtie.add(s * next_down(mid), 0, sign | h);
      if (float_to_half_rn(s * next_up(mid)) != (sign | (h + 1))) mtie.add(s * next_up(mid), 0, sign | (h + 1));
    }
  }
  CHECK(checked == 2 * 0x7C00 * 3);
  CHECK(m16.count == 0);
  CHECK(mgcc.count == 0);
  CHECK(mtie.count == 0);
}

TEST_CASE("float -> bf16 at every midpoint and its float neighbours", "[half]") {
  Mismatches mref{"bf16 vs reference"}, mtie{"bf16 midpoint tie-to-even"};
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t b = 0; b <= 0x7F7F; ++b) {
      const double lo = double(bf16_to_float(uint16_t(b)));
      const int e = int(b >> 7);
      const double hi = lo + std::ldexp(1.0, (e == 0 ? 1 : e) - 127 - 7);  // 2^128 past the max
      const float mid = float((lo + hi) / 2);
      REQUIRE(double(mid) == (lo + hi) / 2);
      const float s = sign ? -1.0f : 1.0f;
      for (float x : {mid, next_down(mid), next_up(mid)}) {
        if (std::isinf(x)) continue;  // next_up of the midpoint above the max
        const float sx = s * x;
        if (const uint16_t r = ref_bf16(sx); float_to_bf16_rn(sx) != r) mref.add(sx, float_to_bf16_rn(sx), r);
      }
      const uint32_t even = sign | ((b & 1u) ? b + 1 : b);
      if (float_to_bf16_rn(s * mid) != even) mtie.add(s * mid, float_to_bf16_rn(s * mid), even);
      if (float_to_bf16_rn(s * next_down(mid)) != (sign | b)) mtie.add(s * next_down(mid), 0, sign | b);
    }
  }
  CHECK(mref.count == 0);
  CHECK(mtie.count == 0);
}

TEST_CASE("float -> fp16 and bf16 on 10^7 random floats", "[half]") {
  warn_without_libgcc_f16();
  std::mt19937 rng(20240607u);
  Mismatches mh{"fp16 vs F16C"}, mg{"fp16 vs libgcc"}, mb{"bf16 vs reference"};
  uint64_t nans = 0;
  for (int i = 0; i < 10'000'000; ++i) {
    // Half the draws are any bit pattern (NaN and inf included), half have an exponent in the
    // fp16 range, where most fp16 rounding happens.
    const float x = (i & 1) ? f32_from(rng()) : random_fp16_range_float(rng);
    nans += std::isnan(x);
    check_both(x, mh, mg, mb);
  }
  CHECK(nans > 0);  // the NaN -> NaN branch was exercised
  CHECK(mh.count == 0);
  CHECK(mg.count == 0);
  CHECK(mb.count == 0);
}

TEST_CASE("float -> fp16 named edge cases", "[half]") {
  struct Case {
    float x;
    uint16_t want;
    const char* why;
  };
  const float p = std::ldexp(1.0f, -25);
  const Case cases[] = {
      {0.0f, 0x0000, "+0"},
      {-0.0f, 0x8000, "-0 keeps its sign"},
      {p, 0x0000, "2^-25 ties to even (zero)"},
      {-p, 0x8000, "-2^-25 ties to -0"},
      {next_up(p), 0x0001, "just above 2^-25 -> min subnormal"},
      {next_down(p), 0x0000, "just below 2^-25 -> 0"},
      {std::ldexp(1.0f, -24), 0x0001, "2^-24 = min subnormal"},
      {3 * p, 0x0002, "3 * 2^-25 ties up to even 2 * 2^-24"},
      {5 * p, 0x0002, "5 * 2^-25 ties down to even 2 * 2^-24"},
      {std::ldexp(1023.0f, -24), 0x03FF, "largest subnormal"},
      {std::ldexp(1023.5f, -24), 0x0400, "largest subnormal + ulp/2 ties up to min normal"},
      {next_down(std::ldexp(1023.5f, -24)), 0x03FF, "just below that tie"},
      {next_down(std::ldexp(1.0f, -14)), 0x0400, "just below 2^-14 -> min normal"},
      {std::ldexp(1.0f, -14), 0x0400, "min normal"},
      {std::ldexp(1.0f, -30), 0x0000, "far below min subnormal"},
      {FLT_TRUE_MIN, 0x0000, "float subnormal"},
      {-FLT_TRUE_MIN, 0x8000, "negative float subnormal -> -0"},
      {1.0f, 0x3C00, "1"},
      {1.0f + std::ldexp(1.0f, -11), 0x3C00, "1 + 2^-11 ties to even (1)"},
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3C02, "1 + 3 * 2^-11 ties up to even 1 + 2^-9"},
      {next_up(1.0f + std::ldexp(1.0f, -11)), 0x3C01, "just above the tie"},
      {65504.0f, 0x7BFF, "max finite"},
      {65519.0f, 0x7BFF, "65519 -> 65504"},
      {next_down(65520.0f), 0x7BFF, "just below 65520"},
      {65520.0f, 0x7C00, "65520 = max + ulp/2 ties to inf"},
      {-65520.0f, 0xFC00, "-65520 -> -inf"},
      {1e6f, 0x7C00, "overflow"},
      {FLT_MAX, 0x7C00, "FLT_MAX"},
      {std::numeric_limits<float>::infinity(), 0x7C00, "+inf"},
      {-std::numeric_limits<float>::infinity(), 0xFC00, "-inf"},
      {0.1f, 0x2E66, "0.1"},
      {-2.0f, 0xC000, "-2"},
  };
  for (const Case& c : cases) {
    INFO(c.why << ": x = " << c.x);
    CHECK(float_to_half_rn(c.x) == c.want);
    CHECK(f16c_rn(c.x) == c.want);  // the table itself agrees with the hardware
  }
}

TEST_CASE("float -> bf16 named edge cases", "[half]") {
  struct Case {
    uint32_t x;
    uint16_t want;
    const char* why;
  };
  const Case cases[] = {
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0 keeps its sign"},
      {0x3F800000u, 0x3F80, "1"},
      {0x3F808000u, 0x3F80, "1 + 2^-8 ties to even (1)"},
      {0x3F818000u, 0x3F82, "1 + 3 * 2^-8 ties up to even"},
      {0x3F808001u, 0x3F81, "just above the tie"},
      {0x3F807FFFu, 0x3F80, "just below the tie"},
      {0x7F7F0000u, 0x7F7F, "max finite bf16"},
      {0x7F7F7FFFu, 0x7F7F, "below max + ulp/2"},
      {0x7F7F8000u, 0x7F80, "max + ulp/2 ties to inf"},
      {0x7F7E8000u, 0x7F7E, "tie below the max rounds to even"},
      {0xFF7F8000u, 0xFF80, "-(max + ulp/2) -> -inf"},
      {0x7F7FFFFFu, 0x7F80, "FLT_MAX -> inf"},
      {0x7F800000u, 0x7F80, "+inf"},
      {0xFF800000u, 0xFF80, "-inf"},
      {0x00000001u, 0x0000, "min float subnormal -> 0"},
      {0x80000001u, 0x8000, "negative min float subnormal -> -0"},
      {0x00008000u, 0x0000, "tie at half the min bf16 subnormal -> 0"},
      {0x00008001u, 0x0001, "above it -> min subnormal"},
      {0x00018000u, 0x0002, "subnormal tie rounds up to even"},
      {0x007F8000u, 0x0080, "largest subnormal + ulp/2 -> min normal"},
      {0x007FFFFFu, 0x0080, "largest float subnormal -> min normal"},
      {0x00800000u, 0x0080, "min normal"},
      {0x40490FDBu, 0x4049, "pi"},
  };
  for (const Case& c : cases) {
    INFO(c.why << ": x = 0x" << std::hex << c.x);
    CHECK(float_to_bf16_rn(f32_from(c.x)) == c.want);
    CHECK(ref_bf16(f32_from(c.x)) == c.want);
  }
}

// ---- from double and int64 (Note [Rounding f64 and i64 to 16 bits]) ----------------------------

namespace {

// double -> bf16 by scaling to the ulp and rounding in double (nearbyint: ties to even).
uint16_t ref_bf16_from_f64(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a == 0.0) return sign;
  const int e = std::max(std::ilogb(a), -126);
  const double ulp = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(a / ulp) * ulp;
  if (r > 3.3895313892515355e38) return uint16_t(sign | 0x7F80u);
  return uint16_t(sign | (f32_bits(float(r)) >> 16));  // r is a bf16 value: exact in float
}

}  // namespace

TEST_CASE("double and int64 -> fp16 and bf16 round once, not through float", "[half]") {
  warn_without_libgcc_f16();
  using bits16::double_to_bf16_rn;
  using bits16::double_to_half_rn;
  using bits16::i64_to_bf16_rn;
  using bits16::i64_to_half_rn;
  std::mt19937_64 rng(314159u);
  uint64_t bad_h = 0, bad_b = 0, checked = 0;
  auto check = [&](double v) {
    ++checked;
    if (const std::optional<uint16_t> r = gcc_f16_from_f64(v)) bad_h += double_to_half_rn(v) != *r;
    bad_b += double_to_bf16_rn(v) != ref_bf16_from_f64(v);
  };
  // Around every midpoint of both formats: exactly on it, and a relative 2^-30 .. 2^-60 off it,
  // which float cannot hold (the detour through float would make these exact ties).
  for (uint32_t h = 0; h <= 0x7BFF; ++h) {
    const double lo = double(f16c_decode(uint16_t(h)));
    const double hi = h == 0x7BFF ? 65536.0 : double(f16c_decode(uint16_t(h + 1)));
    const double mid = (lo + hi) / 2;
    for (int k : {30, 40, 52}) {
      const double d = mid * std::ldexp(1.0, -k);
      for (double v : {mid, mid + d, mid - d}) {
        check(v);
        check(-v);
      }
    }
  }
  for (uint32_t b = 0; b <= 0x7F7F; ++b) {
    const double lo = double(bf16_to_float(uint16_t(b)));
    const int e = int(b >> 7);
    const double mid = lo + std::ldexp(1.0, (e == 0 ? 1 : e) - 127 - 7) / 2;
    for (int k : {30, 40, 52}) {
      const double d = mid * std::ldexp(1.0, -k);
      for (double v : {mid, mid + d, mid - d}) {
        check(v);
        check(-v);
      }
    }
  }
  // Random doubles with exponents around both formats' ranges (and beyond FLT_MAX / below the
  // float subnormals).
  for (int i = 0; i < 1'000'000; ++i) {
    const uint64_t w = rng();
    const uint64_t exp = (i & 1) ? 1023 - 30 + rng() % 50 : 1023 - 160 + rng() % 300;
    check(std::bit_cast<double>((w & 0x800FFFFFFFFFFFFFull) | (exp << 52)));
  }
  CHECK(checked > 1'000'000);
  CHECK(bad_h == 0);
  CHECK(bad_b == 0);
  // The cases of Note [Rounding f64 and i64 to 16 bits].
  CHECK(double_to_half_rn(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3C01);
  CHECK(float_to_half_rn(float(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40))) == 0x3C00);
  CHECK(double_to_half_rn(65520.0 - std::ldexp(1.0, -30)) == 0x7BFF);
  CHECK(double_to_half_rn(65520.0) == 0x7C00);
  CHECK(double_to_half_rn(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)) == 0x0001);
  CHECK(double_to_half_rn(-0.0) == 0x8000);
  CHECK(double_to_half_rn(1e300) == 0x7C00);
  CHECK(double_to_bf16_rn(-1e300) == 0xFF80);
  CHECK(double_to_bf16_rn(3.4028235677973366e38) == 0x7F80);  // FLT_MAX + ulp/2: inf in float too
  CHECK(double_to_bf16_rn(1e-300) == 0x0000);
  CHECK(double_to_bf16_rn(-1e-300) == 0x8000);
  CHECK(double_to_half_rn(std::numeric_limits<double>::infinity()) == 0x7C00);
  CHECK(half_is_nan(double_to_half_rn(std::numeric_limits<double>::quiet_NaN())));
  CHECK(bf16_is_nan(double_to_bf16_rn(std::numeric_limits<double>::quiet_NaN())));
  // Every float rounds the same way whether passed as float or double.
  std::mt19937 r32(5u);
  uint64_t bad_same = 0;
  for (int i = 0; i < 100'000; ++i) {
    const float x = random_fp16_range_float(r32);
    bad_same += double_to_half_rn(double(x)) != float_to_half_rn(x);
    bad_same += double_to_bf16_rn(double(x)) != float_to_bf16_rn(x);
  }
  CHECK(bad_same == 0);

  // int64: against GCC's direct int64 -> _Float16 and the double path (exact below 2^53).
  uint64_t bad_i = 0;
  for (int i = 0; i < 200'000; ++i) {
    const int bits = 1 + int(rng() % 63);
    const int64_t v = int64_t(rng() >> (64 - bits)) * ((i & 1) ? -1 : 1);
    if (const std::optional<uint16_t> r = gcc_f16_from_i64(v)) bad_i += i64_to_half_rn(v) != *r;
    if (bits <= 53) bad_i += i64_to_bf16_rn(v) != ref_bf16_from_f64(double(v));
  }
  CHECK(bad_i == 0);
  CHECK(i64_to_bf16_rn((int64_t(1) << 25) + (int64_t(1) << 17) + 1) == 0x4C01);  // above a tie
  CHECK(i64_to_bf16_rn((int64_t(1) << 25) + (int64_t(1) << 17)) == 0x4C00);      // the tie: even
  CHECK(i64_to_bf16_rn((int64_t(1) << 60) + (int64_t(1) << 52) + 1) == 0x5D81);
  CHECK(i64_to_bf16_rn(std::numeric_limits<int64_t>::min()) == 0xDF00);  // -2^63
  CHECK(i64_to_bf16_rn(std::numeric_limits<int64_t>::max()) == 0x5F00);  // rounds up to 2^63
  CHECK(i64_to_half_rn(65519) == 0x7BFF);
  CHECK(i64_to_half_rn(65520) == 0x7C00);
  CHECK(i64_to_half_rn(-2049) == 0xE800);
  CHECK(i64_to_half_rn(std::numeric_limits<int64_t>::min()) == 0xFC00);
}

TEST_CASE("all 2^32 floats -> fp16 and bf16 against the references", "[.][slow]") {
  warn_without_libgcc_f16();
  const auto t0 = std::chrono::steady_clock::now();
  Mismatches mh{"fp16 vs F16C"}, mg{"fp16 vs libgcc"}, mb{"bf16 vs reference"};
  uint64_t n = 0;
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i, ++n) check_both(f32_from(uint32_t(i)), mh, mg, mb);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("swept %llu floats in %.1f s\n", static_cast<unsigned long long>(n), secs);
  CHECK(n == (uint64_t(1) << 32));
  CHECK(mh.count == 0);
  CHECK(mg.count == 0);
  CHECK(mb.count == 0);
}

// ---- stochastic rounding (Note [Stochastic rounding]) -------------------------------------------

namespace {

// Magnitude neighbours of x for stochastic rounding: t = |x| rounded toward zero, u = t + ulp
// (bit pattern + 1; past the largest finite value that is inf). Also P(u) = (|x| - t) / ulp.
struct SrNeighbours {
  uint16_t t, u;
  double p;
};

SrNeighbours half_neighbours(float x) {
  const float ax = std::fabs(x);
  const uint16_t t = f16c_rz(ax);  // RZ never overflows: 0x7BFF for every |x| > 65504
  const double tv = double(f16c_decode(t));
  const int e = int(t >> 10);
  const double ulp = std::ldexp(1.0, (e == 0 ? 1 : e) - 15 - 10);
  return {t, uint16_t(t + 1), (double(ax) - tv) / ulp};
}

SrNeighbours bf16_neighbours(float x) {
  const uint32_t mag = f32_bits(x) & 0x7FFFFFFFu;
  const uint16_t t = uint16_t(mag >> 16);
  return {t, uint16_t(t + 1), double(mag & 0xFFFFu) / 65536.0};
}

}  // namespace

TEST_CASE("stochastic rounding picks one of the two neighbours, with P(up) = p", "[half]") {
  std::mt19937 rng(7u);
  uint64_t bad_half = 0, bad_bf16 = 0, bad_half_threshold = 0, bad_bf16_threshold = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = (i & 1) ? random_fp16_range_float(rng) : f32_from(rng() & 0xFF7FFFFFu);  // finite
    const uint16_t sign = (f32_bits(x) >> 31) ? 0x8000 : 0;
    const uint32_t r = rng();
    {
      const SrNeighbours n = half_neighbours(x);
      const uint16_t got = round_to_half_stochastic(x, r).bits;
      if (n.p >= 1.0) bad_half += got != (sign | 0x7C00);  // |x| >= 65536: past the last step
      else bad_half += got != (sign | n.t) && got != (sign | n.u);
      // The rule exactly: up iff r < floor(p * 2^32).
      if (n.p > 0.0 && n.p < 1.0) {
        const uint64_t thr = uint64_t(std::floor(n.p * 4294967296.0));
        if (thr > 0) bad_half_threshold += round_to_half_stochastic(x, uint32_t(thr - 1)).bits != (sign | n.u);
        if (thr <= 0xFFFFFFFFull) bad_half_threshold += round_to_half_stochastic(x, uint32_t(thr)).bits != (sign | n.t);
      }
    }
    {
      const SrNeighbours n = bf16_neighbours(x);
      const uint16_t got = round_to_bf16_stochastic(x, r).bits;
      bad_bf16 += got != (sign | n.t) && got != (sign | n.u);
      if (n.p > 0.0) {
        const uint64_t thr = uint64_t(std::floor(n.p * 4294967296.0));
        bad_bf16_threshold += round_to_bf16_stochastic(x, uint32_t(thr - 1)).bits != (sign | n.u);
        bad_bf16_threshold += round_to_bf16_stochastic(x, uint32_t(thr)).bits != (sign | n.t);
      }
    }
  }
  CHECK(bad_half == 0);
  CHECK(bad_bf16 == 0);
  CHECK(bad_half_threshold == 0);
  CHECK(bad_bf16_threshold == 0);

  // Hand-picked p = 1/4 and 3/4: thresholds 2^30 and 3 * 2^30.
  const float q = 1.0f + 0.25f * std::ldexp(1.0f, -10);
  CHECK(round_to_half_stochastic(q, (1u << 30) - 1).bits == 0x3C01);
  CHECK(round_to_half_stochastic(q, 1u << 30).bits == 0x3C00);
  CHECK(round_to_half_stochastic(-q, 0).bits == 0xBC01);
  CHECK(round_to_half_stochastic(-q, 0xFFFFFFFFu).bits == 0xBC00);
  const float sub = 5.75f * std::ldexp(1.0f, -24);  // fp16 subnormal between 5 and 6 x 2^-24
  CHECK(round_to_half_stochastic(sub, 3u << 30).bits == 0x0005);
  CHECK(round_to_half_stochastic(sub, (3u << 30) - 1).bits == 0x0006);
  const float qb = 1.0f + 0.25f * std::ldexp(1.0f, -7);
  CHECK(round_to_bf16_stochastic(qb, (1u << 30) - 1).bits == 0x3F81);
  CHECK(round_to_bf16_stochastic(qb, 1u << 30).bits == 0x3F80);
}

TEST_CASE("stochastic rounding leaves representable values alone", "[half]") {
  const uint32_t words[] = {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu, 0x9E3779B9u};
  uint64_t bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t p = uint16_t(i);
    for (uint32_t r : words) {
      if (half_is_nan(p)) bad += !half_is_nan(round_to_half_stochastic(half_to_float(p), r).bits);
      else bad += round_to_half_stochastic(half_to_float(p), r).bits != p;
      if (bf16_is_nan(p)) bad += !bf16_is_nan(round_to_bf16_stochastic(bf16_to_float(p), r).bits);
      else bad += round_to_bf16_stochastic(bf16_to_float(p), r).bits != p;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("stochastic rounding is unbiased: mean of many draws equals the input", "[half]") {
  // fp16 with 10^5 draws: the standard error is at most ulp / (2 sqrt(n)) = 1.6e-3 ulp, i.e.
  // < 2e-6 relative for these inputs (the subnormal one has ulp / x = 1.3e-3). bf16's ulp is 8x
  // coarser relative to x, so it takes 10^6 draws to keep 3e-5 beyond 8 standard errors.
  struct Case {
    DType dtype;
    float x;
    int64_t n;
  };
  const Case cases[] = {
      {DType::f16, 1.0f + 0.3f * std::ldexp(1.0f, -10), 100'000},
      {DType::f16, 0.1f, 100'000},
      {DType::f16, -3.14159265f, 100'000},
      {DType::f16, 1000.7f, 100'000},
      {DType::f16, 4.5678e-5f, 100'000},  // subnormal in fp16 (< 2^-14 = 6.1e-5)
      {DType::f16, 60000.3f, 100'000},
      {DType::bf16, 1.0f + 0.3f * std::ldexp(1.0f, -7), 1'000'000},
      {DType::bf16, 0.1f, 1'000'000},
      {DType::bf16, -3.14159265f, 1'000'000},
      {DType::bf16, 1.1e-38f, 1'000'000},  // float and bf16 subnormal
      {DType::bf16, 3.0e38f, 1'000'000},
  };
  Generator gen(1234);
  for (const Case& c : cases) {
    INFO(dtype_name(c.dtype) << " x = " << c.x);
    const Tensor y = full({c.n}, double(c.x), DType::f32).to(c.dtype, Rounding::stochastic, &gen);
    const std::vector<double> v = y.to_vector();
    double sum = 0.0;
    for (double e : v) sum += e;
    const double mean = sum / double(c.n);
    CHECK(std::fabs(mean - double(c.x)) <= 3e-5 * std::fabs(double(c.x)));
    // The nearest value is not the mean: the draws do spread over both neighbours.
    CHECK(mean != (c.dtype == DType::f16 ? double(half_to_float(float_to_half_rn(c.x)))
                                         : double(bf16_to_float(float_to_bf16_rn(c.x)))));
  }
}

TEST_CASE("stochastic rounding near the largest finite value", "[half]") {
  std::mt19937 rng(99u);
  // fp16: between 65504 and 65536 the upper neighbour is inf; P(inf) = (|x| - 65504) / 32.
  for (float x : {65504.0f, 65505.0f, 65510.0f, 65519.0f, 65520.0f, 65535.0f, 65536.0f, 70000.0f}) {
    for (float sx : {x, -x}) {
      INFO("x = " << sx);
      const double p = std::min(1.0, (double(x) - 65504.0) / 32.0);
      int64_t infs = 0, n = 20000, other = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float f = to_float(round_to_half_stochastic(sx, rng()));
        if (std::signbit(f) != std::signbit(sx)) ++other;
        else if (std::isinf(f)) ++infs;
        else if (std::fabs(f) != 65504.0f) ++other;  // NaN lands here too
      }
      CHECK(other == 0);
      const double sd = std::sqrt(p * (1 - p) / double(n));
      CHECK(std::fabs(double(infs) / double(n) - p) <= 5 * sd + 1e-12);
    }
  }
  // bf16: FLT_MAX lies between the largest bf16 (0x7F7F) and inf.
  for (int i = 0; i < 1000; ++i) {
    const uint16_t b = round_to_bf16_stochastic(FLT_MAX, rng()).bits;
    CHECK((b == 0x7F7F || b == 0x7F80));
  }
  CHECK(round_to_bf16_stochastic(FLT_MAX, 0xFFFFFFFFu).bits == 0x7F7F);
  CHECK(round_to_bf16_stochastic(FLT_MAX, 0u).bits == 0x7F80);
  CHECK(round_to_half_stochastic(std::numeric_limits<float>::infinity(), 5u).bits == 0x7C00);
  CHECK(round_to_bf16_stochastic(-std::numeric_limits<float>::infinity(), 5u).bits == 0xFF80);
  CHECK(std::isnan(to_float(round_to_half_stochastic(std::nanf(""), 5u))));
  CHECK(std::isnan(to_float(round_to_bf16_stochastic(std::nanf(""), 5u))));
}

TEST_CASE("Tensor::to with stochastic rounding: seeded, offset-driven, one word per element", "[half]") {
  Generator init(5);
  const Tensor x = uniform({64, 33}, -3.0, 3.0, init, DType::f32);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Generator g1(77), g2(77);
    const Tensor a = x.to(dt, Rounding::stochastic, &g1);
    const Tensor b = x.to(dt, Rounding::stochastic, &g2);
    CHECK(g1.offset() == uint64_t(x.numel()));
    REQUIRE(a.dtype() == dt);
    REQUIRE(a.shape() == x.shape());
    const std::vector<double> va = a.to_vector(), vb = b.to_vector();
    CHECK(va == vb);  // same seed and offset: the same tensor

    // The next draw from g1 starts at a new offset and rounds differently somewhere.
    const Tensor c = x.to(dt, Rounding::stochastic, &g1);
    CHECK(g1.offset() == 2 * uint64_t(x.numel()));
    CHECK(c.to_vector() != va);
    // A different seed also differs.
    Generator g3(78);
    CHECK(x.to(dt, Rounding::stochastic, &g3).to_vector() != va);

    // Element i (row-major) uses the rounding word offset + i (Note [Rounding words]).
    const std::vector<float> xv = x.values<float>();
    int64_t bad = 0, rounded_up = 0, nearest_differs = 0;
    const std::vector<double> near = x.to(dt).to_vector();
    for (size_t i = 0; i < xv.size(); ++i) {
      const uint32_t r = rounding_word(77, uint64_t(i));
      const float want = dt == DType::f16 ? to_float(round_to_half_stochastic(xv[i], r))
                                          : to_float(round_to_bf16_stochastic(xv[i], r));
      bad += double(want) != va[i];
      rounded_up += std::fabs(va[i]) > std::fabs(double(xv[i]));
      nearest_differs += va[i] != near[i];
    }
    CHECK(bad == 0);
    CHECK(rounded_up > 0);
    CHECK(nearest_differs > 0);

    // A non-contiguous source: the row-major index of the destination picks the word.
    Generator g4(77);
    const Tensor xt = x.t();
    const Tensor d = xt.to(dt, Rounding::stochastic, &g4);
    const std::vector<float> xtv = xt.values<float>();
    const std::vector<double> vd = d.to_vector();
    bad = 0;
    for (size_t i = 0; i < xtv.size(); ++i) {
      const uint32_t r = rounding_word(77, uint64_t(i));
      const float want = dt == DType::f16 ? to_float(round_to_half_stochastic(xtv[i], r))
                                          : to_float(round_to_bf16_stochastic(xtv[i], r));
      bad += double(want) != vd[i];
    }
    CHECK(bad == 0);
  }
  // Without a generator the process-wide one is used; reseeding it reproduces the draw.
  manual_seed(11);
  const std::vector<double> first = x.to(DType::bf16, Rounding::stochastic).to_vector();
  manual_seed(11);
  CHECK(x.to(DType::bf16, Rounding::stochastic).to_vector() == first);
  // Non-16-bit targets ignore the rounding mode and round to nearest.
  Generator g5(1);
  const Tensor x64 = x.to(DType::f64);
  CHECK(x64.to(DType::f32, Rounding::stochastic, &g5).to_vector() == x.to_vector());
}
