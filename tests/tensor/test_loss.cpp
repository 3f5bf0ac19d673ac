// Softmax and losses on plain tensors: hand-computed values, overflow safety, error messages.
#include "support/catch.h"

#include <cmath>
#include <string>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;

namespace {

Tensor f32(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, DType::f32); }

}  // namespace

// ---- softmax -----------------------------------------------------------------------------

TEST_CASE("softmax rows sum to one and large logits do not overflow", "[loss]") {
  Tensor x = f32({1000, 1000, 999, -1000, 0, 1000}, {2, 3});
  Tensor y = softmax(x, 1);
  const double e = std::exp(-1.0);
  CHECK(y.flat_get(0) == Approx(1.0 / (2 + e)));
  CHECK(y.flat_get(2) == Approx(e / (2 + e)));
  CHECK(y.flat_get(5) == Approx(1.0));
  for (int64_t r = 0; r < 2; ++r) CHECK(sum(y.select(0, r)).item() == Approx(1.0));
  Tensor ly = log_softmax(x, 1);
  CHECK(ly.flat_get(3) == Approx(-2000.0));
  CHECK(ly.flat_get(2) == Approx(-1.0 - std::log(2 + e)));

  // f16: 60000 is near the top of the range (max 65504); exp(60000) would overflow anything.
  Tensor h = from_vector(std::vector<double>{60000, 60000, 59968, -60000}, {1, 4}, DType::f16);
  Tensor yh = softmax(h, -1);
  CHECK(yh.dtype() == DType::f16);
  double s = 0.0;
  for (double v : yh.to_vector()) {
    CHECK(std::isfinite(v));
    s += v;
  }
  CHECK(s == Approx(1.0).epsilon(2e-3));
  CHECK(yh.flat_get(0) == 0.5);
  // log_softmax of the first three is finite; the last, -120000, is below the f16 range.
  Tensor lh = log_softmax(h, -1);
  for (int64_t i = 0; i < 3; ++i) CHECK(std::isfinite(lh.flat_get(i)));
  CHECK(lh.flat_get(0) == Approx(-std::log(2.0 + std::exp(-32.0))).epsilon(1e-3));
  CHECK(lh.flat_get(3) == -INFINITY);

  // Along dim 0 of a non-contiguous input: columns sum to one.
  Tensor yt = softmax(x.t(), 0);
  for (int64_t c = 0; c < 2; ++c) CHECK(sum(yt.select(1, c)).item() == Approx(1.0));
}

// ---- losses ------------------------------------------------------------------------------

TEST_CASE("cross_entropy matches hand-computed values", "[loss]") {
  Tensor logits = f32({1, 2, 3, 1, 1, 1}, {2, 3});
  Tensor targets = from_vector(std::vector<int64_t>{2, 0}, {2});
  const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;  // 0.4076
  const double l1 = std::log(3.0);
  CHECK(cross_entropy(logits, targets, Reduction::mean).shape() == Shape{});
  CHECK(cross_entropy(logits, targets, Reduction::mean).item() == Approx((l0 + l1) / 2));
  CHECK(cross_entropy(logits, targets, Reduction::sum).item() == Approx(l0 + l1));
  Tensor none = cross_entropy(logits, targets, Reduction::none);
  CHECK(none.shape() == Shape{2});
  CHECK(none.flat_get(0) == Approx(l0));
  CHECK(none.flat_get(1) == Approx(l1));
  // 16-bit logits: computed in fp32, one rounding to f16.
  Tensor lh = cross_entropy(logits.to(DType::f16), targets);
  CHECK(lh.dtype() == DType::f16);
  CHECK(lh.item() == double(to_float(round_to_half(float((l0 + l1) / 2)))));

  // Gradient of the mean: (softmax - onehot) / N.
  Tensor d = cross_entropy_backward(logits, targets, scalar_tensor(1.0), Reduction::mean);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(d.flat_get(2) == Approx((std::exp(3.0) / z - 1) / 2));
  CHECK(d.flat_get(3) == Approx((1.0 / 3 - 1) / 2));
  CHECK(d.flat_get(4) == Approx(1.0 / 6));
}

TEST_CASE("cross_entropy rejects bad targets with messages naming value, class count and shapes", "[loss]") {
  Tensor logits = zeros({2, 3});
  CHECK_THAT(error_of([&] {
               cross_entropy(logits, from_vector(std::vector<int64_t>{0, 3}, {2}));
             }),
             Contains("target 3") && Contains("3 classes"));
  CHECK_THAT(error_of([&] {
               cross_entropy(logits, from_vector(std::vector<int64_t>{-1, 0}, {2}));
             }),
             Contains("target -1") && Contains("3 classes"));
  CHECK_THAT(error_of([&] {
               cross_entropy(logits, from_vector(std::vector<int64_t>{0, 1, 2}, {3}));
             }),
             Contains("i64[3]") && Contains("f32[2, 3]"));
  CHECK_THAT(error_of([&] { cross_entropy(logits, zeros({2})); }), Contains("i64"));
}

TEST_CASE("binary_cross_entropy_with_logits is stable for large logits", "[loss]") {
  Tensor x = f32({0, 100, -100, 2}, {4});
  Tensor t = f32({1, 0, 1, 0.25}, {4});
  Tensor l = binary_cross_entropy_with_logits(x, t, Reduction::none);
  CHECK(l.flat_get(0) == Approx(std::log(2.0)));
  CHECK(l.flat_get(1) == Approx(100.0));
  CHECK(l.flat_get(2) == Approx(100.0));
  CHECK(l.flat_get(3) == Approx(2.0 - 0.5 + std::log1p(std::exp(-2.0))));
  CHECK(binary_cross_entropy_with_logits(x, t, Reduction::sum).item() ==
        Approx(l.flat_get(0) + l.flat_get(1) + l.flat_get(2) + l.flat_get(3)));
  LossGrads g = binary_cross_entropy_with_logits_backward(x, t, ones({4}), Reduction::none, true, true);
  CHECK(g.da.flat_get(0) == Approx(-0.5));
  CHECK(g.da.flat_get(1) == Approx(1.0));
  CHECK(g.db.flat_get(3) == Approx(-2.0));
  CHECK_THAT(error_of([&] { binary_cross_entropy_with_logits(x, zeros({3})); }), Contains("same shape"));
}

TEST_CASE("mse_loss reductions and gradients", "[loss]") {
  Tensor a = f32({1, 2}, {2}), b = f32({0, 4}, {2});
  CHECK(mse_loss(a, b, Reduction::none).to_vector() == std::vector<double>{1, 4});
  CHECK(mse_loss(a, b, Reduction::sum).item() == 5.0);
  CHECK(mse_loss(a, b, Reduction::mean).item() == 2.5);
  LossGrads g = mse_loss_backward(a, b, scalar_tensor(1.0), Reduction::mean, true, true);
  CHECK(g.da.to_vector() == std::vector<double>{1, -2});
  CHECK(g.db.to_vector() == std::vector<double>{-1, 2});
  CHECK_THAT(error_of([&] { mse_loss(a, zeros({3})); }), Contains("f32[2]") && Contains("f32[3]"));
  CHECK_THAT(error_of([&] { mse_loss(a, b.to(DType::f16)); }), Contains("dtype mismatch"));
}
