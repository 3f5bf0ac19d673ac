// concat / split / stack values and messages, the differentiable cast and its scaling rule,
// the branch/split common-scale rule (Zhao et al., Algorithm 1, lines 18-22), and the fused
// LSTM cell against a hand-written formula.
#include "support/catch.h"

#include <bit>
#include <cmath>
#include <limits>

#include "mixtape.h"
#include "tensor/cpu/convert.h"
#include "support/test_util.h"
#include "tensor/cpu/vector_math.h"
#include "tensor/cpu/math.h"

using namespace mixtape;
using Catch::Contains;

namespace {

Tensor seq(const Shape& shape, double start = 0.0, DType dt = DType::f32) {
  return arange(start, start + double(numel_of(shape)), 1.0, DType::f64).reshape(shape).to(dt);
}

// Exactly equal element values (and shape).
void check_equal(const Tensor& got, const std::vector<double>& want, const Shape& shape) {
  REQUIRE(got.shape() == shape);
  CHECK(got.to_vector() == want);
}

// A rule with fixed answers that records what it was asked.
struct FixedRule : ScalingRule {
  float cast_answer = 1.0f;
  int cast_queries = 0;
  DType last_to = DType::i64;
  float gemm_beta(const GemmGradQuery&) override { return 1.0f; }
  float param_beta(const ParamGradQuery&) override { return 1.0f; }
  float cast_beta(const CastGradQuery& q) override {
    ++cast_queries;
    last_to = q.to;
    return cast_answer;
  }
};

}  // namespace

// ---- concat / split / stack --------------------------------------------------------------

TEST_CASE("concat joins along any dim, with non-contiguous inputs", "[shape]") {
  const Tensor a = seq({2, 2}, 0);       // [[0, 1], [2, 3]]
  const Tensor b = seq({3, 2}, 10).t();  // [2, 3] non-contiguous: [[10, 12, 14], [11, 13, 15]]
  const Tensor c = seq({2, 1}, 20);      // [[20], [21]]
  REQUIRE_FALSE(b.is_contiguous());
  check_equal(concat({a, b, c}, 1), {0, 1, 10, 12, 14, 20, 2, 3, 11, 13, 15, 21}, {2, 6});
  check_equal(concat({a, b.narrow(1, 0, 2)}, -2), {0, 1, 2, 3, 10, 12, 11, 13}, {4, 2});
  // A single input is copied; i64 and 16-bit dtypes work too.
  Tensor one = concat({a}, 0);
  CHECK_FALSE(one.same_storage(a));
  check_equal(one, {0, 1, 2, 3}, {2, 2});
  check_equal(concat({from_vector(std::vector<int64_t>{1, 2}, {2}), from_vector(std::vector<int64_t>{3}, {1})}),
              {1, 2, 3}, {3});
  Tensor h = concat({a.to(DType::bf16), c.to(DType::bf16)}, 1);
  CHECK(h.dtype() == DType::bf16);
  check_equal(h, {0, 1, 20, 2, 3, 21}, {2, 3});
}

TEST_CASE("concat names the op, the offending input and the shapes", "[shape]") {
  const Tensor a = zeros({2, 3}), b = zeros({2, 4}), c = zeros({3, 4});
  CHECK_THROWS_WITH(concat({a, b, c}, 1), Contains("concat: input 2 f32[3, 4]") && Contains("input 0 f32[2, 3]") &&
                                              Contains("except in dim 1"));
  CHECK_THROWS_WITH(concat({a, zeros({2, 3, 1})}, 0), Contains("concat: input 1 f32[2, 3, 1]"));
  CHECK_THROWS_WITH(concat({a, zeros({2, 3}, DType::f16)}, 0),
                    Contains("concat: input 1 f16[2, 3]") && Contains("dtype") && Contains("f32[2, 3]"));
  CHECK_THROWS_WITH(concat(std::vector<Tensor>{}, 0), Contains("concat: got an empty list"));
  CHECK_THROWS_WITH(concat({a, Tensor()}, 0), Contains("concat: input 1 is an undefined tensor"));
  CHECK_THROWS_WITH(concat({a, a}, 2), Contains("concat"));
  CHECK_THROWS_WITH(concat({scalar_tensor(1.0)}, 0), Contains("concat: input 0 f32[] is a scalar"));
}

TEST_CASE("split returns views of the given sizes or chunks", "[shape]") {
  const Tensor x = seq({3, 5});
  std::vector<Tensor> p = split(x, {1, 3, 1}, 1);
  REQUIRE(p.size() == 3);
  check_equal(p[0], {0, 5, 10}, {3, 1});
  check_equal(p[1], {1, 2, 3, 6, 7, 8, 11, 12, 13}, {3, 3});
  check_equal(p[2], {4, 9, 14}, {3, 1});
  for (const Tensor& t : p) CHECK(t.same_storage(x));

  std::vector<Tensor> q = split(x, 2, -1);  // chunks of 2: sizes 2, 2, 1
  REQUIRE(q.size() == 3);
  CHECK(q[0].shape() == Shape{3, 2});
  CHECK(q[2].shape() == Shape{3, 1});
  check_equal(q[1], {2, 3, 7, 8, 12, 13}, {3, 2});
  CHECK(split(x, 3, 0).size() == 1);
  // split then concat is the identity
  check_equal(concat(split(x, {2, 0, 3}, 1), 1), x.to_vector(), {3, 5});

  CHECK_THROWS_WITH(split(x, {2, 2}, 1), Contains("split: sizes [2, 2] sum to 4 but dim 1 of f32[3, 5] has size 5"));
  CHECK_THROWS_WITH(split(x, {6, -1}, 1), Contains("split: piece 1 has negative size -1"));
  CHECK_THROWS_WITH(split(x, 0, 1), Contains("split: chunk size must be positive, got 0"));
  CHECK_THROWS_WITH(split(x, 2, 2), Contains("split"));
}

TEST_CASE("stack adds a new dim at any position", "[shape]") {
  const Tensor a = seq({2, 3}, 0), b = seq({3, 2}, 10).t();  // b non-contiguous [2, 3]
  const Tensor s0 = stack({a, b}, 0);
  check_equal(s0, {0, 1, 2, 3, 4, 5, 10, 12, 14, 11, 13, 15}, {2, 2, 3});
  const Tensor s1 = stack({a, b}, 1);
  check_equal(s1, {0, 1, 2, 10, 12, 14, 3, 4, 5, 11, 13, 15}, {2, 2, 3});
  const Tensor s2 = stack({a, b}, -1);
  check_equal(s2, {0, 10, 1, 12, 2, 14, 3, 11, 4, 13, 5, 15}, {2, 3, 2});
  CHECK_THROWS_WITH(stack({a, a, zeros({3, 2})}, 0),
                    Contains("stack: input 2 f32[3, 2] does not match input 0 f32[2, 3]"));
  CHECK_THROWS_WITH(stack({a, b}, 3), Contains("stack"));
}

TEST_CASE("differentiable split zero-fills the pieces nobody used", "[shape]") {
  Variable x(seq({2, 5}), true);
  {
    Tape tape;
    std::vector<Variable> p = split(x, {1, 3, 1}, 1);
    Variable y = sum(p[0] * 2.0 + p[2] * 3.0);
    p.clear();  // the unused middle piece's Variable is gone by backward time
    tape.backward(y);
  }
  REQUIRE(x.grad().has_value());
  check_equal(x.grad()->g, {2, 0, 0, 0, 3, 2, 0, 0, 0, 3}, {2, 5});
}

// ---- cast ----------------------------------------------------------------------------------

TEST_CASE("cast to the same dtype records nothing, casts check their dtypes", "[shape][cast]") {
  Variable x(seq({2, 2}), true);
  Tape tape;
  CHECK(cast(x, DType::f32).same(x));
  CHECK(tape.size() == 0);
  Variable y = cast(x, DType::f16);
  CHECK(y.dtype() == DType::f16);
  CHECK(tape.size() == 1);
  CHECK_THROWS_WITH(cast(x, DType::i64), Contains("cast") && Contains("f32[2, 2]") && Contains("i64"));
}

TEST_CASE("cast f16 -> f32 backward rounds the gradient to f16 (RNE)", "[shape][cast]") {
  Variable x(from_vector(std::vector<double>{0.5, -1.25, 3.0, 7.0}, {4}, DType::f16), true);
  // dY in f32: two ties between f16 neighbours of 1 (spacing 2^-10), a subnormal, and a value
  // below half the smallest subnormal.
  const Tensor dy =
      from_vector(std::vector<double>{1.0 + 1.0 / 2048.0, 1.0 + 3.0 / 2048.0, 1e-6, 1e-9}, {4}, DType::f32);
  {
    Tape tape;
    Variable y = cast(x, DType::f32);
    tape.backward(y, ScaledGrad{dy, 1.0f});
  }
  REQUIRE(x.grad().has_value());
  const ScaledGrad& g = *x.grad();
  CHECK(g.g.dtype() == DType::f16);
  CHECK(g.scale == 1.0f);
  const std::vector<half> got = g.g.values<half>();
  const std::vector<float> want = dy.values<float>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i].bits == round_to_half(want[i]).bits);
  CHECK(to_float(got[0]) == 1.0f);                  // 1 + 2^-11 ties to even: 1
  CHECK(to_float(got[1]) == 1.0f + 1.0f / 512.0f);  // 1 + 3 * 2^-11 ties to even: 1 + 2^-9
  CHECK(to_float(got[2]) > 0.0f);
  CHECK(to_float(got[3]) == 0.0f);
}

TEST_CASE("cast rule: a 16-bit -> f32/f64 cast scales its gradient by cast_beta", "[shape][cast]") {
  FixedRule rule;
  rule.cast_answer = 256.0f;
  const Tensor dy = from_vector(std::vector<double>{1e-6, -3e-7, 0.5, 2.0}, {4}, DType::f32);

  SECTION("f16 -> f32: queried with the f16 target, <beta alpha, round(beta dY)>") {
    Variable x(zeros({4}, DType::f16), true);
    {
      Tape tape;
      tape.set_scaling_rule(&rule);
      Variable y = cast(x, DType::f32);
      tape.backward(y, ScaledGrad{dy * 4.0, 4.0f});
    }
    CHECK(rule.cast_queries == 1);
    CHECK(rule.last_to == DType::f16);
    const ScaledGrad& g = *x.grad();
    CHECK(g.scale == 1024.0f);
    CHECK(g.g.dtype() == DType::f16);
    const std::vector<float> want = (dy * 1024.0).values<float>();
    const std::vector<half> got = g.g.values<half>();
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i].bits == round_to_half(want[i]).bits);
  }
  SECTION("bf16 -> f64 is governed by the rule too") {
    Variable x(zeros({4}, DType::bf16), true);
    {
      Tape tape;
      tape.set_scaling_rule(&rule);
      tape.backward(cast(x, DType::f64), ScaledGrad{dy.to(DType::f64), 1.0f});
    }
    CHECK(rule.cast_queries == 1);
    CHECK(x.grad()->scale == 256.0f);
    CHECK(x.grad()->g.dtype() == DType::bf16);
  }
  SECTION("narrowing and 16-bit <-> 16-bit casts pass the scale through") {
    Variable a(zeros({4}, DType::f32), true), b(zeros({4}, DType::bf16), true);
    {
      Tape tape;
      tape.set_scaling_rule(&rule);
      Variable y = cast(a, DType::f16) + cast(b, DType::f16);
      tape.backward(y, ScaledGrad{dy.to(DType::f16) * 8.0, 8.0f});
    }
    CHECK(rule.cast_queries == 0);
    CHECK(a.grad()->scale == 8.0f);
    CHECK(b.grad()->scale == 8.0f);
    CHECK(a.grad()->g.dtype() == DType::f32);
    CHECK(b.grad()->g.dtype() == DType::bf16);
  }
}

// ---- the common-scale rule (Zhao et al., Algorithm 1, lines 18-22) ---------------------------

TEST_CASE("branch rule: equal scales are summed exactly at that scale", "[shape][scaling]") {
  const Tensor g1 = from_vector(std::vector<double>{8.0, -0.125, 3.5}, {3}, DType::f16);
  const Tensor g2 = from_vector(std::vector<double>{0.25, 0.125, 1000.0}, {3}, DType::f16);
  CHECK(common_scale({{g1, 8.0f}, {g2, 8.0f}}) == 8.0f);
  const ScaledGrad s = combine_branch({{g1, 8.0f}, {g2, 8.0f}});
  CHECK(s.scale == 8.0f);
  check_equal(s.g, {8.25, 0.0, 1003.5}, {3});
}

TEST_CASE("branch rule: the larger scale is skipped when it would overflow f16", "[shape][scaling]") {
  // True gradients a = [100, -3] at 2^4 and b = [0.01, 0.5] at 2^10. At 2^10, a would be
  // 102400 > 65504 (inf in f16), so the common scale is 2^4.
  const Tensor ga = from_vector(std::vector<double>{100.0 * 16, -3.0 * 16}, {2}, DType::f16);
  const Tensor gb = from_vector(std::vector<double>{0.01 * 1024, 0.5 * 1024}, {2}, DType::f16);
  CHECK(common_scale({{ga, 16.0f}, {gb, 1024.0f}}) == 16.0f);
  CHECK(common_scale({{gb, 1024.0f}, {ga, 16.0f}}) == 16.0f);  // order does not matter
  const ScaledGrad s = combine_branch({{gb, 1024.0f}, {ga, 16.0f}});
  CHECK(s.scale == 16.0f);
  REQUIRE(s.g.dtype() == DType::f16);
  const double b0 = gb.flat_get(0) / 64.0, b1 = gb.flat_get(1) / 64.0;  // exact: power of two
  const Tensor want = from_vector(std::vector<double>{1600.0 + b0, -48.0 + b1}, {2}, DType::f16);
  CHECK(s.g.to_vector() == want.to_vector());
  for (double v : s.g.to_vector()) CHECK(std::isfinite(v));
  // Forcing the larger scale shows what the rule avoids.
  CHECK(std::isinf(rescale(ga, 1024.0f / 16.0f).flat_get(0)));
}

TEST_CASE("branch rule: candidates are the incoming scales, tried largest first", "[shape][scaling]") {
  // Line 20: beta = the largest alpha_j such that beta max|dX_i| / alpha_i < lambda_max for all i.
  auto f16 = [](std::vector<double> v) { return from_vector(v, {int64_t(v.size())}, DType::f16); };
  // true magnitudes 1, 100, 0.001 at scales 2^2, 2^6, 2^12: 2^12 * 100 overflows, 2^6 fits.
  const std::vector<ScaledGrad> mixed{{f16({4.0}), 4.0f}, {f16({6400.0}), 64.0f}, {f16({4.096}), 4096.0f}};
  CHECK(common_scale(mixed) == 64.0f);  // neither the largest nor the smallest
  const ScaledGrad s = combine_branch(mixed);
  CHECK(s.scale == 64.0f);
  CHECK(std::isfinite(s.g.flat_get(0)));
  // All fit at the largest scale: it is chosen (fewest underflows).
  CHECK(common_scale({{f16({4.0}), 4.0f}, {f16({0.64}), 64.0f}, {f16({4.096}), 4096.0f}}) == 4096.0f);
  // Only the smallest fits.
  CHECK(common_scale({{f16({40000.0}), 4.0f}, {f16({64.0}), 64.0f}, {f16({4.096}), 4096.0f}}) == 4.0f);
  // lambda_max is the gradient's own format: in f32 the same magnitudes fit at the largest scale.
  auto f32 = [](double v) { return from_vector(std::vector<double>{v}, {1}, DType::f32); };
  CHECK(common_scale({{f32(4.0), 4.0f}, {f32(6400.0), 64.0f}, {f32(4.096), 4096.0f}}) == 4096.0f);
  // bf16 has f32's range: 2^12 * 100 fits.
  auto bf = [](double v) { return from_vector(std::vector<double>{v}, {1}, DType::bf16); };
  CHECK(common_scale({{bf(4.0), 4.0f}, {bf(6400.0), 64.0f}, {bf(4.0), 4096.0f}}) == 4096.0f);
}

TEST_CASE("split pieces whose gradients arrive at different scales meet at a common scale", "[shape][scaling]") {
  // The cast rule gives each piece its own scale: 2^10 for small gradients, 2^4 for large ones.
  struct ByMagnitude : ScalingRule {
    float gemm_beta(const GemmGradQuery&) override { return 1.0f; }
    float param_beta(const ParamGradQuery&) override { return 1.0f; }
    float cast_beta(const CastGradQuery& q) override { return max_abs(q.dy->g) < 1.0 ? 1024.0f : 16.0f; }
  } rule;
  Variable x(zeros({1, 4}, DType::f16), true);
  const Tensor dy = from_vector(std::vector<double>{0.001, -0.002, 100.0, -50.0}, {1, 4}, DType::f32);
  {
    Tape tape;
    tape.set_scaling_rule(&rule);
    std::vector<Variable> p = split(x, 2, 1);                                  // two [1, 2] pieces
    Variable y = concat({cast(p[0], DType::f32), cast(p[1], DType::f32)}, 1);  // [1, 4] f32
    tape.backward(y, ScaledGrad{dy, 1.0f});
  }
  // piece 0 arrives at 2^10, piece 1 at 2^4 with |g| up to 1600: at 2^10 it would be 102400.
  REQUIRE(x.grad().has_value());
  const ScaledGrad& g = *x.grad();
  CHECK(g.scale == 16.0f);
  const double p0 = from_vector(std::vector<double>{1.024}, {1}, DType::f16).flat_get(0) / 64.0;
  const double p1 = from_vector(std::vector<double>{-2.048}, {1}, DType::f16).flat_get(0) / 64.0;
  check_equal(g.g, {p0, p1, 1600.0, -800.0}, {1, 4});
}

// ---- LSTM cell -----------------------------------------------------------------------------

namespace {
double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }
}  // namespace

TEST_CASE("lstm_cell matches the formula written out in f64", "[lstm]") {
  const int64_t B = 2, H = 3;
  Generator gen(7);
  const Tensor gates = uniform({B, 4 * H}, -2.0, 2.0, gen, DType::f64);
  const Tensor c_prev = uniform({B, H}, -1.0, 1.0, gen, DType::f64);
  auto [c, h] = lstm_cell(gates, c_prev);
  REQUIRE(c.shape() == Shape{B, H});
  REQUIRE(h.shape() == Shape{B, H});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const double gi = gates.flat_get(b * 4 * H + j), gf = gates.flat_get(b * 4 * H + H + j);
      const double gg = gates.flat_get(b * 4 * H + 2 * H + j), go = gates.flat_get(b * 4 * H + 3 * H + j);
      const double cv = sig(gf) * c_prev.flat_get(b * H + j) + sig(gi) * std::tanh(gg);
      const double hv = sig(go) * std::tanh(cv);
      CHECK(c.flat_get(b * H + j) == Approx(cv).epsilon(1e-14).margin(1e-15));
      CHECK(h.flat_get(b * H + j) == Approx(hv).epsilon(1e-14).margin(1e-15));
    }
  }
  // Non-contiguous inputs give the same values.
  auto [c2, h2] = lstm_cell(gates.t().contiguous().t(), c_prev.t().contiguous().t());
  CHECK(c2.to_vector() == c.to_vector());
  CHECK(h2.to_vector() == h.to_vector());
}

TEST_CASE("lstm_cell in 16 bits computes in fp32 and rounds each output once", "[lstm]") {
  Generator gen(8);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor gates = uniform({3, 8}, -3.0, 3.0, gen, dt);
    const Tensor c_prev = uniform({3, 2}, -2.0, 2.0, gen, dt);
    auto [c, h] = lstm_cell(gates, c_prev);
    auto [c32, h32] = lstm_cell(gates.to(DType::f32), c_prev.to(DType::f32));
    CHECK(c.dtype() == dt);
    CHECK(c.to_vector() == c32.to(dt).to_vector());
    CHECK(h.to_vector() == h32.to(dt).to_vector());
    // The backward too: fp32 throughout, one rounding per output.
    const Tensor dc = uniform({3, 2}, -1.0, 1.0, gen, dt), dh = uniform({3, 2}, -1.0, 1.0, gen, dt);
    LstmCellGrads g = lstm_cell_backward(gates, c_prev, dc, dh);
    LstmCellGrads g32 =
        lstm_cell_backward(gates.to(DType::f32), c_prev.to(DType::f32), dc.to(DType::f32), dh.to(DType::f32));
    CHECK(g.d_gates.to_vector() == g32.d_gates.to(dt).to_vector());
    CHECK(g.d_c_prev.to_vector() == g32.d_c_prev.to(dt).to_vector());
  }
}

TEST_CASE("lstm_cell backward matches the formula, dc = 0 leaves only the path through h", "[lstm]") {
  Generator gen(9);
  const Tensor gates = uniform({1, 4}, -1.0, 1.0, gen, DType::f64);  // H = 1
  const Tensor c_prev = from_vector(std::vector<double>{0.3}, {1, 1}, DType::f64);
  const Tensor dh = from_vector(std::vector<double>{0.7}, {1, 1}, DType::f64);
  LstmCellGrads g = lstm_cell_backward(gates, c_prev, zeros({1, 1}, DType::f64), dh);
  const double i = sig(gates.flat_get(0)), f = sig(gates.flat_get(1)), gg = std::tanh(gates.flat_get(2)),
               o = sig(gates.flat_get(3));
  const double tc = std::tanh(f * 0.3 + i * gg);
  const double dct = 0.7 * o * (1 - tc * tc);
  const std::vector<double> want{dct * gg * i * (1 - i), dct * 0.3 * f * (1 - f), dct * i * (1 - gg * gg),
                                 0.7 * tc * o * (1 - o)};
  for (int k = 0; k < 4; ++k) CHECK(g.d_gates.flat_get(k) == Approx(want[size_t(k)]).epsilon(1e-14));
  CHECK(g.d_c_prev.item() == Approx(dct * f).epsilon(1e-14));
}

TEST_CASE("lstm_cell names the op and the shapes on bad input", "[lstm]") {
  CHECK_THROWS_WITH(lstm_cell(zeros({2, 10}), zeros({2, 3})),
                    Contains("lstm_cell: gates f32[2, 10]") && Contains("not divisible by 4"));
  CHECK_THROWS_WITH(lstm_cell(zeros({2, 16}), zeros({2, 3})),
                    Contains("lstm_cell: gates f32[2, 16] must have 4H = 12 columns for c_prev f32[2, 3]"));
  CHECK_THROWS_WITH(lstm_cell(zeros({3, 12}), zeros({2, 3})),
                    Contains("lstm_cell: batch mismatch between gates f32[3, 12] and c_prev f32[2, 3]"));
  CHECK_THROWS_WITH(lstm_cell(zeros({12}), zeros({2, 3})), Contains("lstm_cell") && Contains("f32[12]"));
  CHECK_THROWS_WITH(lstm_cell(zeros({2, 12}), zeros({2, 3}, DType::f16)), Contains("lstm_cell: dtype mismatch"));
  CHECK_THROWS_WITH(lstm_cell_backward(zeros({2, 12}), zeros({2, 3}), zeros({2, 3}), zeros({3, 2})),
                    Contains("lstm_cell backward") && Contains("f32[3, 2]"));
}

TEST_CASE("lstm_cell with saved activations: the same outputs and gradients, bit for bit", "[lstm]") {
  // Note [LSTM cell backward]: the saved i | f | g | o | tanh(c) are the values the backward
  // would recompute, so lstm_cell_backward_saved gives lstm_cell_backward's bits.
  Generator gen(21);
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const int64_t B = 5, H = 37;
    // Pre-activations over [-6, 6] (saturated and linear regions); non-contiguous operands.
    const Tensor gates = uniform({4 * H, B}, -6.0, 6.0, gen, dt).t();
    const Tensor c_prev = uniform({H, B}, -3.0, 3.0, gen, dt).t();
    const Tensor dc = uniform({B, H}, -1.0, 1.0, gen, dt), dh = uniform({H, B}, -1.0, 1.0, gen, dt).t();
    const LstmCellResult<Tensor> plain = lstm_cell(gates, c_prev);
    const LstmCellSaved saved = lstm_cell_saving(gates, c_prev);
    CHECK(saved.acts.dtype() == (dt == DType::f64 ? DType::f64 : DType::f32));
    CHECK(saved.acts.shape() == Shape{B, 5 * H});
    CHECK(saved.c.to_vector() == plain.c.to_vector());
    CHECK(saved.h.to_vector() == plain.h.to_vector());
    // The saved activations are the gate functions of the (widened) gates and tanh of c.
    const Tensor g32 = gates.to(saved.acts.dtype());
    CHECK(saved.acts.narrow(1, 0, H).to_vector() == sigmoid(g32.narrow(1, 0, H)).to_vector());
    CHECK(saved.acts.narrow(1, 2 * H, H).to_vector() == tanh(g32.narrow(1, 2 * H, H)).to_vector());
    const LstmCellGrads want = lstm_cell_backward(gates, c_prev, dc, dh);
    const LstmCellGrads got = lstm_cell_backward_saved(saved.acts, c_prev, dc, dh);
    CHECK(got.d_gates.to_vector() == want.d_gates.to_vector());
    CHECK(got.d_c_prev.to_vector() == want.d_c_prev.to_vector());
  }
  CHECK_THROWS_WITH(
      lstm_cell_backward_saved(zeros({2, 12}), zeros({2, 3}), zeros({2, 3}), zeros({2, 3})),
      Contains("lstm_cell backward: the saved activations must be a contiguous f32[2, 15]") && Contains("f32[2, 12]"));
}

TEST_CASE("lstm_cell backward in fp32 gives the scalar formulas' bits, on every conversion path", "[lstm]") {
  // Note [LSTM cell backward]: i, f, g, o and tanh(c) recomputed by sigmoid and tanh_f32 one element
  // at a time, the gradients by the formulas in the Note's order; the kernel computes the
  // activations a row at a time (vector_math.h).
  Generator gen(23);
  const int64_t B = 6, H = 53;
  const Tensor gates = uniform({B, 4 * H}, -7.0, 7.0, gen, DType::f32);
  const Tensor c_prev = uniform({B, H}, -3.0, 3.0, gen, DType::f32);
  const Tensor dc = uniform({B, H}, -1.0, 1.0, gen, DType::f32), dh = uniform({B, H}, -1.0, 1.0, gen, DType::f32);
  const std::vector<double> g = gates.to_vector(), cp = c_prev.to_vector(), gc = dc.to_vector(), gh = dh.to_vector();
  std::vector<float> want_dg(size_t(B * 4 * H)), want_dcp(size_t(B * H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < H; ++j) {
      auto at = [&](int64_t k) { return float(g[size_t(b * 4 * H + k * H + j)]); };
      const float i = cpu::sigmoid(at(0)), f = cpu::sigmoid(at(1)), gg = cpu::tanh_f32(at(2)), o = cpu::sigmoid(at(3));
      const float c = float(cp[size_t(b * H + j)]), d_c = float(gc[size_t(b * H + j)]),
                  d_h = float(gh[size_t(b * H + j)]);
      const float f_c = f * c, i_g = i * gg, tc = cpu::tanh_f32(f_c + i_g);
      const float dct = d_c + d_h * (o * (1.0f - tc * tc));
      float* dg = want_dg.data() + b * 4 * H;
      dg[j] = dct * (gg * (i * (1.0f - i)));
      dg[H + j] = dct * (c * (f * (1.0f - f)));
      dg[2 * H + j] = dct * (i * (1.0f - gg * gg));
      dg[3 * H + j] = d_h * (tc * (o * (1.0f - o)));
      want_dcp[size_t(b * H + j)] = dct * f;
    }
  auto bits = [](const Tensor& t) {
    std::vector<uint32_t> out;
    for (double v : t.to_vector()) out.push_back(std::bit_cast<uint32_t>(float(v)));
    return out;
  };
  auto bits_of = [](const std::vector<float>& v) {
    std::vector<uint32_t> out;
    for (float x : v) out.push_back(std::bit_cast<uint32_t>(x));
    return out;
  };
  for (const std::string& path : cpu::conversion_paths()) {
    INFO("conversion path " << path);
    const test::ConversionPathScope scope(path);
    const LstmCellGrads got = lstm_cell_backward(gates, c_prev, dc, dh);
    CHECK(bits(got.d_gates) == bits_of(want_dg));
    CHECK(bits(got.d_c_prev) == bits_of(want_dcp));
  }
}

// ---- GRU cell ------------------------------------------------------------------------------

TEST_CASE("gru_cell matches PyTorch's formula written out in f64", "[gru]") {
  const int64_t B = 2, H = 3;
  Generator gen(17);
  const Tensor gx = uniform({B, 3 * H}, -2.0, 2.0, gen, DType::f64);
  const Tensor gh = uniform({B, 3 * H}, -2.0, 2.0, gen, DType::f64);
  const Tensor h_prev = uniform({B, H}, -1.0, 1.0, gen, DType::f64);
  const Tensor h = gru_cell(gx, gh, h_prev);
  REQUIRE(h.shape() == Shape{B, H});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      auto x = [&](int64_t chunk) { return gx.flat_get(b * 3 * H + chunk * H + j); };
      auto y = [&](int64_t chunk) { return gh.flat_get(b * 3 * H + chunk * H + j); };
      const double r = sig(x(0) + y(0)), z = sig(x(1) + y(1)), n = std::tanh(x(2) + r * y(2));
      const double hp = h_prev.flat_get(b * H + j);
      CHECK(h.flat_get(b * H + j) == Approx((1.0 - z) * n + z * hp).epsilon(1e-14).margin(1e-15));
    }
  }
  // Non-contiguous inputs give the same values.
  CHECK(gru_cell(gx.t().contiguous().t(), gh.t().contiguous().t(), h_prev.t().contiguous().t()).to_vector() ==
        h.to_vector());
}

TEST_CASE("gru_cell in 16 bits computes in fp32 and rounds each output once", "[gru]") {
  Generator gen(18);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor gx = uniform({3, 6}, -3.0, 3.0, gen, dt), gh = uniform({3, 6}, -3.0, 3.0, gen, dt);
    const Tensor h_prev = uniform({3, 2}, -1.0, 1.0, gen, dt), dh = uniform({3, 2}, -1.0, 1.0, gen, dt);
    const Tensor h = gru_cell(gx, gh, h_prev);
    CHECK(h.dtype() == dt);
    CHECK(h.to_vector() == gru_cell(gx.to(DType::f32), gh.to(DType::f32), h_prev.to(DType::f32)).to(dt).to_vector());
    GruCellGrads g = gru_cell_backward(gx, gh, h_prev, dh);
    GruCellGrads g32 =
        gru_cell_backward(gx.to(DType::f32), gh.to(DType::f32), h_prev.to(DType::f32), dh.to(DType::f32));
    CHECK(g.d_gx.to_vector() == g32.d_gx.to(dt).to_vector());
    CHECK(g.d_gh.to_vector() == g32.d_gh.to(dt).to_vector());
    CHECK(g.d_h_prev.to_vector() == g32.d_h_prev.to(dt).to_vector());
  }
}

TEST_CASE("gru_cell backward matches the formula; r scales the hidden-side n gradient", "[gru]") {
  const Tensor gx = from_vector(std::vector<double>{0.3, -0.4, 0.5}, {1, 3}, DType::f64);  // H = 1
  const Tensor gh = from_vector(std::vector<double>{-0.2, 0.6, 0.8}, {1, 3}, DType::f64);
  const Tensor h_prev = from_vector(std::vector<double>{0.25}, {1, 1}, DType::f64);
  const Tensor dh = from_vector(std::vector<double>{0.7}, {1, 1}, DType::f64);
  const GruCellGrads g = gru_cell_backward(gx, gh, h_prev, dh);
  const double r = sig(0.1), z = sig(0.2), n = std::tanh(0.5 + r * 0.8);
  const double dn = 0.7 * (1 - z) * (1 - n * n), dz = 0.7 * (0.25 - n) * z * (1 - z), dr = dn * 0.8 * r * (1 - r);
  const std::vector<double> want_x{dr, dz, dn}, want_h{dr, dz, dn * r};
  for (int k = 0; k < 3; ++k) {
    CHECK(g.d_gx.flat_get(k) == Approx(want_x[size_t(k)]).epsilon(1e-14));
    CHECK(g.d_gh.flat_get(k) == Approx(want_h[size_t(k)]).epsilon(1e-14));
  }
  CHECK(g.d_h_prev.item() == Approx(0.7 * z).epsilon(1e-14));
}

TEST_CASE("gru_cell names the op and the shapes on bad input", "[gru]") {
  CHECK_THROWS_WITH(
      gru_cell(zeros({2, 9}), zeros({2, 9}), zeros({3, 3})),
      Contains("gru_cell: gx f32[2, 9] and gh f32[2, 9] must both be [3, 9]") && Contains("h_prev f32[3, 3]"));
  CHECK_THROWS_WITH(gru_cell(zeros({9}), zeros({2, 9}), zeros({2, 3})), Contains("gru_cell") && Contains("f32[9]"));
  CHECK_THROWS_WITH(gru_cell(zeros({2, 9}), zeros({2, 9}, DType::bf16), zeros({2, 3})),
                    Contains("gru_cell: dtype mismatch"));
  CHECK_THROWS_WITH(gru_cell_backward(zeros({2, 9}), zeros({2, 9}), zeros({2, 3}), zeros({3, 2})),
                    Contains("gru_cell backward: dh f32[3, 2] must match h_prev f32[2, 3]"));
}
