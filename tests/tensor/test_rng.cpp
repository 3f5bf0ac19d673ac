// Philox4x32-10 (tensor/core/rng.h) and the random tensor factories built on it.
#include "support/catch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "tensor/core/rng.h"
#include "tensor/tensor.h"

using namespace mixtape;

namespace {

struct Moments {
  double mean, var, min, max;
};

Moments moments(const std::vector<double>& v) {
  double s = 0.0, lo = v.front(), hi = v.front();
  for (double x : v) {
    s += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const double mean = s / double(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, ss / double(v.size() - 1), lo, hi};
}

}  // namespace

TEST_CASE("Philox4x32-10 known-answer vectors", "[rng]") {
  // The three "philox4x32 10" lines of tests/kat_vectors in the Random123 distribution
  // (D. E. Shaw Research): counter (4 words), key (2 words), expected output (4 words).
  struct Kat {
    PhiloxBlock ctr;
    std::array<uint32_t, 2> key;
    PhiloxBlock want;
  };
  const Kat kats[] = {
      {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u},
       {0x00000000u, 0x00000000u},
       {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    INFO("counter " << std::hex << k.ctr[0] << " key " << k.key[0]);
    CHECK(philox4x32_10(k.ctr, k.key) == k.want);
  }
  // constexpr: usable at compile time.
  static_assert(philox4x32_10({0u, 0u, 0u, 0u}, {0u, 0u})[0] == 0x6627e8d5u);
}

TEST_CASE("philox_words maps (seed, index) to counter and key", "[rng]") {
  const uint64_t seed = 0x0123456789ABCDEFull, index = 0xFEDCBA9876543210ull;
  CHECK(philox_words(seed, index) == philox4x32_10({0x76543210u, 0xFEDCBA98u, 0u, 0u}, {0x89ABCDEFu, 0x01234567u}));
  // Neighbouring counters and seeds give unrelated blocks.
  std::set<uint32_t> seen;
  for (uint64_t i = 0; i < 1000; ++i) {
    seen.insert(philox_words(1, i)[0]);
    seen.insert(philox_words(2, i)[0]);
  }
  CHECK(seen.size() == 2000);
}

TEST_CASE("rounding_word takes four consecutive words from one block of its own counters", "[rng]") {
  const uint64_t seed = 0x0123456789ABCDEFull, j = 0xFEDCBA9876543213ull;  // block j / 4, word 3
  const PhiloxBlock block = philox4x32_10({0x1D950C84u, 0x3FB72EA6u, 1u, 0u}, {0x89ABCDEFu, 0x01234567u});
  CHECK(rounding_block(seed, j >> 2) == block);
  for (uint64_t k = 0; k < 4; ++k) CHECK(rounding_word(seed, (j & ~uint64_t(3)) + k) == block[k]);
  CHECK(rounding_word(seed, j + 1) == rounding_block(seed, (j >> 2) + 1)[0]);
  // The blocks are not philox_words' blocks: stochastic casts and dropout or initialisation drawn
  // from one generator never share bits (Note [Rounding words]).
  std::set<uint32_t> seen;
  for (uint64_t b = 0; b < 1000; ++b) {
    for (int k = 0; k < 4; ++k) {
      seen.insert(rounding_block(seed, b)[size_t(k)]);
      seen.insert(philox_words(seed, b)[size_t(k)]);
    }
  }
  CHECK(seen.size() == 8000);
  static_assert(rounding_word(0, 5) == philox4x32_10({1u, 0u, 1u, 0u}, {0u, 0u})[1]);
}

TEST_CASE("uniform01 maps words into the half-open unit interval", "[rng]") {
  CHECK(uniform01(0u) == 0.0f);
  CHECK(uniform01(0xFFFFFFFFu) == 1.0f - std::ldexp(1.0f, -24));
  CHECK(uniform01(0xFFFFFFFFu) < 1.0f);
  CHECK(uniform01(0x80000000u) == 0.5f);
  CHECK(uniform01_f64(0u, 0u) == 0.0);
  CHECK(uniform01_f64(0xFFFFFFFFu, 0xFFFFFFFFu) == 1.0 - std::ldexp(1.0, -53));
  CHECK(uniform01_f64(0x80000000u, 0u) == 0.5);
}

TEST_CASE("Generator hands out disjoint counter ranges", "[rng]") {
  Generator g(9);
  CHECK(g.seed() == 9);
  CHECK(g.offset() == 0);
  CHECK(g.advance(10) == 0);
  CHECK(g.advance(5) == 10);
  CHECK(g.offset() == 15);
  g.set_state(3, 100);
  CHECK(g.seed() == 3);
  CHECK(g.advance(1) == 100);

  Generator h(9);
  const Tensor a = uniform({7, 3}, 0.0, 1.0, h);
  CHECK(h.offset() == 21);
  const Tensor b = normal({4}, 0.0, 1.0, h);
  CHECK(h.offset() == 25);
  bernoulli({2, 2}, 0.5, h);
  CHECK(h.offset() == 29);
  (void)a;
  (void)b;
}

TEST_CASE("random factories reproduce from a seed and differ between draws", "[rng]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Generator g1(2024), g2(2024), g3(2025);
    const auto u1 = uniform({100}, -1.0, 1.0, g1, dt).to_vector();
    const auto u2 = uniform({100}, -1.0, 1.0, g2, dt).to_vector();
    const auto u3 = uniform({100}, -1.0, 1.0, g3, dt).to_vector();
    CHECK(u1 == u2);
    CHECK(u1 != u3);
    const auto n1 = normal({100}, 0.0, 1.0, g1, dt).to_vector();
    const auto n2 = normal({100}, 0.0, 1.0, g2, dt).to_vector();
    CHECK(n1 == n2);
    const auto b1 = bernoulli({100}, 0.3, g1, dt).to_vector();
    const auto b2 = bernoulli({100}, 0.3, g2, dt).to_vector();
    CHECK(b1 == b2);
    // Successive draws from one generator differ.
    const auto u4 = uniform({100}, -1.0, 1.0, g1, dt).to_vector();
    CHECK(u4 != u1);
    const auto n3 = normal({100}, 0.0, 1.0, g1, dt).to_vector();
    CHECK(n3 != n1);
    // Restoring the state replays the stream.
    Generator g4(0);
    g4.set_state(2024, 0);
    CHECK(uniform({100}, -1.0, 1.0, g4, dt).to_vector() == u1);
    CHECK(g4.offset() == 100);
  }
  // A draw of n elements equals the first n of a longer draw: element i uses counter offset + i.
  Generator a(5), b(5);
  const auto small = uniform({10}, 0.0, 1.0, a).to_vector();
  const auto large = uniform({1000}, 0.0, 1.0, b).to_vector();
  CHECK(std::equal(small.begin(), small.end(), large.begin()));
  // The process-wide generator.
  manual_seed(77);
  const auto d1 = normal({16}, 0.0, 1.0, default_generator()).to_vector();
  manual_seed(77);
  CHECK(normal({16}, 0.0, 1.0, default_generator()).to_vector() == d1);
  CHECK(default_generator().seed() == 77);
  CHECK(default_generator().offset() == 16);
}

TEST_CASE("uniform values lie in range with the right moments", "[rng]") {
  const int64_t n = 100'000;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    Generator g(31);
    const auto v = uniform({n}, -2.0, 6.0, g, dt).to_vector();
    const Moments m = moments(v);
    CHECK(m.min >= -2.0);
    // f32 and f64 draws stay below hi; a 16-bit draw just below hi may round up to hi.
    if (is_16bit(dt)) CHECK(m.max <= 6.0);
    else CHECK(m.max < 6.0);
    // Mean 2, variance 64 / 12; the standard error of the mean is 0.009.
    CHECK(std::fabs(m.mean - 2.0) < 0.05);
    CHECK(std::fabs(m.var - 64.0 / 12.0) < 0.1);
    std::set<double> distinct(v.begin(), v.end());
    CHECK(distinct.size() > (dt == DType::bf16 ? 200u : dt == DType::f16 ? 2000u : 90'000u));
  }
  Generator g(1);
  const auto c = uniform({10}, 3.0, 3.0, g).to_vector();  // lo == hi
  CHECK(std::all_of(c.begin(), c.end(), [](double x) { return x == 3.0; }));
  CHECK_THROWS_WITH(uniform({2}, 1.0, 0.0, g), Catch::Contains("uniform"));
}

TEST_CASE("normal draws have the requested mean and variance", "[rng]") {
  const int64_t n = 100'000;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Generator g(8);
    const auto v = normal({n}, 0.0, 1.0, g, dt).to_vector();
    const Moments m = moments(v);
    CHECK(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
    // Standard errors: mean 1 / sqrt(n) = 0.0032, variance sqrt(2 / n) = 0.0045.
    CHECK(std::fabs(m.mean) < 0.016);
    CHECK(std::fabs(m.var - 1.0) < 0.023);
    // Shape: P(|z| < 1) = 0.6827, P(|z| < 2) = 0.9545 (standard errors 0.0015 and 0.0007);
    // fourth moment 3.
    double in1 = 0, in2 = 0, m4 = 0;
    for (double x : v) {
      in1 += std::fabs(x) < 1;
      in2 += std::fabs(x) < 2;
      m4 += x * x * x * x;
    }
    CHECK(std::fabs(in1 / double(n) - 0.6827) < 0.0075);
    CHECK(std::fabs(in2 / double(n) - 0.9545) < 0.0035);
    CHECK(std::fabs(m4 / double(n) - 3.0) < 0.15);
    CHECK(m.max > 3.5);
    CHECK(m.min < -3.5);
  }
  Generator g(8);
  const auto s = normal({n}, 5.0, 0.5, g, DType::f32).to_vector();
  const Moments m = moments(s);
  CHECK(std::fabs(m.mean - 5.0) < 0.008);
  CHECK(std::fabs(m.var - 0.25) < 0.006);
  const auto z = normal({4}, 1.5, 0.0, g).to_vector();
  CHECK(std::all_of(z.begin(), z.end(), [](double x) { return x == 1.5; }));
  CHECK_THROWS_WITH(normal({2}, 0.0, -1.0, g), Catch::Contains("normal") && Catch::Contains("stddev"));
}

TEST_CASE("bernoulli draws are 0 or 1 with the requested rate", "[rng]") {
  const int64_t n = 100'000;
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    INFO("p = " << p);
    Generator g(12);
    const auto v = bernoulli({n}, p, g).to_vector();
    double ones = 0;
    bool binary = true;
    for (double x : v) {
      ones += x;
      binary = binary && (x == 0.0 || x == 1.0);
    }
    CHECK(binary);
    // Standard error at most 0.0016.
    CHECK(std::fabs(ones / double(n) - p) < 0.008);
    if (p == 0.0) CHECK(ones == 0);
    if (p == 1.0) CHECK(ones == double(n));
  }
  Generator g(1);
  CHECK_THROWS_WITH(bernoulli({2}, 1.5, g), Catch::Contains("bernoulli"));
  CHECK_THROWS_WITH(bernoulli({2}, 0.5, g, DType::i64), Catch::Contains("bernoulli") && Catch::Contains("i64"));
}
