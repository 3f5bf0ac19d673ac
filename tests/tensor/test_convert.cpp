// Row conversions (tensor/cpu/convert.h, Note [Vector conversions]): every vector path this CPU
// supports against the scalar reference, bit for bit, on every 16-bit pattern and on about 12
// million floats (ties, subnormals, overflow, NaN), for round-to-nearest-even and stochastic
// rounding. A path the CPU lacks is not run (the test says which ran).
#include "support/catch.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensor/core/half.h"
#include "tensor/core/rng.h"
#include "tensor/core/rounding_census.h"
#include "tensor/cpu/convert.h"
#include "support/test_util.h"

using namespace mixtape;

namespace {

std::vector<std::string> vector_paths() {
  std::vector<std::string> paths = cpu::conversion_paths();
  REQUIRE(paths.front() == "scalar");
  paths.erase(paths.begin());
  std::string names = paths.empty() ? std::string("none") : paths[0];
  for (size_t i = 1; i < paths.size(); ++i) names += ", " + paths[i];
  WARN("vector conversion paths on this CPU: " << names);
  return paths;
}

// Floats that exercise every rounding case: every top-16-bit pattern with low halves at and
// around the fp16 (13 dropped bits) and bf16 (16 dropped bits) ties; the fp16-subnormal and
// underflow exponents densely; random bit patterns.
std::vector<float> test_floats() {
  std::vector<uint32_t> bits;
  const uint32_t lows[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000,
                           0x5000, 0x6000, 0x7FFF, 0x8000, 0x8001, 0x9000, 0xF000, 0xFFFF};
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : lows) bits.push_back(hi << 16 | lo);
  for (uint32_t e = 90; e <= 114; ++e)  // fp16 subnormals, the smallest normals, underflow to 0
    for (uint32_t m = 0; m < 0x800000u; m += 13) {
      bits.push_back(e << 23 | m);
      bits.push_back(0x80000000u | e << 23 | (m ^ 0x5A5A5u));
    }
  std::mt19937 rng(20261125);
  for (int i = 0; i < 8'000'000; ++i) bits.push_back(rng());
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * sizeof(float));
  return f;
}

template <class T>
std::vector<uint16_t> bits_of(const std::vector<T>& v) {
  std::vector<uint16_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(uint16_t));
  return b;
}

// The first index where a and b differ, or -1.
template <class V>
int64_t first_difference(const V& a, const V& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return int64_t(i);
  return -1;
}

std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Row lengths that leave every tail length of an 8-lane path, and rows starting off alignment.
const int64_t kRowLengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100};

}  // namespace

TEST_CASE("every 16-bit pattern loads to the same float on every path", "[convert]") {
  std::vector<half> h(65536);
  std::vector<bfloat16> b(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    h[i] = half::from_bits(uint16_t(i));
    b[i] = bfloat16::from_bits(uint16_t(i));
  }
  std::vector<float> ref_h(65536), ref_b(65536);
  {
    test::ConversionPathScope scalar("scalar");
    cpu::load_n(h.data(), ref_h.data(), 65536);
    cpu::load_n(b.data(), ref_b.data(), 65536);
  }
  for (uint32_t i = 0; i < 65536; ++i) {  // the reference is half.h's exact conversion
    REQUIRE(std::bit_cast<uint32_t>(ref_h[i]) == std::bit_cast<uint32_t>(to_float(h[i])));
    REQUIRE(std::bit_cast<uint32_t>(ref_b[i]) == std::bit_cast<uint32_t>(to_float(b[i])));
  }
  for (const std::string& p : vector_paths()) {
    INFO("path " << p);
    test::ConversionPathScope scope(p);
    std::vector<float> got_h(65536), got_b(65536);
    cpu::load_n(h.data(), got_h.data(), 65536);
    cpu::load_n(b.data(), got_b.data(), 65536);
    CHECK(first_difference(float_bits(got_h), float_bits(ref_h)) == -1);  // signalling NaNs included
    CHECK(first_difference(float_bits(got_b), float_bits(ref_b)) == -1);
    for (int64_t start : {0, 1, 5})
      for (int64_t n : kRowLengths) {
        std::vector<float> row(size_t(n) + 1, -7.0f);
        cpu::load_n(h.data() + 0x7BF0 + start, row.data(), n);
        for (int64_t i = 0; i < n; ++i)
          REQUIRE(std::bit_cast<uint32_t>(row[size_t(i)]) ==
                  std::bit_cast<uint32_t>(ref_h[size_t(0x7BF0 + start + i)]));
        REQUIRE(row[size_t(n)] == -7.0f);  // nothing written past the row
      }
  }
}

TEST_CASE("float -> fp16 and bf16 round to nearest even alike on every path", "[convert]") {
  const std::vector<float> f = test_floats();
  const int64_t n = int64_t(f.size());
  std::vector<half> ref_h(f.size());
  std::vector<bfloat16> ref_b(f.size());
  {
    test::ConversionPathScope scalar("scalar");
    cpu::store_n(f.data(), ref_h.data(), n);
    cpu::store_n(f.data(), ref_b.data(), n);
  }
  for (size_t i = 0; i < f.size(); i += 997) {  // the reference is half.h's rounding
    REQUIRE(ref_h[i].bits == round_to_half(f[i]).bits);
    REQUIRE(ref_b[i].bits == round_to_bf16(f[i]).bits);
  }
  for (const std::string& p : vector_paths()) {
    INFO("path " << p);
    test::ConversionPathScope scope(p);
    std::vector<half> got_h(f.size());
    std::vector<bfloat16> got_b(f.size());
    cpu::store_n(f.data(), got_h.data(), n);
    cpu::store_n(f.data(), got_b.data(), n);
    const int64_t dh = first_difference(bits_of(got_h), bits_of(ref_h));
    const int64_t db = first_difference(bits_of(got_b), bits_of(ref_b));
    INFO("fp16 differs at float bits " << std::hex << (dh < 0 ? 0u : std::bit_cast<uint32_t>(f[size_t(dh)])));
    CHECK(dh == -1);
    INFO("bf16 differs at float bits " << std::hex << (db < 0 ? 0u : std::bit_cast<uint32_t>(f[size_t(db)])));
    CHECK(db == -1);
    for (int64_t n_row : kRowLengths) {  // tails, and nothing written past the row
      std::vector<half> row(size_t(n_row) + 1, half::from_bits(0x1234));
      cpu::store_n(f.data() + 3, row.data(), n_row);
      for (int64_t i = 0; i < n_row; ++i) REQUIRE(row[size_t(i)].bits == ref_h[size_t(3 + i)].bits);
      REQUIRE(row[size_t(n_row)].bits == 0x1234);
    }
  }
}

TEST_CASE("stochastic rounding draws the same word and rounds alike on every path", "[convert]") {
  std::vector<float> f = test_floats();
  f.resize(6'000'000);
  const int64_t n = int64_t(f.size());
  // Element i uses rounding_word(seed, index + i). The indices start on and off a block
  // boundary, and the block numbers of the third carry into their high word inside a row.
  for (uint64_t index : {uint64_t(0), uint64_t(12345), uint64_t(0x3FFFFFFF2ull), uint64_t(0x7FFFFFFF00000001ull)}) {
    const uint64_t seed = 0x9E3779B97F4A7C15ull ^ index;
    std::vector<half> ref_h(f.size());
    std::vector<bfloat16> ref_b(f.size());
    {
      test::ConversionPathScope scalar("scalar");
      cpu::store_stochastic_n(f.data(), ref_h.data(), n, seed, index);
      cpu::store_stochastic_n(f.data(), ref_b.data(), n, seed, index);
    }
    for (size_t i = 0; i < f.size(); i += 1009) {
      const uint32_t r = rounding_word(seed, index + i);
      REQUIRE(ref_h[i].bits == round_to_half_stochastic(f[i], r).bits);
      REQUIRE(ref_b[i].bits == round_to_bf16_stochastic(f[i], r).bits);
    }
    for (const std::string& p : vector_paths()) {
      INFO("path " << p << ", index " << index);
      test::ConversionPathScope scope(p);
      std::vector<half> got_h(f.size());
      std::vector<bfloat16> got_b(f.size());
      cpu::store_stochastic_n(f.data(), got_h.data(), n, seed, index);
      cpu::store_stochastic_n(f.data(), got_b.data(), n, seed, index);
      const int64_t dh = first_difference(bits_of(got_h), bits_of(ref_h));
      const int64_t db = first_difference(bits_of(got_b), bits_of(ref_b));
      INFO("fp16 differs at float bits " << std::hex << (dh < 0 ? 0u : std::bit_cast<uint32_t>(f[size_t(dh)])));
      CHECK(dh == -1);
      INFO("bf16 differs at float bits " << std::hex << (db < 0 ? 0u : std::bit_cast<uint32_t>(f[size_t(db)])));
      CHECK(db == -1);
      for (int64_t n_row : kRowLengths) {  // a row starting mid-tensor keeps each element's word
        std::vector<half> row(static_cast<size_t>(n_row));
        cpu::store_stochastic_n(f.data() + 5, row.data(), n_row, seed, index + 5);
        for (int64_t i = 0; i < n_row; ++i) REQUIRE(row[size_t(i)].bits == ref_h[size_t(5 + i)].bits);
      }
    }
  }
}

TEST_CASE("rounding_words_n draws the words of its positions on every path", "[convert]") {
  // Starts at each offset within a block; lengths leave every tail of a 64- and a 128-word group.
  // The block numbers cross 2^32 for the last indices.
  for (uint64_t index :
       {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(7), uint64_t(0x3FFFFFFC0ull), uint64_t(0x3FFFFFFC3ull)}) {
    const uint64_t seed = 0x243F6A8885A308D3ull + index;
    for (const std::string& p : cpu::conversion_paths()) {
      test::ConversionPathScope scope(p);
      for (int64_t n : {0, 1, 2, 3, 4, 5, 63, 64, 65, 127, 128, 129, 200, 256, 1031}) {
        INFO("path " << p << ", index " << index << ", " << n << " words");
        std::vector<uint32_t> words(size_t(n) + 1, 0xDEADBEEFu);
        cpu::rounding_words_n(seed, index, words.data(), n);
        for (int64_t i = 0; i < n; ++i) REQUIRE(words[size_t(i)] == rounding_word(seed, index + uint64_t(i)));
        CHECK(words[size_t(n)] == 0xDEADBEEFu);  // nothing written past the end
      }
    }
  }
}

TEST_CASE("row stores are counted by an open rounding census, on every path", "[convert]") {
  const std::vector<float> f = {1.0f, 1e-9f, 1e-6f, 70000.0f, 0.0f, 3.0f, -1e-30f, 2.0f, 5e-39f};
  for (const std::string& p : cpu::conversion_paths()) {
    INFO("path " << p);
    test::ConversionPathScope scope(p);
    std::vector<half> h(f.size());
    RoundingCensus census;
    cpu::store_n(f.data(), h.data(), int64_t(f.size()));
    const RoundingCounts c = census.counts();
    CHECK(c.rounded == f.size());
    CHECK(c.nonzero == 8);
    CHECK(c.underflow == 3);  // 1e-9, -1e-30, 5e-39
    CHECK(c.subnormal == 1);  // 1e-6
    CHECK(c.overflow == 1);   // 70000
  }
}

TEST_CASE("a conversion path the CPU lacks is refused by name", "[convert]") {
  CHECK_THROWS_WITH(
      cpu::set_conversion_path("avx9000"),
      Catch::Contains("'avx9000' is not a conversion path this CPU supports") && Catch::Contains("scalar"));
}
