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

TEST_CASE("relu, clamp and abs never hide a NaN; pow(x, 0) has gradient 0 at x = 0", "[tensor][elementwise]") {
  // Note [NaN in the formulas]: PyTorch's values. relu and clamp pass NaN forward and pass the
  // gradient through at a NaN input; abs's gradient at NaN is NaN; d(x^0)/dx = 0 everywhere.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = from_vector(std::vector<double>{nan, -1.0, 0.0, -0.0, 2.0}, {5}, dt);
    const Tensor dy = from_vector(std::vector<double>{3.0, 3.0, 3.0, 3.0, 3.0}, {5}, dt);
    const std::vector<double> relu_y = unary(UnaryOp::relu, x).to_vector();
    CHECK(std::isnan(relu_y[0]));
    CHECK(relu_y[1] == 0.0);
    CHECK(relu_y[4] == 2.0);
    const std::vector<double> relu_dx = unary_backward(UnaryOp::relu, x, Tensor(), dy).to_vector();
    CHECK(relu_dx == std::vector<double>{3.0, 0.0, 0.0, 0.0, 3.0});
    const std::vector<double> clamp_y = unary(UnaryOp::clamp, x, -0.5, 1.0).to_vector();
    CHECK(std::isnan(clamp_y[0]));
    const std::vector<double> clamp_dx = unary_backward(UnaryOp::clamp, x, Tensor(), dy, -0.5, 1.0).to_vector();
    CHECK(clamp_dx == std::vector<double>{3.0, 0.0, 3.0, 3.0, 0.0});
    const std::vector<double> abs_dx = unary_backward(UnaryOp::abs, x, Tensor(), dy).to_vector();
    CHECK(std::isnan(abs_dx[0]));
    CHECK(abs_dx[1] == -3.0);
    CHECK(abs_dx[2] == 0.0);
    const Tensor y0 = unary(UnaryOp::pow, x, 0.0);
    const std::vector<double> pow_dx = unary_backward(UnaryOp::pow, x, y0, dy, 0.0).to_vector();
    CHECK(pow_dx[2] == 0.0);  // was 0 * 0^-1 = 0 * inf = NaN
    CHECK(pow_dx[3] == 0.0);
    CHECK(pow_dx[4] == 0.0);
    // A NaN or inf gradient still shows: dy * 0 is NaN (as PyTorch's masked derivative times dy).
    const Tensor bad_dy = from_vector(std::vector<double>{inf, nan, 1.0, 1.0, 1.0}, {5}, dt);
    const std::vector<double> pow_bad = unary_backward(UnaryOp::pow, x, y0, bad_dy, 0.0).to_vector();
    CHECK(std::isnan(pow_bad[0]));
    CHECK(std::isnan(pow_bad[1]));
  }
  // Through the tape: a NaN activation reaches the input's gradient.
  Variable v(from_vector(std::vector<double>{nan, 1.0, -1.0}, {3}), true);
  {
    Tape tape;
    tape.backward(sum(relu(v) * v));
  }
  const std::vector<double> g = v.grad()->unscaled().to_vector();
  CHECK(std::isnan(g[0]));
  CHECK(g[1] == 2.0);
  CHECK(g[2] == 0.0);
}
