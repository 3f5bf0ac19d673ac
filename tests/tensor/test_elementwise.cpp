// Elementwise kernels on plain tensors: hand-computed values at the edges (signed zero, inf, NaN)
// for the formulas whose code is not the textbook branch (Note [Branch-free leaky ReLU]).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

// Bitwise comparison of floats (so -0 differs from +0 and NaN equals NaN).
bool same_bits(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

TEST_CASE("leaky_relu forward and backward: values, signed zeros, inf and NaN", "[tensor][elementwise]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {3.0f, -2.5f, 0.0f, -0.0f, 1e-30f, -1e-30f, inf, -inf, nan};
  const std::vector<float> dys = {2.0f, -4.0f, 1.0f, -1.0f, -0.0f, 8.0f, 1.0f, 0.5f, 3.0f};
  const float a = 0.25f;
  // y = x for x > 0, else a x;  dx = dy for x > 0, else a dy.
  const std::vector<float> y_want = {3.0f, -0.625f, 0.0f, -0.0f, 1e-30f, -0.25e-30f, inf, -inf, nan};
  const std::vector<float> dx_want = {2.0f, -1.0f, 0.25f, -0.25f, -0.0f, 2.0f, 1.0f, 0.125f, 0.75f};

  const Tensor x = from_vector(xs, {3, 3}), dy = from_vector(dys, {3, 3});
  const std::vector<float> y = leaky_relu(x, a).values<float>();
  const std::vector<float> dx = unary_backward(UnaryOp::leaky_relu, x, Tensor(), dy, a).values<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    CHECK(same_bits(y[i], y_want[i]));
    CHECK(same_bits(dx[i], dx_want[i]));
  }

  // A strided (transposed) input gives the same values at the same logical positions.
  const std::vector<float> yt = leaky_relu(x.t(), a).values<float>();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 3; ++c) CHECK(same_bits(yt[size_t(r * 3 + c)], y_want[size_t(c * 3 + r)]));

  // 16-bit inputs: computed in fp32 and rounded once; these values are exact in fp16 and bf16.
  for (DType dt : {DType::f16, DType::bf16}) {
    const std::vector<double> got =
        leaky_relu(from_vector(std::vector<double>{2.0, -2.0, -0.5}, {3}, dt), 0.5).to_vector();
    CHECK(got == std::vector<double>{2.0, -1.0, -0.25});
  }
}
