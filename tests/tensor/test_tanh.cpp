// Note [Float tanh]: f32 tanh (the elementwise op and the LSTM cell) is correctly rounded.
#include "support/catch.h"
#include <cmath>
#include <limits>

#include "mixtape.h"

using namespace mixtape;

TEST_CASE("f32 tanh is the correctly rounded tanh across magnitudes", "[tanh]") {
  // 40 000 values per sign, log-spaced from 1e-30 to 30 (both branches of tanh_f32 and the
  // saturated range); the reference rounds the f64 tanh to f32 once.
  std::vector<float> xs;
  for (int i = 0; i < 40000; ++i) {
    const float v = float(std::pow(10.0, -30.0 + 31.5 * double(i) / 40000.0));
    xs.push_back(v);
    xs.push_back(-v);
  }
  const Tensor x = from_vector(xs, {int64_t(xs.size())});
  const std::vector<float> y = tanh(x).values<float>();
  int64_t wrong = 0;
  for (size_t i = 0; i < xs.size(); ++i) wrong += y[i] != float(std::tanh(double(xs[i])));
  CHECK(wrong == 0);
}

TEST_CASE("f32 tanh keeps signed zeros, saturates, and passes NaN", "[tanh]") {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = from_vector(
      std::vector<float>{0.0f, -0.0f, inf, -inf, 1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN()}, {7});
  const std::vector<float> y = tanh(x).values<float>();
  CHECK(y[0] == 0.0f);
  CHECK_FALSE(std::signbit(y[0]));
  CHECK(y[1] == 0.0f);
  CHECK(std::signbit(y[1]));
  CHECK(y[2] == 1.0f);
  CHECK(y[3] == -1.0f);
  CHECK(y[4] == 1.0f);
  CHECK(y[5] == -1.0f);
  CHECK(std::isnan(y[6]));
}

TEST_CASE("the f32 LSTM cell uses the same tanh as the elementwise op", "[tanh][lstm]") {
  // With the i, f, o gates saturated (sigmoid(40) rounds to 1 in f32) and c_prev = 0:
  // c = tanh(g) and h = tanh(c), so both must equal the elementwise op exactly.
  Generator gen(3);
  const int64_t B = 4, H = 64;
  Tensor gates = full({B, 4 * H}, 40.0);
  const Tensor g = normal({B, H}, 0.0, 1.5, gen);
  gates.narrow(1, 2 * H, H).copy_(g);
  const auto out = lstm_cell(gates, zeros({B, H}));
  CHECK(out.c.to_vector() == tanh(g).to_vector());
  CHECK(out.h.to_vector() == tanh(tanh(g)).to_vector());
}
