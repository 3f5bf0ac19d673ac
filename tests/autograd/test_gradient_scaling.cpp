// Zhao et al.'s gradient scaling (autograd/gradient_scaling.h): the statistical model against numbers worked
// out by hand, the rule's choices on real tensors, its cache, and its effect on a small f16 MLP.
#include "support/catch.h"

#include <cmath>
#include <limits>

#include "mixtape.h"

using namespace mixtape;
using Catch::Contains;

namespace {

constexpr double kF16Min = 5.9604644775390625e-08;  // 2^-24
constexpr double kF16Max = 65504.0;
constexpr double kBf16Min = 9.183549615799121e-41;  // 2^-133
const FormatRange kF16{kF16Min, kF16Max};
const FormatRange kBf16{kBf16Min, 3.3895313892515355e+38};

// ||a - b|| / ||b|| over all elements.
double rel_err(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / den);
}

double zero_fraction(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double z = 0.0;
  for (double x : v) z += x == 0.0 ? 1.0 : 0.0;
  return z / double(v.size());
}

}  // namespace

TEST_CASE("gradient scaling: erfinv inverts erf to double precision", "[gradscale]") {
  // erfinv(1e-3) = 8.86227157466552e-4 (~ sqrt(pi)/2 * 1e-3); erfinv(2e-3 - 1) = -2.18512421913301,
  // i.e. Phi^-1(1e-3) = sqrt(2) * that = -3.0902323: the 3.09 sigma of the cast rule.
  CHECK(erfinv(1e-3) == Approx(8.86227157466552e-4).epsilon(1e-12));
  CHECK(erfinv(2e-3 - 1.0) == Approx(-2.18512421913301).epsilon(1e-12));
  for (double x : {-3.5, -2.5, -0.7, -1e-6, 1e-9, 0.3, 1.0, 2.0, 3.0}) {  // erf is flat to 1 beyond
    INFO("x = " << x);
    CHECK(erfinv(std::erf(x)) == Approx(x).epsilon(1e-10));
  }
  CHECK(erfinv(0.0) == 0.0);
  CHECK(erfinv(1.0) == std::numeric_limits<double>::infinity());
  CHECK(erfinv(-1.0) == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(erfinv(1.5)));
}

TEST_CASE("gradient scaling: format ranges come from the 16-bit dtype", "[gradscale]") {
  REQUIRE(format_range(DType::f16).has_value());
  CHECK(format_range(DType::f16)->lambda_min == std::ldexp(1.0, -24));
  CHECK(format_range(DType::f16)->lambda_max == 65504.0);
  CHECK(format_range(DType::bf16)->lambda_min == std::ldexp(1.0, -133));
  CHECK(format_range(DType::bf16)->lambda_max == Approx(3.3895313892515355e+38));
  CHECK_FALSE(format_range(DType::f32).has_value());
  CHECK_FALSE(format_range(DType::f64).has_value());
}

TEST_CASE("gradient scaling: GEMM rule (Lemma 1, Theorem 1, Algorithm 1 line 7) by hand", "[gradscale]") {
  // Eq. 2: N = 64, sigma_dy = 1e-6, sigma_w = 0.05 -> sigma_dx = 8 * 1e-6 * 0.05 = 4e-7.
  const double sigma = gemm_sigma(64, 1e-6, 0.05);
  CHECK(sigma == Approx(4e-7).epsilon(1e-12));
  // Eq. 3: gamma(beta) = erf(2^-24 / (beta sqrt(2) 4e-7)):
  //   beta = 64:  erf(1.6463e-3) = 1.85772e-3 > 1e-3
  //   beta = 128: erf(8.2317e-4) = 9.28860e-4 <= 1e-3
  CHECK(gemm_underflow_rate(64.0, sigma, kF16Min) == Approx(1.857718e-3).epsilon(1e-5));
  CHECK(gemm_underflow_rate(128.0, sigma, kF16Min) == Approx(9.288597e-4).epsilon(1e-5));
  CHECK(gemm_underflow_rate(1.0, 0.0, kF16Min) == 1.0);  // an all-zero dX underflows entirely
  // Closed form: beta >= 2^-24 / (sqrt(2) * 4e-7 * erfinv(1e-3)) = 5.9605e-8 / 5.0133e-10 = 118.894
  // -> rounded up to 128. Cap: 65504 / (64 * 5e-6 * 0.2) = 1.0235e9, far above.
  const BetaChoice c = choose_gemm_beta(sigma, 64, 5e-6, 0.2, 1e-3, kF16);
  CHECK(c.underflow_bound == Approx(118.894033).epsilon(1e-6));
  CHECK(c.cap == Approx(65504.0 / 6.4e-5).epsilon(1e-12));
  CHECK(c.beta == 128.0f);
  CHECK_FALSE(c.capped);
  // A looser threshold needs less: gamma' = 1e-2 -> erfinv(1e-2) = 8.86250e-3 -> bound 11.889 -> 16.
  CHECK(choose_gemm_beta(sigma, 64, 5e-6, 0.2, 1e-2, kF16).beta == 16.0f);
}

TEST_CASE("gradient scaling: the overflow cap wins when the maxima are large", "[gradscale]") {
  const double sigma = 4e-7;  // bound 118.9 -> 128, as above
  // max|dY| = 10, max|W| = 1, N = 64: cap = 65504 / 640 = 102.35 -> 64 (rounded down).
  BetaChoice c = choose_gemm_beta(sigma, 64, 10.0, 1.0, 1e-3, kF16);
  CHECK(c.cap == Approx(102.35));
  CHECK(c.beta == 64.0f);
  CHECK(c.capped);
  // The cap may force beta below 1 (section 4.2): max|dY| = 2000 -> cap = 65504 / 128000 = 0.51 -> 0.5.
  c = choose_gemm_beta(sigma, 64, 2000.0, 1.0, 1e-3, kF16);
  CHECK(c.beta == 0.5f);
  CHECK(c.capped);
  // beta * dY is stored in f16 too: N max|W| = 4 * 0.01 < 1, so lambda_max / max|dY| binds:
  // max|dY| = 1000 -> min(65504 / 40, 65504 / 1000) = 65.5 -> 64, however small sigma is.
  c = choose_gemm_beta(1e-12, 4, 1000.0, 0.01, 1e-3, kF16);
  CHECK(c.cap == Approx(65.504));
  CHECK(c.beta == 64.0f);
  // Well-scaled gradients are not scaled down towards the bound: sigma = 1e-3 gives a bound of
  // 5.96e-8 / (1.2533e-3 * 1e-3) = 0.0476, and beta stays 1.
  c = choose_gemm_beta(1e-3, 64, 1e-2, 0.5, 1e-3, kF16);
  CHECK(c.underflow_bound == Approx(0.047557).epsilon(1e-4));
  CHECK(c.beta == 1.0f);
  CHECK_FALSE(c.capped);
  // Bad statistics are errors that name the function.
  CHECK_THROWS_WITH(choose_gemm_beta(-1.0, 4, 1.0, 1.0, 1e-3, kF16), Contains("choose_gemm_beta") && Contains("sigma"));
  CHECK_THROWS_WITH(choose_gemm_beta(1.0, 4, 1.0, 1.0, 1.0, kF16), Contains("gamma'"));
}

TEST_CASE("gradient scaling: cast rule (Theorem 2, Algorithm 1 line 14) by hand", "[gradscale]") {
  // ln|dY| ~ N(mu = ln 1e-9 = -20.7233, sigma = 2). ln 2^-24 = -16.6355, sqrt(2) erfinv(2e-3 - 1) = -3.0902:
  //   ln beta >= -16.6355 + 20.7233 + 2 * 3.0902 = 10.2682 -> beta >= 28801.9 -> 2^15 = 32768.
  //   gamma(2^14) = Phi((-16.6355 + 20.7233 - 9.7041) / 2) = Phi(-2.8082) = 2.4912e-3 > 1e-3
  //   gamma(2^15) = Phi((-16.6355 + 20.7233 - 10.3972) / 2) = Phi(-3.1547) = 8.0321e-4 <= 1e-3
  const double mu = std::log(1e-9);
  CHECK(cast_underflow_rate(16384.0, mu, 2.0, kF16Min) == Approx(2.491246e-3).epsilon(1e-5));
  CHECK(cast_underflow_rate(32768.0, mu, 2.0, kF16Min) == Approx(8.032139e-4).epsilon(1e-5));
  BetaChoice c = choose_cast_beta(mu, 2.0, 1e-3, 1e-3, kF16);
  CHECK(c.underflow_bound == Approx(28801.94).epsilon(1e-6));
  CHECK(c.beta == 32768.0f);
  CHECK_FALSE(c.capped);
  // Cap: max|dY| = 4 -> 65504 / 4 = 16376 -> 8192.
  c = choose_cast_beta(mu, 2.0, 4.0, 1e-3, kF16);
  CHECK(c.beta == 8192.0f);
  CHECK(c.capped);
  // Gradients already far above lambda_min keep beta = 1: mu = ln 1e-2.
  CHECK(choose_cast_beta(std::log(1e-2), 1.0, 0.5, 1e-3, kF16).beta == 1.0f);
}

TEST_CASE("gradient scaling: bf16's wider exponent range needs smaller betas than f16", "[gradscale]") {
  // The statistics above need nothing in bf16: bound 118.9 * 2^-109 and e^(-65.3) are far below 1.
  CHECK(choose_gemm_beta(4e-7, 64, 5e-6, 0.2, 1e-3, kBf16).beta == 1.0f);
  CHECK(choose_cast_beta(std::log(1e-9), 2.0, 1e-3, 1e-3, kBf16).beta == 1.0f);
  // Gradients near bf16's own underflow, sigma_dx = 1e-40 (N = 64, max|dY| = 1e-39, max|W| = 0.5):
  //   f16:  5.9605e-8  / (sqrt(2) 1e-40 erfinv(1e-3)) = 4.7558e35, log2 = 118.52 -> 2^119
  //   bf16: 9.1835e-41 / (sqrt(2) 1e-40 erfinv(1e-3)) = 732.74,    log2 = 9.52   -> 2^10
  const BetaChoice h = choose_gemm_beta(1e-40, 64, 1e-39, 0.5, 1e-3, kF16);
  const BetaChoice b = choose_gemm_beta(1e-40, 64, 1e-39, 0.5, 1e-3, kBf16);
  CHECK(h.beta == std::ldexp(1.0f, 119));
  CHECK(b.beta == 1024.0f);
  CHECK(b.beta < h.beta);
}

TEST_CASE("gradient scaling: betas are powers of two, minimal, and overflow-free", "[gradscale]") {
  Generator gen(7);
  const std::vector<double> u = uniform({400, 4}, 0.0, 1.0, gen, DType::f64).to_vector();
  for (const FormatRange& f : {kF16, kBf16}) {
    for (size_t i = 0; i < 100; ++i) {
      // Log-uniform statistics over many decades.
      const double sigma = std::pow(10.0, -45.0 + 47.0 * u[4 * i]);
      const double max_dy = sigma * std::pow(10.0, 4.0 * u[4 * i + 1]);
      const double max_w = std::pow(10.0, -3.0 + 4.0 * u[4 * i + 2]);
      const int64_t n = 1 + int64_t(4096 * u[4 * i + 3]);
      const BetaChoice c = choose_gemm_beta(sigma, n, max_dy, max_w, 1e-3, f);
      INFO("sigma " << sigma << " max_dy " << max_dy << " max_w " << max_w << " n " << n << " beta " << c.beta);
      REQUIRE(is_power_of_two(c.beta));
      const bool clamped = c.beta == std::ldexp(1.0f, 127);  // the float range, not the model
      if (!c.capped && !clamped) {
        CHECK(gemm_underflow_rate(c.beta, sigma, f.lambda_min) <= 1e-3);
        if (c.beta > 1.0f) CHECK(gemm_underflow_rate(c.beta / 2, sigma, f.lambda_min) > 1e-3);
      }
      if (c.beta < 1.0f) CHECK(c.capped);
      CHECK(double(c.beta) * double(n) * max_dy * max_w <= f.lambda_max);
      CHECK(double(c.beta) * max_dy <= f.lambda_max);

      const double mu = std::log(sigma), s = 3.0 * u[4 * i + 2];
      const BetaChoice k = choose_cast_beta(mu, s, max_dy, 1e-3, f);
      REQUIRE(is_power_of_two(k.beta));
      if (!k.capped && k.beta != std::ldexp(1.0f, 127)) {
        CHECK(cast_underflow_rate(k.beta, mu, s, f.lambda_min) <= 1e-3 * (1 + 1e-9));
        if (k.beta > 1.0f) CHECK(cast_underflow_rate(k.beta / 2, mu, s, f.lambda_min) > 1e-3);
      }
      CHECK(double(k.beta) * max_dy <= f.lambda_max);
    }
  }
}

TEST_CASE("gradient scaling: moments and log-moments of a tensor in one pass", "[gradscale][stats]") {
  // [1, -2, 0, 4, inf, nan] seen through a strided view (every element of a [2, 3] transpose).
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = from_vector(std::vector<double>{1, 0, -2, 4, inf, nan}, {3, 2}, DType::f32).t();
  const TensorMoments m = tensor_moments(t);
  CHECK(m.count == 4);
  CHECK(m.nonfinite == 2);
  CHECK(m.mean == Approx(0.75));                  // (1 - 2 + 0 + 4) / 4
  CHECK(m.rms == Approx(std::sqrt(21.0 / 4.0)));  // (1 + 4 + 0 + 16) / 4
  CHECK(m.std == Approx(std::sqrt(21.0 / 4.0 - 0.5625)));
  CHECK(m.max_abs == 4.0);
  const LogAbsMoments l = log_abs_moments(t);
  CHECK(l.count == 3);  // zero and non-finite entries left out
  CHECK(l.nonfinite == 2);
  const double a = std::log(2.0), b = std::log(4.0);  // ln 1 = 0
  CHECK(l.mu == Approx((a + b) / 3.0));
  CHECK(l.sigma == Approx(std::sqrt((a * a + b * b) / 3.0 - (a + b) * (a + b) / 9.0)));
  CHECK(l.max_abs == 4.0);
  // 16-bit inputs accumulate in f64: 2^-20 in f16 is a subnormal-free exact value.
  const TensorMoments h = tensor_moments(full({1000}, std::ldexp(1.0, -20), DType::f16));
  CHECK(h.rms == std::ldexp(1.0, -20));
  CHECK(tensor_moments(zeros({0})).count == 0);
  CHECK_THROWS_WITH(tensor_moments(zeros({2}, DType::i64)), Contains("tensor_moments"));
}

TEST_CASE("gradient scaling: the rule measures dY and W and answers 1 for wide gradients", "[gradscale]") {
  GradientScalingRule rule;
  // dY = 2^-20 [3, -4, 0, 0] (f16, exact): rms = 2^-20 sqrt(25 / 4) = 2.5 * 2^-20; W rms = 0.5; N = 2.
  //   sigma = sqrt(2) * 2.5 * 2^-20 * 0.5 = 1.68587e-6
  //   bound = 5.9605e-8 / (sqrt(2) * 1.68587e-6 * 8.86227e-4) = 28.209 -> 32
  const ScaledGrad dy{from_vector(std::vector<double>{3, -4, 0, 0}, {2, 2}, DType::f16) * std::ldexp(1.0, -20), 4.0f};
  const Tensor w = from_vector(std::vector<double>{0.5, -0.5, 0.5, 0.5}, {2, 2}, DType::f16);
  CHECK(rule.gemm_beta(GemmGradQuery{OpId::matmul, &dy, &w, 2}) == 32.0f);
  REQUIRE(rule.records().size() == 1);
  const ScaleRecord& r = rule.records()[0];
  CHECK(r.kind == ScaleRecord::Kind::gemm);
  CHECK(r.op == OpId::matmul);
  CHECK(r.format == DType::f16);
  CHECK(r.alpha == 4.0f);
  CHECK(r.sigma == Approx(1.6858739e-6).epsilon(1e-6));
  CHECK(r.underflow_bound == Approx(28.209472).epsilon(1e-6));
  CHECK(r.underflow_rate <= 1e-3);
  CHECK_FALSE(r.reused);

  // f32 / f64 gradients need no scaling, whatever their size.
  const ScaledGrad tiny32{full({2, 2}, 1e-30, DType::f32), 1.0f};
  const Tensor w32 = full({2, 2}, 1e-3, DType::f32);
  CHECK(rule.gemm_beta(GemmGradQuery{OpId::linear, &tiny32, &w32, 2}) == 1.0f);
  const ScaledGrad tiny64{full({2, 2}, 1e-30, DType::f64), 1.0f};
  const Tensor w64 = full({2, 2}, 1e-3, DType::f64);
  CHECK(rule.gemm_beta(GemmGradQuery{OpId::linear, &tiny64, &w64, 2}) == 1.0f);
  // A cast to f32 needs none either; a cast to f16 of the same gradient does.
  CHECK(rule.cast_beta(CastGradQuery{&tiny32, DType::f32}) == 1.0f);
  CHECK(rule.cast_beta(CastGradQuery{&tiny32, DType::f16}) > 1.0f);
  // A non-finite dY (overflow upstream) is left for the optimizer to skip: beta = 1.
  const ScaledGrad bad{from_vector(std::vector<double>{1e-7, INFINITY}, {2}, DType::f16), 1.0f};
  const Tensor w1 = full({2}, 1e-3, DType::f16);
  CHECK(rule.gemm_beta(GemmGradQuery{OpId::linear, &bad, &w1, 1}) == 1.0f);
  CHECK(rule.cast_beta(CastGradQuery{&bad, DType::f16}) == 1.0f);

  CHECK_THROWS_WITH(GradientScalingRule(GradientScalingOptions{0.0, 1}), Contains("gamma'"));
  CHECK_THROWS_WITH(GradientScalingRule(GradientScalingOptions{1e-3, 0}), Contains("update_period"));
}

namespace {
// The records of activation-gradient queries (GEMM dX and casts), without the parameter
// gradients' own records (Note [Parameter gradient scale]).
std::vector<ScaleRecord> activation_records(const std::vector<ScaleRecord>& all) {
  std::vector<ScaleRecord> out;
  for (const ScaleRecord& r : all)
    if (r.kind != ScaleRecord::Kind::param) out.push_back(r);
  return out;
}

// y = x W^T in f16 (x, W leaves), backward from {dY ~ N(0, seed_size^2), 1}.
void linear_step(GradientScalingRule& rule, double seed_size) {
  Generator gen(3);
  Variable x(normal({8, 16}, 0.0, 1.0, gen, DType::f16), true);
  Variable w(normal({4, 16}, 0.0, 0.01, gen, DType::f16), true);
  Tape tape;
  tape.set_scaling_rule(&rule);
  Variable y = linear(x, w);
  tape.backward(y, ScaledGrad{normal({8, 4}, 0.0, seed_size, gen, DType::f16), 1.0f});
}
}  // namespace

TEST_CASE("gradient scaling: update_period K reuses each node's beta until next_step() was called K times",
          "[gradscale]") {
  // dY ~ 1e-4: sigma_dx = sqrt(4) * 1e-4 * 0.01 = 2e-6 -> bound 23.8 -> beta 32.
  GradientScalingRule rule(GradientScalingOptions{1e-3, 3});
  linear_step(rule, 1e-4);
  REQUIRE(activation_records(rule.records()).size() == 1);
  const float first = activation_records(rule.records())[0].beta;
  CHECK(first == 32.0f);
  CHECK_FALSE(activation_records(rule.records())[0].reused);
  CHECK(activation_records(rule.records())[0].node == 0);  // the only node on the tape
  // dY 64 times smaller needs ~64 times more (bound ~1520 -> 2048); the cache keeps the old beta.
  GradientScalingRule fresh;
  linear_step(fresh, 1e-4 / 64);
  const float needed = activation_records(fresh.records())[0].beta;
  CHECK(needed == 2048.0f);
  for (int s = 0; s < 3; ++s) {
    INFO("step " << rule.step());
    linear_step(rule, 1e-4 / 64);
    REQUIRE(activation_records(rule.records()).size() == 1);  // records hold the last backward only
    CHECK(activation_records(rule.records())[0].reused);
    CHECK(activation_records(rule.records())[0].beta == first);
    rule.next_step();  // steps 1, 2, 3
  }
  linear_step(rule, 1e-4 / 64);  // 3 steps after it was computed: recomputed
  CHECK_FALSE(activation_records(rule.records())[0].reused);
  CHECK(activation_records(rule.records())[0].beta == needed);
  // K = 1 (the default) recomputes on every call.
  linear_step(fresh, 1e-4);
  CHECK(activation_records(fresh.records())[0].beta == first);
}

TEST_CASE("gradient scaling: queries are stamped with the pass, the node and the operand", "[gradscale]") {
  GradientScalingRule rule;
  Generator gen(5);
  Variable a(normal({4, 8}, 0.0, 1.0, gen, DType::f16), true);
  Variable b(normal({8, 4}, 0.0, 0.1, gen, DType::f16), true);
  Tape tape;
  tape.set_scaling_rule(&rule);
  Variable y = relu(matmul(a, b));  // nodes: 0 matmul, 1 relu
  tape.backward(y, ScaledGrad{normal({4, 4}, 0.0, 1e-6, gen, DType::f16), 1.0f});
  REQUIRE(rule.records().size() == 2);  // da and db of the one matmul node
  CHECK(rule.records()[0].node == 0);
  CHECK(rule.records()[0].query == 0);
  CHECK(rule.records()[1].node == 0);
  CHECK(rule.records()[1].query == 1);
  // Each operand's gradient carries its own beta.
  CHECK(a.grad()->scale == rule.records()[0].beta);
  CHECK(b.grad()->scale == rule.records()[1].beta);
}

namespace {

// Counts exact zeros in the activation gradients (input 0 of every linear node): dense in exact
// arithmetic, so every zero is an f16 underflow.
struct ZeroCounter : GradObserver {
  double zeros = 0.0, total = 0.0;
  void on_node_grad(const Node& node, size_t input, const ScaledGrad& g) override {
    if (node.op != OpId::linear || input != 0) return;
    const double n = double(g.g.numel());
    zeros += zero_fraction(g.g) * n;
    total += n;
  }
  void on_leaf_grad(const VarImpl&, const ScaledGrad&) override {}
  double fraction() const { return zeros / total; }
};

struct MlpRun {
  std::vector<Tensor> weight_grads;  // unscaled, f32 (f64 for the reference)
  double underflow = 0.0;            // fraction of zeros in the activation gradients
  std::vector<ScaleRecord> records;
};

// 64 -> 64 -> 64 -> 10 MLP with ReLU, weights N(0, 0.02^2), batch 32; loss = sum(cast(y, f32) * C)
// with C ~ N(0, 1e-6^2), backward with loss scale 1: the loss gradient is C itself, so the
// activation gradients are ~1e-6 * 0.02 * sqrt(N) per layer and fall below f16's 2^-24.
// nn::Linear keeps f32 masters and casts them to x's dtype: f16 for the runs under test, f64 for
// the reference (on the same f16-representable values).
MlpRun run_mlp(DType dtype, GradientScalingRule* rule) {
  Generator gen(11);
  const Tensor x16 = normal({32, 64}, 0.0, 1.0, gen, DType::f16);
  const Tensor c = normal({32, 10}, 0.0, 1e-6, gen, DType::f32);
  std::vector<std::shared_ptr<nn::Linear>> layers;
  for (auto [in, out] : {std::pair<int64_t, int64_t>{64, 64}, {64, 64}, {64, 10}}) {
    auto l = std::make_shared<nn::Linear>(in, out, /*bias=*/true, gen);
    // Masters hold f16-representable values so that both runs see the same weights.
    Tensor w = l->weight.data(), b = l->bias.data();  // handles sharing the parameters' storage
    w.copy_(normal({out, in}, 0.0, 0.02, gen, DType::f16));
    b.copy_(uniform({out}, 0.5, 1.5, gen, DType::f16));  // keeps activations ~1: dW = dY^T X stays representable
    layers.push_back(l);
  }
  Variable x(x16.to(dtype), true);
  ZeroCounter zc;
  Tape tape;
  tape.set_scaling_rule(rule);
  tape.set_observer(&zc);
  Variable h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    h = layers[i]->forward(h);
    if (i + 1 < layers.size()) h = relu(h);
  }
  const DType wide = dtype == DType::f64 ? DType::f64 : DType::f32;
  Variable loss = sum(cast(h, wide) * Variable(c.to(wide)));
  tape.backward(loss, 1.0f);
  MlpRun run;
  for (const auto& l : layers) run.weight_grads.push_back(l->weight.grad()->unscaled());
  run.underflow = zc.fraction();
  if (rule) run.records = activation_records(rule->records());
  return run;
}

}  // namespace

TEST_CASE("gradient scaling: an f16 MLP with tiny gradients underflows without the rule and not with it",
          "[gradscale]") {
  const MlpRun ref = run_mlp(DType::f64, nullptr);
  const MlpRun plain = run_mlp(DType::f16, nullptr);
  GradientScalingRule rule;
  const MlpRun ruled = run_mlp(DType::f16, &rule);
  CHECK(ref.underflow == 0.0);
  INFO("zeros in activation gradients: plain " << plain.underflow << ", with the rule " << ruled.underflow);
  CHECK(plain.underflow > 0.5);
  CHECK(ruled.underflow < 0.01);
  // One cast record (the f16 -> f32 cast before the loss), then the three linear nodes.
  REQUIRE(ruled.records.size() == 4);
  CHECK(ruled.records[0].kind == ScaleRecord::Kind::cast);
  for (size_t i = 1; i < 4; ++i) CHECK(ruled.records[i].op == OpId::linear);
  for (const ScaleRecord& r : ruled.records) {
    CHECK(r.beta > 1.0f);
    CHECK(r.underflow_rate <= 1e-3);
  }
  // Weight gradients (unscaled by their own scale) against the f64 reference.
  for (size_t i = 0; i < 3; ++i) {
    const double e_plain = rel_err(plain.weight_grads[i], ref.weight_grads[i]);
    const double e_ruled = rel_err(ruled.weight_grads[i], ref.weight_grads[i]);
    INFO("layer " << i << ": relative error plain " << e_plain << ", with the rule " << e_ruled);
    // Tolerance 1e-2: the rule targets underflow, not resolution; the scaled gradients sit a few
    // hundred subnormal steps above 2^-24, ~0.5% rounding error (measured 0.4-0.7%).
    CHECK(e_ruled < 1e-2);
    CHECK(e_ruled < e_plain);
    // Without the rule only the last layer's gradient is representable, coarsely: dY = C ~ 1e-6
    // is ~17 subnormal steps of 2^-24, ~2% rounding error (tolerance 5e-2). The layers below see
    // mostly zeros (measured errors 38% and 100%).
    if (i == 2) CHECK(e_plain < 5e-2);
    else CHECK(e_plain > 0.3);
  }
}

TEST_CASE("gradient scaling: a tensor used twice combines differently scaled gradients without overflow",
          "[gradscale]") {
  // h feeds two linear paths. Path 1 has tiny dY and W (beta in the thousands), path 2 large
  // ones (beta 1, its cap is below 4): rescaling path 2's dX to path 1's scale would overflow
  // f16, so the branch rule must settle on the common scale 1.
  Generator gen(13);
  const Tensor h16 = normal({4, 8}, 0.0, 1.0, gen, DType::f16);
  const Tensor w1 = normal({8, 8}, 0.0, 1e-3, gen, DType::f16);
  const Tensor w2 = normal({8, 8}, 0.0, 4.0, gen, DType::f16);
  const Tensor seed1 = normal({4, 8}, 0.0, 1e-5, gen, DType::f16);
  const Tensor seed2 = normal({4, 8}, 0.0, 100.0, gen, DType::f16);
  auto run = [&](DType dt, GradientScalingRule* rule) {
    Variable h(h16.to(dt), true);
    Tape tape;
    tape.set_scaling_rule(rule);
    Variable y = concat({linear(h, Variable(w1.to(dt))), linear(h, Variable(w2.to(dt)))}, 1);
    tape.backward(y, ScaledGrad{concat({seed1, seed2}, 1).to(dt), 1.0f});
    return *h.grad();
  };
  GradientScalingRule rule;
  const ScaledGrad g = run(DType::f16, &rule);
  REQUIRE(activation_records(rule.records()).size() == 2);
  // Backward order: the second linear first. Path 2: sigma_dx = sqrt(8) * 100 * 4 ~ 1.1e3 needs
  // no scaling (bound < 1), cap 65504 / (8 max|dY| max|W|) ~ 2.9 -> beta 1. Path 1: sigma_dx =
  // sqrt(8) * 1e-5 * 1e-3 ~ 2.8e-8 -> bound ~ 1.7e3 -> 2048 or 4096 for the sampled values.
  const float beta2 = activation_records(rule.records())[0].beta, beta1 = activation_records(rule.records())[1].beta;
  INFO("beta path 1 " << beta1 << ", path 2 " << beta2 << ", caps " << activation_records(rule.records())[1].cap << ", "
                      << activation_records(rule.records())[0].cap);
  CHECK(beta1 >= 2048.0f);
  CHECK(beta2 == 1.0f);
  // Path 2's dX dominates h's gradient, and brought to path 1's scale it would overflow f16.
  CHECK(max_abs(g.g) * beta1 > kF16Max);
  CHECK(g.scale == beta2);  // the largest scale that overflows neither gradient
  CHECK(max_abs(g.g) < kF16Max);
  const ScaledGrad ref = run(DType::f64, nullptr);
  CHECK(rel_err(g.unscaled(), ref.unscaled()) < 5e-3);
}

// ---- every output a tuple of its own: weight gradients, branch sums, the overflow guard ----------

TEST_CASE("gradient scaling: a weight gradient that would overflow gets its own, smaller scale", "[gradscale]") {
  // y = x W^T, x [256, 8] ~ N(0, 4), dY ~ N(0, 1) at alpha = 2^12 (a large incoming scale, as the
  // cast rule gives a softmax gradient): alpha dW sums 256 products, up to ~4.6e5 > 65504.
  // dX's own scale is the GEMM rule's business and must not change.
  Generator gen(21);
  const Tensor x16 = normal({256, 8}, 0.0, 4.0, gen, DType::f16);
  const Tensor w16 = normal({4, 8}, 0.0, 0.1, gen, DType::f16);
  const Tensor dy16 = normal({256, 4}, 0.0, 1.0, gen, DType::f16);
  const float alpha = 4096.0f;
  auto run = [&](DType dt, ScalingRule* rule) {
    Variable x(x16.to(dt), true), w(w16.to(dt), true);
    Tape tape;
    tape.set_scaling_rule(rule);
    Variable y = linear(x, w);
    tape.backward(y, ScaledGrad{(dy16.to(dt) * double(alpha)), alpha});
    return std::pair{*x.grad(), *w.grad()};
  };
  const auto [dx_ref, dw_ref] = run(DType::f64, nullptr);
  const auto [dx_plain, dw_plain] = run(DType::f16, nullptr);
  REQUIRE(max_abs(dw_ref.g) > kF16Max);    // the premise: alpha dW does not fit f16
  CHECK(std::isinf(max_abs(dw_plain.g)));  // without the rule it overflows
  GradientScalingRule rule;
  const auto [dx, dw] = run(DType::f16, &rule);
  CHECK(std::isfinite(max_abs(dw.g)));
  CHECK(max_abs(dw.g) <= kF16Max);
  CHECK(dw.scale < alpha);  // scaled down, a power of two
  CHECK(is_power_of_two(dw.scale));
  CHECK(rel_err(dw.unscaled(), dw_ref.unscaled()) < 1e-3);
  // dX keeps the GEMM rule's scale, not the weight gradient's.
  CHECK(dx.scale >= alpha);
  CHECK(rel_err(dx.unscaled(), dx_ref.unscaled()) < 1e-2);
  bool saw_param = false;
  for (const ScaleRecord& r : rule.records())
    if (r.kind == ScaleRecord::Kind::param && r.input == 1) {
      saw_param = true;
      CHECK(r.capped);
      CHECK(r.beta == dw.scale / alpha);
    }
  CHECK(saw_param);
  CHECK(rule.step_overflows().empty());
}

TEST_CASE("gradient scaling: tiny weight gradients are scaled up by their own beta", "[gradscale]") {
  // dW ~ 256 * 1e-4 * 1e-5: mostly below f16's 2^-24 at alpha = 1; the parameter rule raises it.
  Generator gen(22);
  Variable x(normal({256, 8}, 0.0, 1e-4, gen, DType::f16), true);
  Variable w(normal({4, 8}, 0.0, 0.1, gen, DType::f16), true);
  const Tensor dy = normal({256, 4}, 0.0, 1e-5, gen, DType::f16);
  const Tensor x64 = x.data().to(DType::f64), dy64 = dy.to(DType::f64);
  GradientScalingRule rule;
  {
    Tape tape;
    tape.set_scaling_rule(&rule);
    tape.backward(linear(x, w), ScaledGrad{dy, 1.0f});
  }
  const Tensor ref = matmul(dy64.transpose(0, 1), x64);  // dW = dY^T X in f64
  CHECK(w.grad()->scale > 1.0f);
  CHECK(zero_fraction(w.grad()->g) < 0.01);
  CHECK(rel_err(w.grad()->unscaled(), ref) < 1e-2);
}

TEST_CASE("gradient scaling: a branch sum of gradients that each fit cannot overflow", "[gradscale]") {
  // A leaf used 4 times, each use's gradient ~40000 at scale 1: each fits f16, the sum does not.
  auto run = [](ScalingRule* rule) {
    Variable h(full({2, 3}, 1.0, DType::f16), true);
    Tape tape;
    tape.set_scaling_rule(rule);
    Variable y = h + h + h + h;  // h reaches the leaf through four uses
    tape.backward(y, ScaledGrad{full({2, 3}, 40000.0, DType::f16), 1.0f});
    return *h.grad();
  };
  const ScaledGrad plain = run(nullptr);
  CHECK(std::isinf(max_abs(plain.g)));
  GradientScalingRule rule;
  const ScaledGrad g = run(&rule);
  CHECK(max_abs(g.g) <= kF16Max);
  CHECK(g.scale == 0.25f);  // 160000 * 2^-1 = 80000 > 65504; 2^-2 * 160000 = 40000 fits
  for (double v : g.unscaled().to_vector()) CHECK(v == 160000.0);
}

TEST_CASE("gradient scaling: the tape's guard recomputes a node whose output overflowed, and says where",
          "[gradscale]") {
  // y = x * c with c = 1000: dx = dy * 1000 overflows f16 for dy ~ 100 at scale 1. The guard
  // recomputes the mul node from 2^-8 dY, so dx carries scale 2^-8, and reports the node.
  const Tensor c = full({4}, 1000.0, DType::f16);
  Variable x(full({4}, 1.0, DType::f16), true);
  GradientScalingRule rule;
  {
    Tape tape;
    tape.set_scaling_rule(&rule);
    Variable y = x * Variable(c);
    tape.backward(y, ScaledGrad{full({4}, 100.0, DType::f16), 1.0f});
  }
  REQUIRE(x.grad().has_value());
  CHECK(x.grad()->scale == std::ldexp(1.0f, -8));
  // 2^-8 * 100 = 0.390625 (exact); * 1000 = 390.625 rounds to 390.5 in f16 (a tie, to even):
  // one rounding of the product, as the node computes it at any scale.
  for (double v : x.grad()->unscaled().to_vector()) CHECK(v == 390.5 * 256.0);
  REQUIRE(rule.step_overflows().size() == 1);
  const OverflowEvent& e = rule.step_overflows().front();
  CHECK(e.op == OpId::mul);
  CHECK(e.recovered);
  CHECK(e.shift == 8);
  CHECK(e.node == 0);
  rule.next_step();
  CHECK(rule.step_overflows().empty());
  // Without a rule the same backward overflows: loss scaling skips such a step instead.
  Variable x2(full({4}, 1.0, DType::f16), true);
  {
    Tape tape;
    Variable y = x2 * Variable(c);
    tape.backward(y, ScaledGrad{full({4}, 100.0, DType::f16), 1.0f});
  }
  CHECK(std::isinf(max_abs(x2.grad()->g)));
}

TEST_CASE("gradient scaling: state_dict carries the step and the cached betas into a new rule", "[gradscale]") {
  // Same schedule as above: computed at step 0 (beta 32), reused at steps 1 and 2, recomputed at 3.
  GradientScalingRule rule(GradientScalingOptions{1e-3, 3});
  linear_step(rule, 1e-4);
  rule.next_step();
  GradientScalingRule resumed(GradientScalingOptions{1e-3, 3});
  resumed.load_state_dict(rule.state_dict());
  CHECK(resumed.step() == 1);
  for (int s = 1; s < 3; ++s) {
    INFO("step " << s);
    linear_step(rule, 1e-4 / 64);
    linear_step(resumed, 1e-4 / 64);
    const ScaleRecord a = activation_records(rule.records())[0], b = activation_records(resumed.records())[0];
    CHECK(b.reused);  // without the cache the resumed rule would compute 2048 here
    CHECK(b.beta == a.beta);
    CHECK(b.beta == 32.0f);
    CHECK(b.sigma == a.sigma);
    rule.next_step();
    resumed.next_step();
  }
  linear_step(resumed, 1e-4 / 64);
  CHECK_FALSE(activation_records(resumed.records())[0].reused);
  CHECK(activation_records(resumed.records())[0].beta == 2048.0f);

  // Refused: other options, a corrupt entry; nothing changes.
  const TensorDict saved = rule.state_dict();
  GradientScalingRule other(GradientScalingOptions{1e-3, 4});
  CHECK_THROWS_WITH(other.load_state_dict(saved), Contains("update period 3"));
  TensorDict bad = saved;
  for (auto& [name, t] : bad.tensors)
    if (name == "cache.reals") t = full(t.shape(), -1.0, DType::f64);
  GradientScalingRule target(GradientScalingOptions{1e-3, 3});
  CHECK_THROWS_WITH(target.load_state_dict(bad), Contains("not a finite positive float"));
  CHECK(target.step() == 0);
}
