// cross_entropy's class weights, ignore_index and label smoothing, nll_loss, binary_cross_entropy
// on probabilities, l1_loss and smooth_l1_loss on plain tensors: values and gradients against
// PyTorch's definitions written out in f64, the clamps, NaN, and error messages.
#include "support/catch.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector(v, s, DType::f64); }
Tensor labels(const std::vector<int64_t>& v) { return from_vector(v, {int64_t(v.size())}); }

// -log_softmax of row i of x [N, C] (f64).
std::vector<double> nll_row(const std::vector<double>& x, int64_t C, int64_t i) {
  double mx = -1e300, s = 0.0;
  for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[size_t(i * C + c)]);
  for (int64_t c = 0; c < C; ++c) s += std::exp(x[size_t(i * C + c)] - mx);
  std::vector<double> r;
  for (int64_t c = 0; c < C; ++c) r.push_back(std::log(s) - (x[size_t(i * C + c)] - mx));
  return r;
}

}  // namespace

TEST_CASE("cross_entropy with class weights, ignore_index and label smoothing follows PyTorch", "[loss]") {
  const int64_t N = 4, C = 3;
  const std::vector<double> xv = {0.5, -1.0, 2.0, 1.5, 0.25, -0.5, -2.0, 1.0, 0.0, 0.3, 0.3, 0.3};
  const std::vector<double> wv = {0.5, 1.0, 2.0};
  const std::vector<int64_t> tv = {2, 0, -100, 1};
  const Tensor x = f64(xv, {N, C}), w = f64(wv, {C}), t = labels(tv);
  for (double eps : {0.0, 0.2}) {
    INFO("label_smoothing " << eps);
    // PyTorch: (1 - eps) * nll_weighted + eps / C * sum_c w_c nll_c; mean divides both by the
    // weights of the targets that are not ignored.
    std::vector<double> per(N, 0.0);
    double wsum = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      if (tv[size_t(i)] == -100) continue;
      const std::vector<double> l = nll_row(xv, C, i);
      double smooth = 0.0;
      for (int64_t c = 0; c < C; ++c) smooth += wv[size_t(c)] * l[size_t(c)];
      per[size_t(i)] = (1 - eps) * wv[size_t(tv[size_t(i)])] * l[size_t(tv[size_t(i)])] + eps / C * smooth;
      wsum += wv[size_t(tv[size_t(i)])];
    }
    const ClassLossOptions o{w, -100, eps};
    const Tensor none = cross_entropy(x, t, Reduction::none, o);
    for (int64_t i = 0; i < N; ++i) CHECK(none.flat_get(i) == Approx(per[size_t(i)]).epsilon(1e-12));
    CHECK(none.flat_get(2) == 0.0);
    const double sum = per[0] + per[1] + per[3];
    CHECK(cross_entropy(x, t, Reduction::sum, o).item() == Approx(sum).epsilon(1e-12));
    CHECK(cross_entropy(x, t, Reduction::mean, o).item() == Approx(sum / wsum).epsilon(1e-12));
    // The gradient: a zero row for the ignored target, central differences elsewhere.
    const Tensor dx = cross_entropy_backward(x, t, scalar_tensor(1.0, DType::f64), Reduction::mean, o);
    for (int64_t c = 0; c < C; ++c) CHECK(dx.flat_get(2 * C + c) == 0.0);
    for (int64_t j = 0; j < x.numel(); ++j) {
      Tensor xp = x.clone(), xm = x.clone();
      xp.flat_set(j, xv[size_t(j)] + 1e-6);
      xm.flat_set(j, xv[size_t(j)] - 1e-6);
      const double num =
          (cross_entropy(xp, t, Reduction::mean, o).item() - cross_entropy(xm, t, Reduction::mean, o).item()) / 2e-6;
      CHECK(dx.flat_get(j) == Approx(num).margin(1e-8));
    }
  }
  // Without options the loss is what it always was; every target ignored gives 0 / 0 = NaN.
  CHECK(cross_entropy(x, labels({2, 0, 1, 1})).item() ==
        Approx((nll_row(xv, C, 0)[2] + nll_row(xv, C, 1)[0] + nll_row(xv, C, 2)[1] + nll_row(xv, C, 3)[1]) / 4));
  CHECK(std::isnan(cross_entropy(x, labels({-100, -100, -100, -100})).item()));
  CHECK(cross_entropy(x, labels({-100, -100, -100, -100}), Reduction::sum).item() == 0.0);
  // ignore_index may be a class: those targets drop out.
  CHECK(cross_entropy(x, labels({2, 0, 0, 1}), Reduction::sum, {Tensor(), 0, 0.0}).item() ==
        Approx(nll_row(xv, C, 0)[2] + nll_row(xv, C, 3)[1]));
}

TEST_CASE("nll_loss of log_softmax equals cross_entropy, with weights and ignore_index", "[loss]") {
  const Tensor x = f64({0.5, -1.0, 2.0, 1.5, 0.25, -0.5, -2.0, 1.0, 0.0}, {3, 3});
  const Tensor t = labels({1, 2, 0}), w = f64({1.0, 0.5, 3.0}, {3});
  const Tensor lp = log_softmax(x, 1);
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    const ClassLossOptions o{w, 2, 0.0};
    const Tensor a = nll_loss(lp, t, r, o), b = cross_entropy(x, t, r, o);
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.flat_get(i) == Approx(b.flat_get(i)).epsilon(1e-12));
  }
  // -w_t * x_t, the mean divided by the weights that count.
  CHECK(nll_loss(lp, t, Reduction::mean, {w, 2, 0.0}).item() ==
        Approx(-(0.5 * lp.flat_get(1) + 1.0 * lp.flat_get(6)) / 1.5).epsilon(1e-12));
  const Tensor g = nll_loss_backward(lp, t, scalar_tensor(1.0, DType::f64), Reduction::sum, {w, 2, 0.0});
  const std::vector<double> want = {0, -0.5, 0, 0, 0, 0, -1.0, 0, 0};
  CHECK(g.to_vector() == want);
}

TEST_CASE("binary_cross_entropy clamps its logs at -100 and its gradient stays finite", "[loss]") {
  const Tensor p = f64({0.0, 1.0, 0.25, 1.0, 0.0, 0.5}, {6}), t = f64({1.0, 0.0, 1.0, 1.0, 0.0, 0.3}, {6});
  const Tensor l = binary_cross_entropy(p, t, Reduction::none);
  CHECK(l.flat_get(0) == 100.0);  // -log(0) clamped
  CHECK(l.flat_get(1) == 100.0);  // -log(1 - 1) clamped
  CHECK(l.flat_get(2) == Approx(-std::log(0.25)));
  CHECK(l.flat_get(3) == 0.0);
  CHECK(l.flat_get(4) == 0.0);
  CHECK(l.flat_get(5) == Approx(-(0.3 * std::log(0.5) + 0.7 * std::log(0.5))));
  const LossGrads g = binary_cross_entropy_backward(p, t, ones({6}, DType::f64), Reduction::none, true, true);
  // (0 - 1) / max(0, 1e-12f): PyTorch's floor is the float 1e-12, in f64 too, so these are
  // PyTorch's f64 values bit for bit (the double 1e-12 would give -1e12, 4e-9 relative away).
  CHECK(g.da.flat_get(0) == -1.0 / double(1e-12f));
  CHECK(g.da.flat_get(1) == 1.0 / double(1e-12f));
  CHECK(g.da.flat_get(0) != -1e12);
  CHECK(g.da.flat_get(2) == Approx((0.25 - 1.0) / (0.25 * 0.75)));
  CHECK(g.db.flat_get(2) == Approx(std::log(0.75) - std::log(0.25)));
  CHECK(g.db.flat_get(0) == Approx(0.0 + 100.0));  // log(1) - clamped log(0)
  // A NaN probability is not clamped away: it passes on (PyTorch refuses it; a loss scaler here
  // must see it). A probability outside [0, 1] is refused, naming the first.
  CHECK(std::isnan(binary_cross_entropy(f64({NAN}, {1}), f64({1.0}, {1})).item()));
  CHECK_THAT(error_of([] {
               binary_cross_entropy(f64({0.5, NAN, 1.5, -1.0}, {2, 2}), f64({1, 0, 1, 0}, {2, 2}));
             }),
             Contains("binary_cross_entropy: probability 1.5 (at position 2) is outside [0, 1] (probs f64[2, 2], "
                      "targets f64[2, 2]); it takes probabilities"));
  CHECK_THAT(error_of([] { binary_cross_entropy(f64({-0.25}, {1}).to(DType::bf16), f64({1.0}, {1}).to(DType::bf16)); }),
             Contains("probability -0.25 (at position 0) is outside [0, 1]"));
  CHECK_THAT(error_of([] { binary_cross_entropy(f64({INFINITY}, {1}), f64({1.0}, {1})); }),
             Contains("probability inf (at position 0)"));
  // 16 bits: computed in fp32 and rounded once.
  const Tensor p16 = f64({0.1, 0.9, 0.5, 0.001}, {4}).to(DType::f16), t16 = f64({1, 0, 1, 0}, {4}).to(DType::f16);
  const Tensor l16 = binary_cross_entropy(p16, t16, Reduction::none);
  const Tensor l32 = binary_cross_entropy(p16.to(DType::f32), t16.to(DType::f32), Reduction::none);
  CHECK(l16.to_vector() == l32.to(DType::f16).to_vector());
}

TEST_CASE("l1_loss and smooth_l1_loss follow PyTorch, at the kinks and for NaN", "[loss]") {
  const Tensor a = f64({0.0, 0.5, -2.0, 3.0, 1.0, NAN}, {6}), b = f64({0.0, 0.0, 0.0, 1.0, 2.0, 0.0}, {6});
  const Tensor l1 = l1_loss(a, b, Reduction::none);
  CHECK(l1.to_vector()[1] == 0.5);
  CHECK(l1.to_vector()[2] == 2.0);
  CHECK(std::isnan(l1.flat_get(5)));
  const LossGrads g1 = l1_loss_backward(a, b, ones({6}, DType::f64), Reduction::none, true, true);
  const std::vector<double> d1 = g1.da.to_vector();
  CHECK(d1[0] == 0.0);  // sign(0) = 0, as PyTorch
  CHECK(d1[1] == 1.0);
  CHECK(d1[2] == -1.0);
  CHECK(std::isnan(d1[5]));  // a NaN is not turned into a number
  CHECK(g1.db.flat_get(2) == 1.0);
  // beta 1: 0.5 d^2 inside, |d| - 0.5 outside; d/da = d inside, sign(d) outside.
  const Tensor s = smooth_l1_loss(a, b, Reduction::none, 1.0);
  CHECK(s.flat_get(1) == 0.125);
  CHECK(s.flat_get(2) == 1.5);
  CHECK(s.flat_get(4) == 0.5);  // |d| = 1 = beta: the linear branch, 0.5 either way
  CHECK(std::isnan(s.flat_get(5)));
  const LossGrads gs = smooth_l1_loss_backward(a, b, ones({6}, DType::f64), Reduction::none, 1.0, true, false);
  CHECK(gs.da.flat_get(1) == 0.5);
  CHECK(gs.da.flat_get(2) == -1.0);
  CHECK(gs.da.flat_get(4) == -1.0);
  CHECK(std::isnan(gs.da.flat_get(5)));
  // beta 0 is l1_loss, values and gradients.
  const Tensor a5 = a.slice(0, 0, 5), b5 = b.slice(0, 0, 5);
  CHECK(smooth_l1_loss(a5, b5, Reduction::none, 0.0).to_vector() == l1_loss(a5, b5, Reduction::none).to_vector());
  CHECK(smooth_l1_loss_backward(a5, b5, ones({5}, DType::f64), Reduction::none, 0.0, true, false).da.to_vector() ==
        l1_loss_backward(a5, b5, ones({5}, DType::f64), Reduction::none, true, false).da.to_vector());
  CHECK(smooth_l1_loss(a5, b5, Reduction::mean, 2.0).item() ==
        Approx((0 + 0.0625 + 1.0 + 1.0 + 0.25) / 5.0).epsilon(1e-12));
}

TEST_CASE("the new loss options reject bad arguments with messages naming shapes and values", "[loss]") {
  const Tensor x = zeros({4, 3}), t = labels({0, 1, 2, 1});
  CHECK_THAT(error_of([&] {
               cross_entropy(x, t, Reduction::mean, {zeros({4}), -100, 0.0});
             }),
             Contains("cross_entropy: weight f32[4] must have one entry per class of logits f32[4, 3]; expected [3]"));
  CHECK_THAT(error_of([&] {
               cross_entropy(x, t, Reduction::mean, {Tensor(), -100, 1.5});
             }),
             Contains("cross_entropy: label_smoothing must be in [0, 1], got 1.5"));
  CHECK_THAT(error_of([&] {
               nll_loss(x, t, Reduction::mean, {Tensor(), -100, 0.1});
             }),
             Contains("nll_loss: label_smoothing is cross_entropy's option"));
  CHECK_THAT(error_of([&] {
               nll_loss(x, labels({0, 1, 3, -100}));
             }),
             Contains("nll_loss: target 3 (at position 2) is out of range for 3 classes (input f32[4, 3]"));
  CHECK_THAT(error_of([&] {
               cross_entropy(x, labels({0, -1, 0, 0}));
             }),
             Contains("cross_entropy: target -1 (at position 1) is out of range for 3 classes (logits f32[4, 3]"));
  CHECK_THAT(error_of([&] { smooth_l1_loss(x, x, Reduction::mean, -1.0); }),
             Contains("smooth_l1_loss: beta must be finite and >= 0, got -1"));
  CHECK_THAT(error_of([&] {
               l1_loss(x, zeros({3, 4}));
             }),
             Contains("l1_loss: input f32[4, 3] and target f32[3, 4] must have the same shape"));
  CHECK_THAT(error_of([&] { binary_cross_entropy(x, zeros({4, 3}, DType::f64)); }), Contains("binary_cross_entropy"));
}
