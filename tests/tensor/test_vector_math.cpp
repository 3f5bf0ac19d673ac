// sigmoid_row and tanh_row (tensor/cpu/vector_math.h, Note [Vector exp]) on every conversion path
// against the scalar functions, bit for bit: a sample of every 251st float (17 million, every
// exponent and both signs), the edges of the special ranges, and by hand ("[slow]") all 2^32.
#include "support/catch.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tensor/cpu/convert.h"
#include "tensor/cpu/vector_math.h"
#include "support/test_util.h"

using namespace mixtape;

namespace {

struct Mismatches {
  uint64_t count = 0;
  uint32_t first = 0;  // the first input's bits
};

// Runs both row functions over the floats with bits start, start + step, ... (2^32 wrapping
// excluded), in rows of 4099 (not a multiple of 16: every row has a tail), and counts the inputs
// whose result differs from the scalar function's bits (NaN against NaN counts as equal).
void compare(uint64_t start, uint64_t step, Mismatches& sig, Mismatches& tnh) {
  constexpr int64_t kRow = 4099;
  std::vector<float> x(kRow), y(kRow);
  auto same = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  };
  for (uint64_t b = start; b < (uint64_t(1) << 32);) {
    int64_t n = 0;
    for (; n < kRow && b < (uint64_t(1) << 32); ++n, b += step) x[size_t(n)] = std::bit_cast<float>(uint32_t(b));
    cpu::sigmoid_row(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (!same(y[size_t(i)], cpu::sigmoid(x[size_t(i)])) && sig.count++ == 0)
        sig.first = std::bit_cast<uint32_t>(x[size_t(i)]);
    cpu::tanh_row(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (!same(y[size_t(i)], cpu::tanh_f32(x[size_t(i)])) && tnh.count++ == 0)
        tnh.first = std::bit_cast<uint32_t>(x[size_t(i)]);
  }
}

}  // namespace

TEST_CASE("sigmoid_row and tanh_row give the scalar functions' bits on every conversion path", "[vector_math]") {
  for (const std::string& path : cpu::conversion_paths()) {
    INFO("conversion path " << path);
    const test::ConversionPathScope scope(path);
    Mismatches sig, tnh;
    compare(0, 251, sig, tnh);
    CHECK(sig.count == 0);
    CHECK(tnh.count == 0);
    INFO("first sigmoid mismatch at bits " << sig.first << ", tanh at " << tnh.first);
    // Around the edges: expf's special range (|x| >= 88), exp's (|2x| >= 512), the tanh series
    // (|x| < 2^-10), signed zeros, subnormals, inf and NaN, each in a row with ordinary lanes.
    std::vector<float> x;
    for (float edge : {88.0f, 256.0f, 0x1p-10f, 0x1p-149f, 0x1p-126f, 1.0f})
      for (int d = -40; d <= 40; ++d) {
        const float v = std::bit_cast<float>(uint32_t(int64_t(std::bit_cast<uint32_t>(edge)) + d));
        x.push_back(v);
        x.push_back(-v);
      }
    for (float v : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), 0.5f, -3.0f, 17.0f})
      x.push_back(v);
    std::vector<float> y(x.size()), z(x.size());
    cpu::sigmoid_row(x.data(), y.data(), int64_t(x.size()));
    cpu::tanh_row(x.data(), z.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("x = " << x[i]);
      const float s = cpu::sigmoid(x[i]), t = cpu::tanh_f32(x[i]);
      CHECK((std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(s) || (std::isnan(y[i]) && std::isnan(s))));
      CHECK((std::bit_cast<uint32_t>(z[i]) == std::bit_cast<uint32_t>(t) || (std::isnan(z[i]) && std::isnan(t))));
    }
    // In place.
    std::vector<float> w = x;
    cpu::tanh_row(w.data(), w.data(), int64_t(w.size()));
    for (size_t i = 0; i < x.size(); ++i)
      CHECK((std::bit_cast<uint32_t>(w[i]) == std::bit_cast<uint32_t>(z[i]) || std::isnan(w[i])));
  }
}

TEST_CASE("sigmoid_row and tanh_row on all 2^32 floats", "[.][vector_math][slow]") {
  for (const std::string& path : cpu::conversion_paths()) {
    INFO("conversion path " << path);
    const test::ConversionPathScope scope(path);
    Mismatches sig, tnh;
    compare(0, 1, sig, tnh);
    INFO("first sigmoid mismatch at bits " << sig.first << ", tanh at " << tnh.first);
    CHECK(sig.count == 0);
    CHECK(tnh.count == 0);
  }
}
