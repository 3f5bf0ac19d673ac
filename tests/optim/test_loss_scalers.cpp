// Loss scalers (optim/loss_scaler.h) against hand-computed sequences, and the gradient check
// (check_grads, grad_stats) they read.
#include "support/catch.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixtape.h"
#include "optim/optim.h"

using namespace mixtape;

namespace {

GradCheck clean(double max_abs = 1.0) { return GradCheck{false, max_abs, 1}; }
GradCheck overflow() { return GradCheck{true, 0.0, 1}; }

Variable param_with_grad(const std::vector<double>& g, float scale, DType dt) {
  Variable p(zeros({int64_t(g.size())}, DType::f32), true, "p");
  p.set_grad(ScaledGrad{from_vector(g, {int64_t(g.size())}, dt), scale});
  return p;
}

}  // namespace

TEST_CASE("grad_stats finds inf/NaN and the largest finite |g| in one pass", "[optim][mixed]") {
  SECTION("finite bf16 values, through a strided view") {
    Tensor g = from_vector(std::vector<double>{0.5, -3.0, 0.25, 100.0, -2.0, 7.0}, {2, 3}, DType::bf16);
    const GradStats all = grad_stats(g);
    CHECK_FALSE(all.has_inf_nan);
    CHECK(all.max_abs == 100.0);
    const GradStats col = grad_stats(g.slice(1, 0, 3, 2).t());  // [[0.5, 100], [0.25, 7]]
    CHECK(col.max_abs == 100.0);
    CHECK(grad_stats(g.select(0, 0)).max_abs == 3.0);
  }
  SECTION("inf and NaN in f16 and f32; the max ignores them") {
    const double inf = std::numeric_limits<double>::infinity();
    const GradStats h = grad_stats(from_vector(std::vector<double>{1.0, -inf, 4.0}, {3}, DType::f16));
    CHECK(h.has_inf_nan);
    CHECK(h.max_abs == 4.0);
    const GradStats f = grad_stats(from_vector(std::vector<double>{std::nan(""), -2.5}, {2}, DType::f32));
    CHECK(f.has_inf_nan);
    CHECK(f.max_abs == 2.5);
    const GradStats z = grad_stats(zeros({0}, DType::f32));
    CHECK_FALSE(z.has_inf_nan);
    CHECK(z.max_abs == 0.0);
  }
}

TEST_CASE("grad_stats of a list of tensors equals grad_stats of each", "[optim][mixed]") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor m = from_vector(std::vector<double>{0.5, -3.0, 0.25, 100.0, -2.0, 7.0}, {2, 3}, DType::bf16);
  const std::vector<Tensor> gs = {
      m,
      m.slice(1, 0, 3, 2).t(),
      from_vector(std::vector<double>{1.0, -inf, 4.0}, {3}, DType::f16),
      from_vector(std::vector<double>{std::nan(""), -2.5}, {2}, DType::f32),
      from_vector(std::vector<double>{1e-300, -6.5}, {2}, DType::f64),
      zeros({0}, DType::f32),
      from_vector(std::vector<double>{-0.0, 1e-40, -2e-40}, {3}, DType::f32),
  };
  const std::vector<GradStats> all = grad_stats(gs);
  REQUIRE(all.size() == gs.size());
  for (size_t i = 0; i < gs.size(); ++i) {
    const GradStats one = grad_stats(gs[i]);
    INFO("tensor " << i << " " << gs[i].meta());
    CHECK(all[i].has_inf_nan == one.has_inf_nan);
    CHECK(all[i].max_abs == one.max_abs);
  }
  CHECK(all[1].max_abs == 100.0);
  CHECK(all[2].has_inf_nan);
  CHECK(all[4].max_abs == 6.5);
  CHECK(all[6].max_abs == double(2e-40f));
  CHECK(grad_stats(std::vector<Tensor>{}).empty());
}

TEST_CASE("check_grads divides each parameter's max by its own scale", "[optim][mixed]") {
  Variable a = param_with_grad({16.0, -48.0}, 16.0f, DType::f16);       // true max 3
  Variable b = param_with_grad({1024.0, 5120.0}, 1024.0f, DType::f16);  // true max 5
  Variable none(zeros({2}), true, "no grad");
  GradCheck c = check_grads({a, b, none});
  CHECK_FALSE(c.found_inf);
  CHECK(c.max_abs == 5.0);
  CHECK(c.grads == 2);

  Variable bad = param_with_grad({1.0, std::numeric_limits<double>::infinity()}, 2.0f, DType::f16);
  c = check_grads({a, bad});
  CHECK(c.found_inf);
  CHECK(c.max_abs == 3.0);  // over the finite values

  // A finite gradient whose unscaled value would not fit in fp32 is an overflow too.
  Variable huge = param_with_grad({double(FLT_MAX)}, 0.25f, DType::f32);
  CHECK(check_grads({huge}).found_inf);
}

TEST_CASE("backoff: growth after `interval` clean steps, backoff and reset on inf", "[optim][mixed]") {
  BackoffLossScaler s({.init_scale = 4.0f, .growth_factor = 2.0f, .backoff_factor = 0.25f, .growth_interval = 2});
  CHECK(s.scale() == 4.0f);
  CHECK(s.update(clean()));
  CHECK(s.scale() == 4.0f);
  CHECK(s.growth_tracker() == 1);
  CHECK(s.update(clean()));
  CHECK(s.scale() == 8.0f);
  CHECK(s.growth_tracker() == 0);
  CHECK(s.update(clean()));
  CHECK(s.growth_tracker() == 1);
  CHECK_FALSE(s.update(overflow()));  // skip, 8 * 0.25, and the counter restarts
  CHECK(s.scale() == 2.0f);
  CHECK(s.growth_tracker() == 0);
  CHECK(s.last_skipped());
  CHECK(s.update(clean()));
  CHECK(s.scale() == 2.0f);
  CHECK(s.update(clean()));
  CHECK(s.scale() == 4.0f);
  CHECK(s.steps() == 6);
  CHECK(s.skipped() == 1);
}

TEST_CASE("backoff defaults are GradScaler's plus OpenSeq2Seq's clamps", "[optim][mixed]") {
  BackoffLossScaler s;
  CHECK(s.scale() == 65536.0f);
  CHECK(s.options().growth_factor == 2.0f);
  CHECK(s.options().backoff_factor == 0.5f);
  CHECK(s.options().growth_interval == 2000);
  CHECK(s.options().min_scale == 1.0f);
  CHECK(s.options().max_scale == 16777216.0f);
  for (int i = 0; i < 1999; ++i) s.update(clean());
  CHECK(s.scale() == 65536.0f);
  s.update(clean());
  CHECK(s.scale() == 131072.0f);
}

TEST_CASE("backoff: final scale is 128 * growth^clean * backoff^skipped, within the clamps", "[optim][mixed]") {
  // Interval 1: every clean step grows. The sequence stays inside [1, 2^24], so the closed form holds.
  const std::string seq = "ccicciiiccccicicccii";
  BackoffLossScaler s({.init_scale = 128.0f, .growth_factor = 2.0f, .backoff_factor = 0.5f, .growth_interval = 1});
  int n_clean = 0, n_inf = 0;
  for (char ch : seq) {
    const bool applied = s.update(ch == 'c' ? clean() : overflow());
    CHECK(applied == (ch == 'c'));
    (ch == 'c' ? n_clean : n_inf) += 1;
  }
  CHECK(s.scale() == float(128.0 * std::pow(2.0, n_clean) * std::pow(0.5, n_inf)));  // 128 * 2^12 * 2^-8 = 2048
  CHECK(s.scale() == 2048.0f);
  CHECK(s.skipped() == n_inf);

  // With clamps [4, 512]: 10 infs pin it at 4, then 10 clean steps reach 512 and stay.
  BackoffLossScaler c({.init_scale = 128.0f, .growth_interval = 1, .min_scale = 4.0f, .max_scale = 512.0f});
  for (int i = 0; i < 10; ++i) c.update(overflow());
  CHECK(c.scale() == 4.0f);
  for (int i = 0; i < 3; ++i) c.update(clean());
  CHECK(c.scale() == 32.0f);
  for (int i = 0; i < 10; ++i) c.update(clean());
  CHECK(c.scale() == 512.0f);
}

TEST_CASE("backoff never reaches inf or 0", "[optim][mixed]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float top = std::ldexp(1.0f, 127);
  BackoffLossScaler s({.init_scale = top, .growth_factor = 2.0f, .growth_interval = 1, .max_scale = inf});
  for (int i = 0; i < 20; ++i) CHECK(s.update(clean()));
  CHECK(s.scale() == top);
  CHECK(std::isfinite(s.scale()));

  BackoffLossScaler big_growth({.init_scale = std::ldexp(1.0f, 100),
                                .growth_factor = std::ldexp(1.0f, 40),
                                .growth_interval = 1,
                                .max_scale = inf});
  big_growth.update(clean());  // 2^140 does not exist in fp32: growth is skipped
  CHECK(big_growth.scale() == std::ldexp(1.0f, 100));

  const float bottom = std::ldexp(1.0f, -126);
  BackoffLossScaler low({.init_scale = 1.0f, .backoff_factor = 0.125f, .min_scale = bottom});
  for (int i = 0; i < 100; ++i) CHECK_FALSE(low.update(overflow()));
  CHECK(low.scale() == bottom);
  CHECK(low.scale() > 0.0f);
}

TEST_CASE("loss scalers validate powers of two and clamps", "[optim][mixed]") {
  CHECK_THROWS_WITH(StaticLossScaler(1000.0f), Catch::Contains("power of two"));
  CHECK_THROWS_WITH(BackoffLossScaler({.init_scale = 3.0f}), Catch::Contains("init_scale"));
  CHECK_THROWS_WITH(BackoffLossScaler({.growth_factor = 1.5f}), Catch::Contains("growth_factor"));
  CHECK_THROWS_WITH(BackoffLossScaler({.backoff_factor = 2.0f}), Catch::Contains("backoff_factor"));
  CHECK_THROWS_WITH(BackoffLossScaler({.growth_interval = 0}), Catch::Contains("growth_interval"));
  CHECK_THROWS_WITH(BackoffLossScaler({.init_scale = 65536.0f, .max_scale = 1024.0f}),
                    Catch::Contains("outside [min_scale, max_scale]"));
  CHECK_THROWS_WITH(LogMaxLossScaler({.beta1 = 1.0}), Catch::Contains("beta1"));
  CHECK_THROWS_WITH(LogMaxLossScaler({.min_scale = 0.0f}), Catch::Contains("min_scale"));
}

TEST_CASE("static and no loss scaling", "[optim][mixed]") {
  StaticLossScaler s(1024.0f);
  CHECK(s.update(clean()));
  CHECK_FALSE(s.update(overflow()));  // skipped, scale unchanged
  CHECK(s.scale() == 1024.0f);
  CHECK(s.skipped() == 1);
  NoLossScaler n;
  CHECK(n.scale() == 1.0f);
  CHECK(n.update(overflow()));  // training without a scaler applies every step
  CHECK(n.skipped() == 0);
}

TEST_CASE("LogMax follows the running log2-max statistics computed by hand", "[optim][mixed]") {
  // x_t = log2 max|g| = -4, -2, -6, -3; then an overflow at scale 2^15 feeds x = 16 - 15 = 1.
  // Expected values from the formulas in loss_scaler.h evaluated in double (Python):
  //   t  mu                     sigma                 16 - (mu + 3.09 sigma)  scale
  //   1  -4                     0                     20                      2^20
  //   2  -2.9949748743718576    0.999999874874841     15.9049752610086        2^15
  //   3  -4.006733780007414     1.633401358855166     14.9595235811450        2^14
  //   4  -3.75124346544601      1.4791675918081577    15.1806156067588        2^15
  //   5  -2.781798800484799     2.316264310028327     11.6245420824973        2^11
  LogMaxLossScaler s;
  CHECK(s.scale() == 1.0f);
  struct Row {
    double max_abs;
    double mu, sigma;
    int exp;
  };
  const std::vector<Row> rows = {{0.0625, -4.0, 0.0, 20},
                                 {0.25, -2.9949748743718576, 0.999999874874841, 15},
                                 {0.015625, -4.006733780007414, 1.633401358855166, 14},
                                 {0.125, -3.75124346544601, 1.4791675918081577, 15}};
  for (const Row& r : rows) {
    INFO("max |g| = " << r.max_abs);
    CHECK(s.update(clean(r.max_abs)));
    CHECK(s.mu() == Approx(r.mu).epsilon(1e-12));
    CHECK(s.sigma() == Approx(r.sigma).epsilon(1e-12).margin(1e-12));
    CHECK(s.scale() == std::ldexp(1.0f, r.exp));
  }
  CHECK_FALSE(s.update(overflow()));
  CHECK(s.mu() == Approx(-2.781798800484799).epsilon(1e-12));
  CHECK(s.sigma() == Approx(2.316264310028327).epsilon(1e-12));
  CHECK(s.scale() == std::ldexp(1.0f, 11));
  CHECK(s.iteration() == 5);

  // All-zero gradients carry no information: nothing moves, the step applies.
  CHECK(s.update(clean(0.0)));
  CHECK(s.iteration() == 5);
  CHECK(s.scale() == std::ldexp(1.0f, 11));
}

TEST_CASE("LogMax clamps to min_scale and max_scale", "[optim][mixed]") {
  LogMaxLossScaler s;
  s.update(clean(std::ldexp(1.0, -20)));  // 2^(16 + 20) -> 2^24
  CHECK(s.scale() == 16777216.0f);
  LogMaxLossScaler t;
  t.update(clean(std::ldexp(1.0, 30)));  // 2^(16 - 30) -> 1
  CHECK(t.scale() == 1.0f);
}

TEST_CASE("loss scaler state dicts resume the same sequence", "[optim][mixed]") {
  const std::string seq = "cciccccicc";
  SECTION("backoff") {
    BackoffLossScaler a({.init_scale = 256.0f, .growth_interval = 3});
    for (size_t i = 0; i < 5; ++i) a.update(seq[i] == 'c' ? clean() : overflow());
    BackoffLossScaler b;
    b.load_state_dict(a.state_dict());
    CHECK(b.scale() == a.scale());
    CHECK(b.growth_tracker() == a.growth_tracker());
    CHECK(b.options().growth_interval == 3);
    CHECK(b.skipped() == a.skipped());
    for (size_t i = 5; i < seq.size(); ++i) {
      const GradCheck c = seq[i] == 'c' ? clean() : overflow();
      CHECK(a.update(c) == b.update(c));
      CHECK(a.scale() == b.scale());
    }
  }
  SECTION("logmax") {
    LogMaxLossScaler a;
    for (int i = 0; i < 4; ++i) a.update(clean(std::ldexp(1.0, -i)));
    LogMaxLossScaler b;
    b.load_state_dict(a.state_dict());
    CHECK(b.mu() == a.mu());
    CHECK(b.sigma() == a.sigma());
    for (int i = 0; i < 4; ++i) {
      a.update(clean(std::ldexp(3.0, -2 * i)));
      b.update(clean(std::ldexp(3.0, -2 * i)));
      CHECK(a.scale() == b.scale());
    }
  }
  SECTION("mismatches are rejected without changes") {
    BackoffLossScaler a;
    LogMaxLossScaler l;
    CHECK_THROWS_WITH(l.load_state_dict(a.state_dict()), Catch::Contains("'backoff'"));
    TensorDict d = a.state_dict();
    d.set_meta("scale", "3");
    CHECK_THROWS_WITH(a.load_state_dict(d), Catch::Contains("power of two"));
    d = a.state_dict();
    d.set_meta("growth_tracker", "5000");
    CHECK_THROWS_WITH(a.load_state_dict(d), Catch::Contains("growth_tracker"));
    CHECK(a.scale() == 65536.0f);
  }
}
