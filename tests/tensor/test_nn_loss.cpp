// Batch norm, dropout, embedding, softmax and losses on plain tensors: hand-computed values,
// running statistics, dropout statistics and reproducibility, overflow safety, error messages.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Matchers::Contains;

using mixtape::test::TempDir;
using mixtape::test::error_of;

namespace {

Tensor f32(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, DType::f32); }

}  // namespace

// ---- batch norm --------------------------------------------------------------------------

TEST_CASE("batch_norm training normalizes with batch statistics and updates running ones", "[nn]") {
  // Channel 0: 1 2 3 4 (mean 2.5, biased var 1.25, unbiased 5/3).
  // Channel 1: 2 2 2 6 (mean 3, biased var 3, unbiased 4).
  Tensor x = f32({1, 2, 2, 2, 3, 2, 4, 6}, {4, 2});
  Tensor rm = zeros({2}), rv = ones({2});
  BatchNormOutput r = batch_norm_forward(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  CHECK(r.mean.dtype() == DType::f32);
  CHECK(r.mean.flat_get(0) == Approx(2.5));
  CHECK(r.mean.flat_get(1) == Approx(3.0));
  CHECK(r.invstd.flat_get(0) == Approx(1.0 / std::sqrt(1.25 + 1e-5)));
  CHECK(r.invstd.flat_get(1) == Approx(1.0 / std::sqrt(3.0 + 1e-5)));
  // running = 0.9 * running + 0.1 * batch, with the unbiased variance.
  CHECK(rm.flat_get(0) == Approx(0.25));
  CHECK(rm.flat_get(1) == Approx(0.3));
  CHECK(rv.flat_get(0) == Approx(0.9 + 0.1 * 5.0 / 3.0));
  CHECK(rv.flat_get(1) == Approx(0.9 + 0.1 * 4.0));
  CHECK(r.y.flat_get(0) == Approx((1 - 2.5) / std::sqrt(1.25 + 1e-5)));
  CHECK(r.y.flat_get(7) == Approx((6 - 3.0) / std::sqrt(3.0 + 1e-5)));

  // A second step keeps blending.
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  CHECK(rm.flat_get(0) == Approx(0.9 * 0.25 + 0.25));

  // Affine part and a 4-D input: statistics over N, H, W; 16-bit input keeps fp32 statistics.
  Tensor x4 = from_vector(std::vector<double>{1, 3, 10, 10, 5, 7, 10, 30}, {2, 2, 1, 2}, DType::f16);
  Tensor w = f32({2, 1}, {2}), b = f32({0.5, -1}, {2});
  BatchNormOutput r4 = batch_norm_forward(x4, w, b, Tensor(), Tensor(), true, 0.1, 0.0);
  CHECK(r4.y.dtype() == DType::f16);
  CHECK(r4.mean.dtype() == DType::f32);
  CHECK(r4.mean.flat_get(0) == Approx(4.0));   // 1 3 5 7
  CHECK(r4.mean.flat_get(1) == Approx(15.0));  // 10 10 10 30
  CHECK(r4.invstd.flat_get(0) == Approx(1.0 / std::sqrt(5.0)));
  CHECK(r4.y.flat_get(0) == Approx(2.0 * (1 - 4) / std::sqrt(5.0) + 0.5).epsilon(1e-3));
}

TEST_CASE("batch_norm eval mode uses the running statistics and leaves them alone", "[nn]") {
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor rm = f32({1, -1}, {2}), rv = f32({4, 0.25}, {2});
  Tensor w = f32({3, 1}, {2}), b = f32({0, 10}, {2});
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1, 0.0);
  for (int64_t n = 0; n < 3; ++n) {
    CHECK(y.flat_get(2 * n) == Approx(3.0 * (x.flat_get(2 * n) - 1) / 2.0));
    CHECK(y.flat_get(2 * n + 1) == Approx((x.flat_get(2 * n + 1) + 1) / 0.5 + 10));
  }
  CHECK(rm.to_vector() == std::vector<double>{1, -1});
  CHECK(rv.to_vector() == std::vector<double>{4, 0.25});

  // Eval-mode gradient is the affine map's: dx = dy * w * invstd.
  Variable xv(x, true);
  Tape tape;
  Variable out = batch_norm(xv, Variable(w), Variable(b), rm, rv, false, 0.1, 0.0);
  tape.backward(sum(out));
  CHECK(xv.grad()->g.flat_get(0) == Approx(1.5));
  CHECK(xv.grad()->g.flat_get(1) == Approx(2.0));
}

TEST_CASE("batch_norm training gradient sums to zero per channel and weight grads keep their dtype", "[nn]") {
  Generator gen(3);
  Variable x(uniform({4, 3, 2}, -1, 1, gen, DType::bf16), true);
  Variable w(uniform({3}, 0.5, 1.5, gen), true), b(zeros({3}), true);  // f32 parameters, bf16 input
  Tape tape;
  Variable y = batch_norm(x, w, b, Tensor(), Tensor(), true);
  tape.backward(y, ScaledGrad{uniform({4, 3, 2}, -1, 1, gen, DType::bf16), 1.0f});
  CHECK(x.grad()->g.dtype() == DType::bf16);
  CHECK(w.grad()->g.dtype() == DType::f32);
  CHECK(b.grad()->g.dtype() == DType::f32);
  // d/dx of a mean-subtracted output: the gradient has (near) zero mean over each channel.
  Tensor dx = x.grad()->g.to(DType::f64);
  for (int64_t c = 0; c < 3; ++c) CHECK(std::abs(sum(dx.select(1, c)).item()) < 0.05);
}

TEST_CASE("batch_norm rejects bad inputs with messages naming the shapes", "[nn]") {
  Tensor x = zeros({2, 3});
  CHECK_THAT(error_of([&] { batch_norm(x, zeros({4}), Tensor(), Tensor(), Tensor(), true); }),
             Contains("weight f32[4]") && Contains("f32[2, 3]") && Contains("3 channels"));
  CHECK_THAT(error_of([&] { batch_norm(x, Tensor(), Tensor(), zeros({2}), ones({2}), true); }),
             Contains("running_mean f32[2]") && Contains("f32[2, 3]"));
  CHECK_THAT(error_of([&] { batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); }),
             Contains("running_mean is required"));
  CHECK_THAT(error_of([&] { batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }),
             Contains("more than one value per channel"));
  CHECK_THAT(error_of([&] { batch_norm(zeros({3}), Tensor(), Tensor(), Tensor(), Tensor(), true); }),
             Contains("at least 2 dims"));
}

// ---- dropout -----------------------------------------------------------------------------

TEST_CASE("dropout keeps 1 - p of the elements, scaled by 1 / (1 - p)", "[nn]") {
  const double p = 0.3;
  const int64_t n = 100000;
  Generator gen(42);
  Tensor y = dropout(ones({n}), p, true, gen);
  CHECK(gen.offset() == uint64_t(n));
  const float kept_value = float(1.0f * float(1.0 / (1.0 - p)));
  int64_t kept = 0, other = 0;
  for (double v : y.to_vector()) {
    if (v == double(kept_value)) ++kept;
    else if (v != 0.0) ++other;
  }
  CHECK(other == 0);
  // Binomial std: sqrt(p (1 - p) / n) = 0.00145; allow ~5 sigma.
  CHECK(std::abs(double(kept) / double(n) - (1.0 - p)) < 0.0075);
}

TEST_CASE("dropout is reproducible from the seed and differs between seeds and draws", "[nn]") {
  Generator src(5);
  Tensor x = uniform({1000}, 1, 2, src);
  Generator a(7), b(7), c(8);
  const std::vector<double> ya = dropout(x, 0.5, true, a).to_vector();
  CHECK(ya == dropout(x, 0.5, true, b).to_vector());
  CHECK(ya != dropout(x, 0.5, true, c).to_vector());
  CHECK(ya != dropout(x, 0.5, true, a).to_vector());  // next draw from the same generator

  // The mask is bernoulli(1 - p) from the same generator state, whatever the layout of x.
  Generator d(9);
  Tensor xt = uniform({20, 30}, 1, 2, d).t();  // non-contiguous [30, 20]
  Generator f(11), g(11);
  Tensor y = dropout(xt, 0.25, true, f);
  Tensor mask = bernoulli(xt.shape(), 0.75, g);
  for (int64_t i = 0; i < y.numel(); ++i)
    CHECK(y.flat_get(i) == (mask.flat_get(i) > 0 ? double(float(xt.flat_get(i)) * float(1.0 / 0.75)) : 0.0));
}

TEST_CASE("dropout is the identity in eval mode or with p = 0, and validates p", "[nn]") {
  Generator gen(1);
  Tensor x = ones({10});
  CHECK(dropout(x, 0.5, false, gen).same_storage(x));
  CHECK(dropout(x, 0.0, true, gen).same_storage(x));
  CHECK(gen.offset() == 0);
  CHECK_THAT(error_of([&] { dropout(x, 1.0, true, gen); }), Contains("[0, 1)"));
  CHECK_THAT(error_of([&] { dropout(x, -0.1, true, gen); }), Contains("[0, 1)"));
}

TEST_CASE("dropout backward applies the forward mask", "[nn]") {
  Generator gen(3);
  Variable x(ones({200}), true);
  Tape tape;
  Variable y = dropout(x, 0.4, true, gen);
  tape.backward(y);  // seed ones: dx = mask / (1 - p) = y for x = 1
  CHECK(x.grad()->g.to_vector() == y.data().to_vector());
}

// ---- embedding ---------------------------------------------------------------------------

TEST_CASE("embedding gathers rows and scatter-adds gradients of repeated indices", "[nn]") {
  Tensor w = f32({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 2}, {2, 2});
  Tensor y = embedding(idx, w);
  CHECK(y.shape() == Shape{2, 2, 2});
  CHECK(y.to_vector() == std::vector<double>{20, 21, 0, 1, 20, 21, 20, 21});
  Tensor dw = embedding_backward(idx, ones({2, 2, 2}), 3);
  CHECK(dw.to_vector() == std::vector<double>{1, 1, 0, 0, 3, 3});

  // Accumulation in double, one rounding: 1 + 16 * 2^-9 is exact in bf16, but a bf16 running sum
  // would stay at 1 (each 2^-9 is below half an ulp of 1).
  std::vector<double> g(17, std::ldexp(1.0, -9));
  g[0] = 1.0;
  Tensor dwb = embedding_backward(from_vector(std::vector<int64_t>(17, 0), {17}),
                                  from_vector(g, {17, 1}, DType::bf16), 1);
  CHECK(dwb.dtype() == DType::bf16);
  CHECK(dwb.item() == 1.03125);
}

TEST_CASE("embedding rejects indices out of range, naming the index and the row count", "[nn]") {
  Tensor w = zeros({4, 3});
  CHECK_THAT(error_of([&] { embedding(from_vector(std::vector<int64_t>{0, 5}, {2}), w); }),
             Contains("index 5") && Contains("4 rows"));
  CHECK_THAT(error_of([&] { embedding(from_vector(std::vector<int64_t>{-1}, {1}), w); }),
             Contains("index -1") && Contains("4 rows"));
  CHECK_THAT(error_of([&] { embedding(zeros({2}), w); }), Contains("i64"));
}

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
  CHECK_THAT(error_of([&] { cross_entropy(logits, from_vector(std::vector<int64_t>{0, 3}, {2})); }),
             Contains("target 3") && Contains("3 classes"));
  CHECK_THAT(error_of([&] { cross_entropy(logits, from_vector(std::vector<int64_t>{-1, 0}, {2})); }),
             Contains("target -1") && Contains("3 classes"));
  CHECK_THAT(error_of([&] { cross_entropy(logits, from_vector(std::vector<int64_t>{0, 1, 2}, {3})); }),
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
