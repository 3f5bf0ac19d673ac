// RoundingCensus (tensor/core/rounding_census.h, Note [Rounding census]): exact counts of what is
// rounded to f16 and bf16 while a census is open, derived by hand from the formats' ranges:
//   f16   smallest subnormal 2^-24 (5.96e-8), smallest normal 2^-14 (6.10e-5), largest 65504;
//         |v| <= 2^-25 rounds to 0, |v| >= 65520 rounds to inf.
//   bf16  smallest subnormal 2^-133 (9.18e-41), smallest normal 2^-126 (1.18e-38), largest
//         (2 - 2^-7) 2^127 (3.3895e38); |v| <= 2^-134 rounds to 0, |v| >= (2 - 2^-8) 2^127 to inf.
#include "support/catch.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::nanf("");

// The stored 16-bit pattern of element i of an f16 or bf16 tensor.
uint16_t bits_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f16 ? t.data<half>()[i].bits : t.data<bfloat16>()[i].bits;
}

void check_counts(const RoundingCounts& got, const RoundingCounts& want) {
  CHECK(got.rounded == want.rounded);
  CHECK(got.nonzero == want.nonzero);
  CHECK(got.underflow == want.underflow);
  CHECK(got.subnormal == want.subnormal);
  CHECK(got.overflow == want.overflow);
}

}  // namespace

TEST_CASE("the census counts f32 -> f16 roundings exactly", "[census]") {
  // value                         f16 result         counted as
  const std::vector<float> v = {
      0.0f,                   //  +0                 rounded
      -0.0f,                  //  -0                 rounded
      1e-9f,                  //  +0                 nonzero, underflow
      -1e-9f,                 //  -0                 nonzero, underflow
      std::ldexp(1.0f, -25),  //  +0 (tie to even)   nonzero, underflow
      1e-6f,                  //  subnormal          nonzero, subnormal
      -1e-6f,                 //  -subnormal         nonzero, subnormal
      6e-5f,                  //  subnormal          nonzero, subnormal (just below 2^-14)
      std::ldexp(1.0f, -14),  //  smallest normal    nonzero
      70000.0f,               //  +inf               nonzero, overflow
      -70000.0f,              //  -inf               nonzero, overflow
      65520.0f,               //  +inf (tie to even) nonzero, overflow
      65519.0f,               //  65504              nonzero
      kInf,                   //  +inf               rounded (not finite: not an overflow)
      -kInf,                  //  -inf               rounded
      kNaN,                   //  NaN                rounded
      1.0f,                   //  1                  nonzero
  };
  const Tensor x = from_vector(v, {int64_t(v.size())}, DType::f32);
  Tensor h;
  RoundingCounts c;
  {
    RoundingCensus census;
    check_counts(census.counts(), {});
    h = x.to(DType::f16);
    c = census.counts();
  }
  REQUIRE(h.dtype() == DType::f16);
  check_counts(c, {.rounded = 17, .nonzero = 12, .underflow = 3, .subnormal = 3, .overflow = 3});
  CHECK(c.underflow_rate() == 3.0 / 12.0);
  CHECK(c.subnormal_rate() == 3.0 / 12.0);
  // The values behind the counts.
  CHECK(bits_at(h, 2) == 0x0000);
  CHECK(bits_at(h, 3) == 0x8000);
  CHECK(bits_at(h, 4) == 0x0000);
  CHECK(bits_at(h, 5) == 0x0011);  // 1e-6 / 2^-24 = 16.8 -> 17 ulps
  CHECK(bits_at(h, 8) == 0x0400);
  CHECK(bits_at(h, 9) == 0x7C00);
  CHECK(bits_at(h, 11) == 0x7C00);
  CHECK(h.flat_get(12) == 65504.0);
}

TEST_CASE("the census counts f32 -> bf16 roundings exactly", "[census]") {
  const float flt_max = std::numeric_limits<float>::max();
  const std::vector<float> v = {
      0.0f,                    //  +0                  rounded
      1e-40f,                  //  subnormal (2^-133)  nonzero, subnormal (an f32 subnormal too)
      3e-39f,                  //  subnormal           nonzero, subnormal
      1e-45f,                  //  +0 (2^-149)         nonzero, underflow
      -1e-45f,                 //  -0                  nonzero, underflow
      std::ldexp(1.0f, -134),  //  +0 (tie to even)    nonzero, underflow
      std::ldexp(1.5f, -134),  //  2^-133              nonzero, subnormal
      std::ldexp(1.0f, -126),  //  smallest normal     nonzero
      1e-9f,                   //  normal in bf16      nonzero
      70000.0f,                //  70144               nonzero (no overflow in bf16)
      3.0e38f,                 //  normal              nonzero
      flt_max,                 //  +inf                nonzero, overflow
      -flt_max,                //  -inf                nonzero, overflow
      kInf,                    //  +inf                rounded
      kNaN,                    //  NaN                 rounded
      1.0f,                    //  1                   nonzero
  };
  const Tensor x = from_vector(v, {int64_t(v.size())}, DType::f32);
  Tensor b;
  RoundingCounts c;
  {
    RoundingCensus census;
    b = x.to(DType::bf16);
    c = census.counts();
  }
  check_counts(c, {.rounded = 16, .nonzero = 13, .underflow = 3, .subnormal = 3, .overflow = 2});
  CHECK(bits_at(b, 1) == 0x0001);
  CHECK(bits_at(b, 3) == 0x0000);
  CHECK(bits_at(b, 4) == 0x8000);
  CHECK(bits_at(b, 5) == 0x0000);
  CHECK(bits_at(b, 6) == 0x0001);
  CHECK(bits_at(b, 7) == 0x0080);
  CHECK(b.flat_get(9) == 70144.0);
  CHECK(bits_at(b, 11) == 0x7F80);
  CHECK(bits_at(b, 12) == 0xFF80);
}

TEST_CASE("nothing is counted while no census is open, and each census starts from zero", "[census]") {
  const Tensor x = from_vector(std::vector<float>{1e-9f, 70000.0f, 1.0f}, {3}, DType::f32);
  (void)x.to(DType::f16);  // no census open
  {
    RoundingCensus census;
    check_counts(census.counts(), {});
    (void)x.to(DType::f32);  // an f32 result is not a 16-bit rounding
    (void)x.to(DType::f64);
    check_counts(census.counts(), {});
    (void)x.to(DType::f16);
    check_counts(census.counts(), {.rounded = 3, .nonzero = 3, .underflow = 1, .subnormal = 0, .overflow = 1});
  }
  // Closed again: the counters (read directly, since opening a census resets them) stand still.
  const uint64_t rounded = detail::census.rounded.load();
  CHECK(rounded == 3);
  (void)x.to(DType::f16);
  (void)x.to(DType::bf16);
  CHECK(detail::census.rounded.load() == rounded);
  CHECK(detail::census.underflow.load() == 1);
  RoundingCensus next;
  check_counts(next.counts(), {});
}

TEST_CASE("censuses do not nest: a second one throws and the first keeps counting", "[census]") {
  const Tensor x = from_vector(std::vector<float>{1e-9f, 2.0f}, {2}, DType::f32);
  {
    RoundingCensus outer;
    (void)x.to(DType::f16);
    CHECK_THROWS_WITH(RoundingCensus(), Catch::Contains("a census is already open"));
    (void)x.to(DType::f16);
    check_counts(outer.counts(), {.rounded = 4, .nonzero = 4, .underflow = 2, .subnormal = 0, .overflow = 0});
  }
  CHECK_NOTHROW(RoundingCensus());  // closed: a new one may open
}

TEST_CASE("ops that compute in fp32 and store 16 bits are counted where they round", "[census]") {
  // f16 products, each computed in fp32 and rounded once (1e-4 is 1.00016e-4 in f16):
  //   1e-4 *  1e-4 = 1.0e-8   -> +0        underflow
  //   1e-4 * -1e-4 = -1.0e-8  -> -0        underflow
  //   2 * 3        = 6        -> 6
  //   0 * 5        = 0        -> 0         (zero: rounded, not nonzero)
  //   1e-2 * 1e-4  = 1.0e-6   -> subnormal
  //   300 * 300    = 90000    -> +inf      overflow
  const Tensor a = from_vector(std::vector<double>{1e-4, 1e-4, 2, 0, 1e-2, 300}, {6}, DType::f16);
  const Tensor b = from_vector(std::vector<double>{1e-4, -1e-4, 3, 5, 1e-4, 300}, {6}, DType::f16);
  const Tensor a32 = a.to(DType::f32), b32 = b.to(DType::f32);
  Tensor p;
  RoundingCounts c, c32;
  {
    RoundingCensus census;
    (void)mul(a32, b32);  // f32 result: nothing rounded to 16 bits
    c32 = census.counts();
    p = mul(a, b);
    c = census.counts();
  }
  check_counts(c32, {});
  REQUIRE(p.dtype() == DType::f16);
  check_counts(c, {.rounded = 6, .nonzero = 5, .underflow = 2, .subnormal = 1, .overflow = 1});
  CHECK(bits_at(p, 0) == 0x0000);
  CHECK(bits_at(p, 1) == 0x8000);
  CHECK(p.flat_get(2) == 6.0);
  CHECK(bits_at(p, 5) == 0x7C00);

  // A reduction rounds once, at its output: one rounding for the whole sum.
  const Tensor s = from_vector(std::vector<double>{1e-4, 2e-4, 3e-4}, {3}, DType::bf16);
  RoundingCensus census;
  (void)sum(s);
  check_counts(census.counts(), {.rounded = 1, .nonzero = 1, .underflow = 0, .subnormal = 0, .overflow = 0});
}
