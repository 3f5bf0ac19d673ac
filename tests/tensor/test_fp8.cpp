// Formats of 8 bits and fewer (tensor/core/fp8.h) against references written independently of it:
//   RNE, decoding and E8M0: the CUDA toolkit's own host conversions (cuda_fp8.h, cuda_fp6.h,
//        cuda_fp4.h), bit for bit, on every tie, every code and tens of millions of floats;
//   stochastic rounding: a rounder written here in double from the rule (Note [Stochastic
//        rounding] in half.h) on a grid of values built from the format definitions.
// Without the CUDA headers the reference comparisons cannot run, and one test case fails to say so.
#include "support/catch.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "tensor/core/fp8.h"

#if __has_include(<cuda_fp8.h>) && __has_include(<cuda_fp6.h>) && __has_include(<cuda_fp4.h>)
#define MIXTAPE_TEST_CUDA_FP_HEADERS 1
// CUDA's host code has parameters it does not use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#pragma GCC diagnostic pop
#else
#define MIXTAPE_TEST_CUDA_FP_HEADERS 0
#endif

using namespace mixtape::bits8;
using mixtape::bits16::f32_bits;
using mixtape::bits16::f32_from;

namespace {

const Format* const kFormats[] = {&kE4M3, &kE5M2, &kE3M2, &kE2M3, &kE2M1};
const Overflow kModes[] = {Overflow::saturate, Overflow::no_saturate};
const char* mode_name(Overflow o) { return o == Overflow::saturate ? "saturate" : "no_saturate"; }

// What Note [Eight-bit formats] says of each format, written out here by hand.
struct Expected {
  const Format* f;
  int bits;
  uint8_t max_code;
  double max, min_normal, min_subnormal;
  uint8_t one, nan_code;
  bool has_code_after_max;  // inf (E5M2) or NaN (E4M3) right after max
};
const Expected kExpected[] = {
    {&kE4M3, 8, 0x7E, 448.0, 0x1p-6, 0x1p-9, 0x38, 0x7F, true},
    {&kE5M2, 8, 0x7B, 57344.0, 0x1p-14, 0x1p-16, 0x3C, 0x7F, true},
    {&kE3M2, 6, 0x1F, 28.0, 0x1p-2, 0x1p-4, 0x0C, 0x1F, false},
    {&kE2M3, 6, 0x1F, 7.5, 1.0, 0x1p-3, 0x08, 0x1F, false},
    {&kE2M1, 4, 0x07, 6.0, 1.0, 0x1p-1, 0x02, 0x07, false},
};
const Expected& expected(const Format& f) {
  for (const Expected& e : kExpected)
    if (e.f == &f) return e;
  FAIL("no expectations for " << f.name);
  return kExpected[0];
}

// The non-negative values of a format from its definition, in double: values[c] is magnitude code
// c (0 .. max_code, increasing), next the value after max if the exponents went on.
struct Grid {
  std::vector<double> values;
  double next;
  uint8_t sign_bit;
};
Grid grid_of(const Format& f) {
  const Expected& x = expected(f);
  const int m_bits = f.man_bits;
  Grid g;
  for (int c = 0; c <= x.max_code; ++c) {
    const int e = c >> m_bits, m = c & ((1 << m_bits) - 1);
    g.values.push_back(e == 0 ? std::ldexp(double(m), 1 - f.bias - m_bits)
                              : std::ldexp(double((1 << m_bits) + m), e - f.bias - m_bits));
  }
  const int e_max = x.max_code >> m_bits;
  g.next = x.max + std::ldexp(1.0, e_max - f.bias - m_bits);
  g.sign_bit = uint8_t(1u << (x.bits - 1));
  return g;
}

bool is_nan_code(uint8_t c, const Format& f) { return std::isnan(to_float(c, f)); }

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

// A float of random sign and mantissa in a random binade from min_subnormal / 4 to about 4 * max of
// f: where f rounds. Every fourth keeps only 4 mantissa bits, which lands on and next to ties often.
float random_in_range(std::mt19937& rng, const Format& f) {
  const Expected& x = expected(f);
  const int lo = std::ilogb(x.min_subnormal) - 2, hi = std::ilogb(x.max) + 2;
  const uint32_t w = rng();
  const uint32_t exp = uint32_t(127 + lo + int(rng() % uint32_t(hi - lo + 1)));
  const uint32_t mant_mask = (w & 0x3u) == 0 ? 0x780000u : 0x7FFFFFu;
  return f32_from((w & 0x80000000u) | (exp << 23) | (w & mant_mask));
}

// Count mismatches rather than REQUIRE in the inner loops (Catch2 assertions are slow); print the
// first few.
struct Mismatches {
  const char* what;
  uint64_t count = 0;
  void add(const char* format, const char* mode, float x, unsigned got, unsigned want) {
    if (count++ < 8)
      std::printf("%s: %s %s x = %a (0x%08X): got 0x%02X, want 0x%02X\n", what, format, mode, double(x), f32_bits(x),
                  got, want);
  }
  void add(const Format& f, Overflow o, float x, unsigned got, unsigned want) {
    add(f.name, mode_name(o), x, got, want);
  }
};

// A few named values per format, the edges Note [Eight-bit formats] and Note [Overflow and NaN]
// describe.
struct Case {
  const Format* f;
  float x;
  uint8_t sat, nosat;  // the code under Overflow::saturate and Overflow::no_saturate
  const char* why;
};
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const Case kCases[] = {
    {&kE4M3, 1.0f, 0x38, 0x38, "1"},
    {&kE4M3, -0.0f, 0x80, 0x80, "-0 keeps its sign"},
    {&kE4M3, 448.0f, 0x7E, 0x7E, "max"},
    {&kE4M3, 464.0f, 0x7E, 0x7E, "max + ulp/2 ties to max (0x7E is even)"},
    {&kE4M3, next_up(464.0f), 0x7E, 0x7F, "just above max + ulp/2: NaN without saturation"},
    {&kE4M3, -1000.0f, 0xFE, 0xFF, "-1000: -max, or NaN with the sign set"},
    {&kE4M3, kInf, 0x7E, 0x7F, "inf"},
    {&kE4M3, -kInf, 0xFE, 0xFF, "-inf"},
    {&kE4M3, kNaN, 0x7F, 0x7F, "NaN"},
    {&kE4M3, -kNaN, 0x7F, 0x7F, "-NaN loses its sign"},
    {&kE4M3, 0x1p-10f, 0x00, 0x00, "min subnormal / 2 ties to 0"},
    {&kE4M3, -0x1p-10f, 0x80, 0x80, "-min subnormal / 2 ties to -0"},
    {&kE4M3, next_up(0x1p-10f), 0x01, 0x01, "just above: min subnormal"},
    {&kE4M3, 0x1.Cp-7f, 0x07, 0x07, "largest subnormal"},
    {&kE4M3, 0x1.Ep-7f, 0x08, 0x08, "largest subnormal + ulp/2 ties up to min normal"},
    {&kE4M3, 1.0625f, 0x38, 0x38, "1 + ulp/2 ties to even (1)"},
    {&kE4M3, 1.1875f, 0x3A, 0x3A, "1 + 3 ulp/2 ties to even"},
    {&kE4M3, FLT_TRUE_MIN, 0x00, 0x00, "float subnormal"},
    {&kE5M2, 1.0f, 0x3C, 0x3C, "1"},
    {&kE5M2, 57344.0f, 0x7B, 0x7B, "max"},
    {&kE5M2, next_down(61440.0f), 0x7B, 0x7B, "just below max + ulp/2"},
    {&kE5M2, 61440.0f, 0x7B, 0x7C, "max + ulp/2 ties to inf (0x7B is odd)"},
    {&kE5M2, -kInf, 0xFB, 0xFC, "-inf"},
    {&kE5M2, kNaN, 0x7F, 0x7F, "NaN"},
    {&kE5M2, f32_from(0xFF800001u), 0x7F, 0x7F, "negative signalling NaN"},
    {&kE5M2, 0x1p-17f, 0x00, 0x00, "min subnormal / 2 ties to 0"},
    {&kE5M2, 0x1.8p-16f, 0x02, 0x02, "3/2 min subnormal ties up to even"},
    {&kE3M2, 28.0f, 0x1F, 0x1F, "max"},
    {&kE3M2, 1000.0f, 0x1F, 0x1F, "fp6 saturates in both modes"},
    {&kE3M2, -kInf, 0x3F, 0x3F, "-inf: -max"},
    {&kE3M2, -kNaN, 0x1F, 0x1F, "NaN: +max"},
    {&kE3M2, 1.0f, 0x0C, 0x0C, "1"},
    {&kE3M2, -0x1p-5f, 0x20, 0x20, "-min subnormal / 2 ties to -0"},
    {&kE2M3, 7.5f, 0x1F, 0x1F, "max"},
    {&kE2M3, 7.75f, 0x1F, 0x1F, "max + ulp/2: max"},
    {&kE2M3, kInf, 0x1F, 0x1F, "inf: max"},
    {&kE2M3, kNaN, 0x1F, 0x1F, "NaN: +max"},
    {&kE2M3, 1.0625f, 0x08, 0x08, "1 + ulp/2 ties to even (1)"},
    {&kE2M3, 0.0625f, 0x00, 0x00, "min subnormal / 2 ties to 0"},
    {&kE2M1, 6.0f, 0x07, 0x07, "max"},
    {&kE2M1, 5.0f, 0x06, 0x06, "5 ties to even (4)"},
    {&kE2M1, -7.0f, 0x0F, 0x0F, "-7: -max"},
    {&kE2M1, -kNaN, 0x07, 0x07, "NaN: +max"},
    {&kE2M1, 0.25f, 0x00, 0x00, "min subnormal / 2 ties to 0"},
    {&kE2M1, 0.75f, 0x02, 0x02, "3/2 min subnormal ties up to even (1)"},
    {&kE2M1, 2.5f, 0x04, 0x04, "2.5 ties to even (2)"},
};

}  // namespace

// ---- the formats as Note [Eight-bit formats] describes them ------------------------------------

TEST_CASE("fp8 format constants match Note [Eight-bit formats]", "[fp8]") {
  static_assert(bit_width(kE4M3) == 8 && bit_width(kE5M2) == 8 && bit_width(kE3M2) == 6 && bit_width(kE2M1) == 4);
  static_assert(max_finite(kE4M3) == 448.0f && max_code(kE5M2) == 0x7B && nan_code(kE2M3) == 0x1F);
  static_assert(from_float_rn(-1000.0f, kE4M3, Overflow::no_saturate) == 0xFF);  // usable in constant expressions
  static_assert(from_float_sr(1.0f, 12345u, kE2M1) == 0x02 && e8m0_from_float(3.0f, E8m0Rounding::up) == 0x81);
  for (const Expected& x : kExpected) {
    const Format& f = *x.f;
    INFO(f.name);
    CHECK(bit_width(f) == x.bits);
    CHECK(max_code(f) == x.max_code);
    CHECK(double(max_finite(f)) == x.max);
    CHECK(double(min_normal(f)) == x.min_normal);
    CHECK(double(min_subnormal(f)) == x.min_subnormal);
    CHECK(nan_code(f) == x.nan_code);
    CHECK(from_float_rn(1.0f, f) == x.one);
    CHECK(to_float(x.one, f) == 1.0f);
    CHECK(to_float(1, f) == min_subnormal(f));
    // Every finite code decodes to the value its definition gives, with its sign.
    const Grid g = grid_of(f);
    uint64_t bad = 0;
    for (int c = 0; c <= x.max_code; ++c) {
      bad += double(to_float(uint8_t(c), f)) != g.values[size_t(c)];
      bad += f32_bits(to_float(uint8_t(c | g.sign_bit), f)) != (f32_bits(float(g.values[size_t(c)])) | 0x80000000u);
    }
    CHECK(bad == 0);
    // What lies past max: inf in E5M2 (then NaNs), NaN in E4M3, nothing in fp6 / fp4.
    if (f.specials == Specials::ieee) {
      CHECK(to_float(uint8_t(x.max_code + 1), f) == std::numeric_limits<float>::infinity());
      CHECK(to_float(uint8_t(g.sign_bit | (x.max_code + 1)), f) == -std::numeric_limits<float>::infinity());
      for (int c = x.max_code + 2; c < g.sign_bit; ++c) CHECK(is_nan_code(uint8_t(c), f));
    } else if (f.specials == Specials::nan_only) {
      CHECK(is_nan_code(uint8_t(x.max_code + 1), f));
      CHECK(is_nan_code(uint8_t(g.sign_bit | (x.max_code + 1)), f));
    }
    CHECK(x.has_code_after_max == (f.specials != Specials::none));
  }
}

TEST_CASE("float -> fp8 named edge cases", "[fp8]") {
  for (const Case& c : kCases) {
    INFO(c.f->name << ": " << c.why << ": x = " << c.x);
    CHECK(from_float_rn(c.x, *c.f, Overflow::saturate) == c.sat);
    CHECK(from_float_rn(c.x, *c.f, Overflow::no_saturate) == c.nosat);
  }
}

TEST_CASE("e8m0 named edge cases", "[fp8]") {
  using R = E8m0Rounding;
  struct E8Case {
    float x;
    uint8_t down, up;        // saturating
    uint8_t down_ns, up_ns;  // no_saturate
    const char* why;
  };
  const E8Case cases[] = {
      {1.0f, 0x7F, 0x7F, 0x7F, 0x7F, "1 = 2^0"},
      {-1.0f, 0x7F, 0x7F, 0x7F, 0x7F, "the sign is ignored"},
      {3.0f, 0x80, 0x81, 0x80, 0x81, "3: 2 down, 4 up"},
      {next_up(2.0f), 0x80, 0x81, 0x80, 0x81, "just above 2"},
      {next_down(2.0f), 0x7F, 0x80, 0x7F, 0x80, "just below 2"},
      {0.0f, 0x00, 0x00, 0x00, 0x00, "0: the smallest scale 2^-127"},
      {-0.0f, 0x00, 0x00, 0x00, 0x00, "-0"},
      {f32_from(0x00400000u), 0x00, 0x00, 0x00, 0x00, "2^-127 (a float subnormal)"},
      {f32_from(0x00400001u), 0x00, 0x01, 0x00, 0x01, "just above 2^-127"},
      {f32_from(0x003FFFFFu), 0x00, 0x00, 0x00, 0x00, "below 2^-127: clamped to it"},
      {FLT_TRUE_MIN, 0x00, 0x00, 0x00, 0x00, "the smallest float"},
      {FLT_MIN, 0x01, 0x01, 0x01, 0x01, "2^-126"},
      {0x1p127f, 0xFE, 0xFE, 0xFE, 0xFE, "2^127: the largest scale"},
      {next_up(0x1p127f), 0xFE, 0xFE, 0xFE, 0xFF, "above 2^127 rounding up: 2^128 is NaN unless saturated"},
      {FLT_MAX, 0xFE, 0xFE, 0xFE, 0xFF, "FLT_MAX"},
      {kInf, 0xFE, 0xFE, 0xFF, 0xFF, "inf"},
      {-kInf, 0xFE, 0xFE, 0xFF, 0xFF, "-inf"},
      {kNaN, 0xFF, 0xFF, 0xFF, 0xFF, "NaN"},
      {-kNaN, 0xFF, 0xFF, 0xFF, 0xFF, "-NaN"},
  };
  for (const E8Case& c : cases) {
    INFO(c.why << ": x = " << c.x);
    CHECK(e8m0_from_float(c.x, R::down) == c.down);
    CHECK(e8m0_from_float(c.x, R::up) == c.up);
    CHECK(e8m0_from_float(c.x, R::down, Overflow::no_saturate) == c.down_ns);
    CHECK(e8m0_from_float(c.x, R::up, Overflow::no_saturate) == c.up_ns);
  }
  CHECK(e8m0_to_float(0x7F) == 1.0f);
  CHECK(e8m0_to_float(0x00) == 0x1p-127f);
  CHECK(e8m0_to_float(0xFE) == 0x1p127f);
  CHECK(std::isnan(e8m0_to_float(0xFF)));
  for (int e = 0; e < 255; ++e) CHECK(double(e8m0_to_float(uint8_t(e))) == std::ldexp(1.0, e - 127));
}

// ---- RNE, decoding and E8M0 against the CUDA toolkit -------------------------------------------

#if MIXTAPE_TEST_CUDA_FP_HEADERS

namespace {

// CUDA's host conversions. fp6 and fp4 have no saturation parameter (they always saturate), so
// both of our modes are compared with their one result.
uint8_t cuda_rn(float x, const Format& f, Overflow o) {
  const __nv_saturation_t sat = o == Overflow::saturate ? __NV_SATFINITE : __NV_NOSAT;
  if (&f == &kE4M3) return __nv_cvt_float_to_fp8(x, sat, __NV_E4M3);
  if (&f == &kE5M2) return __nv_cvt_float_to_fp8(x, sat, __NV_E5M2);
  if (&f == &kE3M2) return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest);
  if (&f == &kE2M3) return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest);
  return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
}

// CUDA's decoders give a half.
float cuda_decode(uint8_t c, const Format& f) {
  __half_raw h;
  if (&f == &kE4M3) h = __nv_cvt_fp8_to_halfraw(c, __NV_E4M3);
  else if (&f == &kE5M2) h = __nv_cvt_fp8_to_halfraw(c, __NV_E5M2);
  else if (&f == &kE3M2) h = __nv_cvt_fp6_to_halfraw(c, __NV_E3M2);
  else if (&f == &kE2M3) h = __nv_cvt_fp6_to_halfraw(c, __NV_E2M3);
  else h = __nv_cvt_fp4_to_halfraw(c, __NV_E2M1);
  return __half2float(__half(h));
}

uint8_t cuda_e8m0(float x, E8m0Rounding mode, Overflow o) {
  return __nv_cvt_float_to_e8m0(x, o == Overflow::saturate ? __NV_SATFINITE : __NV_NOSAT,
                                mode == E8m0Rounding::down ? cudaRoundZero : cudaRoundPosInf);
}

// Every format and overflow mode on x.
void check_rn_all(float x, Mismatches& m) {
  for (const Format* f : kFormats)
    for (Overflow o : kModes)
      if (const uint8_t want = cuda_rn(x, *f, o), got = from_float_rn(x, *f, o); got != want)
        m.add(*f, o, x, got, want);
}

void check_e8m0_all(float x, Mismatches& m) {
  for (E8m0Rounding mode : {E8m0Rounding::down, E8m0Rounding::up})
    for (Overflow o : kModes)
      if (const uint8_t want = cuda_e8m0(x, mode, o), got = e8m0_from_float(x, mode, o); got != want)
        m.add(mode == E8m0Rounding::down ? "down" : "up", mode_name(o), x, got, want);
}

// The 2^16 upper halves of the float bits, each with these lower halves.
std::vector<uint32_t> low_halves() {
  std::mt19937 rng(8u);
  return {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, uint32_t(rng() & 0xFFFFu)};
}

}  // namespace

TEST_CASE("fp8 to_float equals CUDA's decoding for every code", "[fp8]") {
  Mismatches m{"to_float vs CUDA"};
  for (const Format* f : kFormats) {
    // All 256 bytes: the bits above the format's width are ignored by both.
    for (uint32_t c = 0; c < 256; ++c) {
      const float want = cuda_decode(uint8_t(c), *f), got = to_float(uint8_t(c), *f);
      if (std::isnan(want) ? !std::isnan(got) : f32_bits(got) != f32_bits(want))
        m.add(f->name, "decode: float bits of code x", float(c), f32_bits(got), f32_bits(want));
    }
  }
  CHECK(m.count == 0);
}

TEST_CASE("float -> fp8 named edge cases agree with CUDA", "[fp8]") {
  for (const Case& c : kCases) {
    INFO(c.f->name << ": " << c.why << ": x = " << c.x);
    CHECK(cuda_rn(c.x, *c.f, Overflow::saturate) == c.sat);
    CHECK(cuda_rn(c.x, *c.f, Overflow::no_saturate) == c.nosat);
  }
}

TEST_CASE("float -> fp8 RNE equals CUDA on all 2^16 upper halves of the float bits", "[fp8]") {
  Mismatches m{"RNE vs CUDA"};
  uint64_t n = 0;
  for (uint32_t low : low_halves())
    for (uint32_t hi = 0; hi < 65536; ++hi, ++n) check_rn_all(f32_from((hi << 16) | low), m);
  CHECK(n == 7 * 65536);
  CHECK(m.count == 0);
}

TEST_CASE("float -> fp8 RNE at every tie, its float neighbours and every value, against CUDA", "[fp8]") {
  Mismatches m{"RNE vs CUDA"}, mtie{"RNE tie rule"};
  uint64_t ties = 0;
  for (const Format* fp : kFormats) {
    const Format& f = *fp;
    const Grid g = grid_of(f);
    const uint32_t max_c = max_code(f);
    for (Overflow o : kModes) {
      // The code after max where the mode allows one (Note [Overflow and NaN]), else max.
      const uint32_t ceiling = max_c + (o == Overflow::no_saturate && f.specials != Specials::none ? 1u : 0u);
      for (uint32_t sign : {0u, uint32_t(g.sign_bit)}) {
        const float s = sign ? -1.0f : 1.0f;
        for (uint32_t c = 0; c <= max_c; ++c) {
          // The value itself, then the midpoint to the next one (max to the would-be next).
          const float v = s * float(g.values[c]);
          if (const uint8_t want = cuda_rn(v, f, o), got = from_float_rn(v, f, o); got != want)
            m.add(f, o, v, got, want);
          if (from_float_rn(v, f, o) != (sign | c)) mtie.add(f, o, v, from_float_rn(v, f, o), sign | c);
          const double hi = c == max_c ? g.next : g.values[c + 1];
          const float mid = float((g.values[c] + hi) / 2);
          REQUIRE(double(mid) == (g.values[c] + hi) / 2);
          for (float x : {mid, next_down(mid), next_up(mid)}) {
            const float sx = s * x;
            if (const uint8_t want = cuda_rn(sx, f, o), got = from_float_rn(sx, f, o); got != want)
              m.add(f, o, sx, got, want);
          }
          ++ties;
          // Reference-free: below the tie -> c, above -> c + 1, on it -> the even one; clamped.
          const uint32_t even = std::min((c & 1u) ? c + 1 : c, ceiling), up = std::min(c + 1, ceiling);
          if (from_float_rn(s * mid, f, o) != (sign | even))
            mtie.add(f, o, s * mid, from_float_rn(s * mid, f, o), sign | even);
          if (from_float_rn(s * next_down(mid), f, o) != (sign | c)) mtie.add(f, o, s * next_down(mid), 0, sign | c);
          if (from_float_rn(s * next_up(mid), f, o) != (sign | up)) mtie.add(f, o, s * next_up(mid), 0, sign | up);
        }
      }
    }
  }
  CHECK(ties == 2 * 2 * (0x7F + 0x7C + 0x20 + 0x20 + 0x8));
  // Zeros, infinities, NaNs with several payloads, float subnormals, the float range's ends.
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u,
                               0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA00000u, 0x7FC00001u,
                               0x00000001u, 0x80000001u, 0x00400000u, 0x007FFFFFu, 0x807FFFFFu, 0x00800000u,
                               0x80800000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u, 0xBF800000u};
  for (uint32_t b : specials) check_rn_all(f32_from(b), m);
  CHECK(m.count == 0);
  CHECK(mtie.count == 0);
}

TEST_CASE("float -> fp8 RNE equals CUDA on 16 million random float bit patterns", "[fp8]") {
  std::mt19937 rng(20250101u);
  Mismatches m{"RNE vs CUDA"};
  uint64_t nans = 0;
  for (int i = 0; i < 16'000'000; ++i) {
    const float x = f32_from(rng());
    nans += std::isnan(x);
    check_rn_all(x, m);
  }
  CHECK(nans > 0);  // the NaN branch was exercised
  CHECK(m.count == 0);
}

TEST_CASE("float -> fp8 RNE equals CUDA on 16 million floats in each format's range", "[fp8]") {
  std::mt19937 rng(20250102u);
  Mismatches m{"RNE vs CUDA"};
  for (const Format* f : kFormats) {
    const bool one_cuda_mode = f->specials == Specials::none;  // fp6 / fp4: CUDA's one result for both
    for (int i = 0; i < 16'000'000; ++i) {
      const float x = random_in_range(rng, *f);
      const uint8_t want_sat = cuda_rn(x, *f, Overflow::saturate);
      const uint8_t want_nosat = one_cuda_mode ? want_sat : cuda_rn(x, *f, Overflow::no_saturate);
      if (const uint8_t got = from_float_rn(x, *f, Overflow::saturate); got != want_sat)
        m.add(*f, Overflow::saturate, x, got, want_sat);
      if (const uint8_t got = from_float_rn(x, *f, Overflow::no_saturate); got != want_nosat)
        m.add(*f, Overflow::no_saturate, x, got, want_nosat);
    }
  }
  CHECK(m.count == 0);
}

TEST_CASE("e8m0 equals CUDA: every upper half of the float bits, random floats, every code", "[fp8]") {
  Mismatches m{"e8m0 vs CUDA"};
  for (uint32_t low : low_halves())
    for (uint32_t hi = 0; hi < 65536; ++hi) check_e8m0_all(f32_from((hi << 16) | low), m);
  std::mt19937 rng(20250103u);
  for (int i = 0; i < 4'000'000; ++i) check_e8m0_all(f32_from(rng()), m);
  CHECK(m.count == 0);
  // Decoding: CUDA gives a bf16, 2^-127 for code 0 (a subnormal) and NaN for 0xFF.
  uint64_t bad = 0;
  for (uint32_t e = 0; e < 256; ++e) {
    const float want = f32_from(uint32_t(__nv_cvt_e8m0_to_bf16raw(uint8_t(e)).x) << 16);
    const float got = e8m0_to_float(uint8_t(e));
    bad += std::isnan(want) ? !std::isnan(got) : f32_bits(got) != f32_bits(want);
  }
  CHECK(bad == 0);
  CHECK(__nv_cvt_e8m0_to_bf16raw(0x00).x == 0x0040);  // 2^-127
  CHECK(__nv_cvt_e8m0_to_bf16raw(0xFF).x == 0x7FFF);  // NaN
}

#else

// Without the headers the reference cases are not compiled; this one says so, and ctest counts it
// as skipped, never as passed (tests/CMakeLists.txt).
TEST_CASE("fp8 reference tests need the CUDA toolkit headers", "[fp8]") {
  WARN(
      "SKIPPED: tests/tensor/test_fp8.cpp compares tensor/core/fp8.h bit for bit with the CUDA toolkit's host "
      "conversions, and cuda_fp8.h / cuda_fp6.h / cuda_fp4.h are not on the include path: install the CUDA toolkit "
      "(CMake finds it through find_package(CUDAToolkit), tests/CMakeLists.txt) to run the RNE, decoding and E8M0 "
      "reference tests");
}

#endif

// ---- stochastic rounding (Note [Stochastic rounding] in half.h) ---------------------------------

namespace {

// Stochastic rounding by the rule, in double, on the grid of the format's values: t the largest
// grid value <= |x|, u the next one (past max the would-be next, which is the inf / NaN code),
// p = (|x| - t) / (u - t), the result u when r < floor(p * 2^32). Saturation, and the formats
// without specials, give max for everything past max; otherwise past the would-be next is the
// inf / NaN code. Also returns the threshold floor(p * 2^32).
struct SrRef {
  uint8_t code;
  uint64_t threshold;
  uint8_t t, u;  // the codes of the two neighbours, with x's sign
};
SrRef ref_sr(float x, uint32_t r, const Format& f, Overflow o, const Grid& g) {
  const Expected& e = expected(f);
  if (std::isnan(x)) return {e.nan_code, 0, e.nan_code, e.nan_code};
  const uint8_t sign = std::signbit(x) ? g.sign_bit : 0;
  const double a = std::fabs(double(x));
  const bool saturating = o == Overflow::saturate || !e.has_code_after_max;
  size_t t;
  double tv, uv;
  if (a >= e.max) {
    const uint8_t over = uint8_t(sign | (e.max_code + 1));
    if (a == e.max || saturating)
      return {uint8_t(sign | e.max_code), 0, uint8_t(sign | e.max_code), uint8_t(sign | e.max_code)};
    if (a >= g.next) return {over, 0, over, over};
    t = e.max_code;
    tv = e.max;
    uv = g.next;
  } else {
    t = size_t(std::upper_bound(g.values.begin(), g.values.end(), a) - g.values.begin()) - 1;
    tv = g.values[t];
    uv = g.values[t + 1];
  }
  const double p = (a - tv) / (uv - tv);  // exact: a - tv is exact, uv - tv a power of two
  const uint64_t threshold = uint64_t(std::floor(p * 4294967296.0));
  const uint8_t tc = uint8_t(sign | t), uc = uint8_t(sign | (t + 1));
  return {uint64_t(r) < threshold ? uc : tc, threshold, tc, uc};
}

}  // namespace

TEST_CASE("fp8 stochastic rounding equals the rule, also at the threshold words", "[fp8]") {
  std::mt19937 rng(424242u);
  Mismatches m{"SR vs reference"}, medge{"SR at floor(p * 2^32) - 1 and floor(p * 2^32)"};
  uint64_t edges = 0;
  for (const Format* fp : kFormats) {
    const Format& f = *fp;
    const Grid g = grid_of(f);
    for (Overflow o : kModes) {
      for (int i = 0; i < 600'000; ++i) {
        // Mostly the format's range; every eighth any bit pattern (NaN, inf, huge, tiny).
        const float x = (i & 7) == 0 ? f32_from(rng()) : random_in_range(rng, f);
        const uint32_t r = rng();
        const SrRef want = ref_sr(x, r, f, o, g);
        if (const uint8_t got = from_float_sr(x, r, f, o); got != want.code) m.add(f, o, x, got, want.code);
        // The result flips exactly between the words floor(p * 2^32) - 1 and floor(p * 2^32).
        if (want.threshold > 0) {
          ++edges;
          const uint32_t below = uint32_t(want.threshold - 1), at = uint32_t(want.threshold);
          if (const uint8_t got = from_float_sr(x, below, f, o); got != want.u) medge.add(f, o, x, got, want.u);
          if (const uint8_t got = from_float_sr(x, at, f, o); got != want.t) medge.add(f, o, x, got, want.t);
        }
      }
    }
  }
  CHECK(edges > 4'000'000);
  CHECK(m.count == 0);
  CHECK(medge.count == 0);
  // Hand-picked: e4m3 1 + ulp/4 (ulp = 1/8), threshold 2^30; e5m2 between max and inf, p = 1/2.
  CHECK(from_float_sr(1.03125f, (1u << 30) - 1, kE4M3) == 0x39);
  CHECK(from_float_sr(1.03125f, 1u << 30, kE4M3) == 0x38);
  CHECK(from_float_sr(-1.03125f, 0, kE4M3) == 0xB9);
  CHECK(from_float_sr(-1.03125f, 0xFFFFFFFFu, kE4M3) == 0xB8);
  CHECK(from_float_sr(61440.0f, (1u << 31) - 1, kE5M2, Overflow::no_saturate) == 0x7C);
  CHECK(from_float_sr(61440.0f, 1u << 31, kE5M2, Overflow::no_saturate) == 0x7B);
  CHECK(from_float_sr(61440.0f, 0, kE5M2, Overflow::saturate) == 0x7B);
  CHECK(from_float_sr(65536.0f, 0xFFFFFFFFu, kE5M2, Overflow::no_saturate) == 0x7C);  // the would-be next
  CHECK(from_float_sr(-464.0f, 0, kE4M3, Overflow::no_saturate) == 0xFF);             // NaN with the sign
  CHECK(from_float_sr(-480.0f, 0xFFFFFFFFu, kE4M3, Overflow::no_saturate) == 0xFF);
  CHECK(from_float_sr(-kInf, 0, kE4M3, Overflow::no_saturate) == 0xFF);
  CHECK(from_float_sr(kInf, 0, kE5M2, Overflow::no_saturate) == 0x7C);
  CHECK(from_float_sr(kInf, 0, kE5M2, Overflow::saturate) == 0x7B);
  CHECK(from_float_sr(7.0f, 0, kE2M1, Overflow::no_saturate) == 0x07);  // fp4 saturates
  CHECK(from_float_sr(-kNaN, 0, kE3M2) == 0x1F);
  CHECK(from_float_sr(0.0625f, (1u << 31) - 1, kE2M3) == 0x01);  // half the min subnormal, p = 1/2
  CHECK(from_float_sr(0.0625f, 1u << 31, kE2M3) == 0x00);
}

TEST_CASE("fp8 stochastic rounding leaves representable values alone", "[fp8]") {
  std::mt19937 rng(99u);
  std::vector<uint32_t> words = {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu};
  for (int i = 0; i < 200; ++i) words.push_back(rng());
  uint64_t bad = 0, checked = 0;
  for (const Format* f : kFormats) {
    for (Overflow o : kModes) {
      for (uint32_t c = 0; c < (1u << bit_width(*f)); ++c) {
        const float v = to_float(uint8_t(c), *f);
        if (std::isnan(v)) continue;
        // inf stays inf only where it is a result: without saturation.
        const uint8_t want = std::isinf(v) && o == Overflow::saturate ? uint8_t(c - 1) : uint8_t(c);
        for (uint32_t r : words) {
          bad += from_float_sr(v, r, *f, o) != want;
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 100'000);
  CHECK(bad == 0);
}

TEST_CASE("fp8 stochastic rounding gives one of the two RNE neighbours", "[fp8]") {
  std::mt19937 rng(31337u);
  Mismatches m{"SR not a neighbour"}, mrn{"RNE not a neighbour"};
  for (const Format* fp : kFormats) {
    const Format& f = *fp;
    const Grid g = grid_of(f);
    const double max = g.values.back();
    for (int i = 0; i < 500'000; ++i) {
      const float x = random_in_range(rng, f);
      if (std::fabs(double(x)) > max) continue;  // past max: the overflow tests above
      const SrRef n = ref_sr(x, 0, f, Overflow::saturate, g);
      for (Overflow o : kModes) {
        const uint8_t got = from_float_sr(x, rng(), f, o), rn = from_float_rn(x, f, o);
        if (got != n.t && got != n.u) m.add(f, o, x, got, n.t);
        if (rn != n.t && rn != n.u) mrn.add(f, o, x, rn, n.t);
      }
    }
  }
  CHECK(m.count == 0);
  CHECK(mrn.count == 0);
}

TEST_CASE("fp8 stochastic rounding is unbiased: the mean of many draws equals the input", "[fp8]") {
  // For each format, x at a fraction 0.3 and 0.77 of the way from a value to the next, in the
  // subnormals, mid-range and next to max; 2^20 draws. The mean of two neighbours t < u with
  // P(u) = p has standard deviation (u - t) sqrt(p (1 - p)) / 2^10: the bound is 6 of those (the
  // 2^-32 granularity of p adds at most (u - t) 2^-32).
  std::mt19937 rng(271828u);
  const int n = 1 << 20;
  for (const Format* fp : kFormats) {
    const Format& f = *fp;
    const Grid g = grid_of(f);
    const size_t top = g.values.size() - 1;
    for (size_t c : {size_t(1), top / 2, top - 1}) {
      for (double frac : {0.3, 0.77}) {
        for (double s : {1.0, -1.0}) {
          const double d = g.values[c + 1] - g.values[c];
          const float x = float(s * (g.values[c] + frac * d));
          const double p = (std::fabs(double(x)) - g.values[c]) / d;
          double sum = 0.0;
          for (int i = 0; i < n; ++i) sum += double(to_float(from_float_sr(x, rng(), f), f));
          const double mean = sum / n;
          const double bound = 6.0 * d * std::sqrt(p * (1.0 - p)) / std::sqrt(double(n)) + d * 0x1p-32;
          INFO(f.name << ": x = " << x << ", mean = " << mean << ", bound = " << bound);
          CHECK(std::fabs(mean - double(x)) <= bound);
        }
      }
    }
  }
}
