// Pure 16-bit update rules (optim/pure16.h; kernels sgd16_update_ / adamw16_update_ /
// rmsprop16_update_ / adagrad16_update_): values by hand, stochastic rounding's unbiasedness,
// Kahan summation against an f64 sum, the bf16 beta2 rule, the paper's halting effect of
// nearest rounding on a quadratic, and the stochastic rounding words of the CPU kernels against
// a direct evaluation of the formulas on every conversion path and thread count.
#include "support/catch.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtape.h"
#include "optim/optim.h"
#include "tensor/core/half.h"
#include "tensor/core/rng.h"
#include "tensor/core/update_formulas.h"
#include "tensor/cpu/convert.h"
#include "tensor/threads.h"

using namespace mixtape;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> b(size_t(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

Tensor f32(const std::vector<double>& v) { return from_vector(v, {int64_t(v.size())}, DType::f32); }

double mean_of(const Tensor& t) {
  double s = 0.0;
  for (double v : t.to_vector()) s += v;
  return s / double(t.numel());
}

}  // namespace

TEST_CASE("decay rates are rounded to the 16-bit format, 0.999 becomes the largest value below 1 in bf16",
          "[optim][pure16]") {
  const DecayRate16 b = decay_rate_16(0.999, DType::bf16);
  CHECK(b.adjusted);
  CHECK(b.value == 0.99609375);  // 1 - 2^-8; the paper's "0.997" rounds to this in bf16
  CHECK(decay_rate_16(0.997, DType::bf16).value == 0.99609375);
  const DecayRate16 h = decay_rate_16(0.999, DType::f16);
  CHECK_FALSE(h.adjusted);
  CHECK(h.value == 0.9990234375);
  CHECK(decay_rate_16(0.9999, DType::f16).value == 1.0 - std::ldexp(1.0, -11));
  CHECK(decay_rate_16(0.9, DType::bf16).value == 0.8984375);
  CHECK_FALSE(decay_rate_16(0.9, DType::bf16).adjusted);
  CHECK(decay_rate_16(0.0, DType::bf16).value == 0.0);

  Variable p(ones({3}, DType::bf16), true, "p");
  AdamW opt({p});  // default beta2 = 0.999
  REQUIRE(opt.warnings().size() == 1);
  CHECK_THAT(opt.warnings()[0], Catch::Contains("beta2") && Catch::Contains("0.99609375"));
  Variable q(ones({3}, DType::f16), true, "q");
  AdamW opt16({q});
  REQUIRE(opt16.warnings().size() == 1);
  CHECK_THAT(opt16.warnings()[0], Catch::Contains("exp_avg_sq in f16"));
  SGD sgd({p}, {.momentum = 0.999});
  CHECK(sgd.warnings().size() == 1);
  SGD sgd_ok({p}, {.momentum = 0.9});
  CHECK(sgd_ok.warnings().empty());
}

TEST_CASE("sgd16_update_ with nearest rounding, by hand", "[optim][pure16]") {
  // bf16 weights; every value below is exact in bf16, so the two steps are exact:
  //   step 1: m = g;            w -= 0.25 m
  //   step 2: m = 0.5 m + g;    w -= 0.25 m
  Tensor w = from_vector(std::vector<double>{1.0, -2.0, 0.5, 3.0}, {4}, DType::bf16);
  Tensor m = zeros({4}, DType::bf16);
  Tensor none;
  const Tensor g = f32({0.5, 0.25, -1.0, 2.0});
  sgd16_update_(w, g, m, none, 0.25, 0.5, 0.0, Rounding::nearest, 0, 0);
  CHECK(w.to_vector() == std::vector<double>{0.875, -2.0625, 0.75, 2.5});
  CHECK(m.to_vector() == std::vector<double>{0.5, 0.25, -1.0, 2.0});
  sgd16_update_(w, g, m, none, 0.25, 0.5, 0.0, Rounding::nearest, 0, 0);
  CHECK(m.to_vector() == std::vector<double>{0.75, 0.375, -1.5, 3.0});
  CHECK(w.to_vector() == std::vector<double>{0.6875, -2.15625, 1.125, 1.75});

  // Weight decay joins the gradient: w = 1, g = 0, wd = 0.5, lr = 0.5: w -= 0.25.
  Tensor w2 = ones({1}, DType::bf16);
  sgd16_update_(w2, f32({0.0}), none, none, 0.5, 0.0, 0.5, Rounding::nearest, 0, 0);
  CHECK(w2.item() == 0.75);

  // An update below half an ulp is lost: 1 - 1e-3 rounds back to 1 (ulp below 1 is 2^-8).
  Tensor w3 = ones({1}, DType::bf16);
  sgd16_update_(w3, f32({1e-3}), none, none, 1.0, 0.0, 0.0, Rounding::nearest, 0, 0);
  CHECK(w3.item() == 1.0);
}

TEST_CASE("adamw16_update_ follows Algorithm 4 line by line", "[optim][pure16]") {
  // w = 1, g = 0.5, beta1 = 0.5, beta2 = 0.75, eps = 0, lr = 2^-6, wd = 0.5 (all exact):
  //   m = 0.25, v = 0.0625, m_hat = 0.25 / 0.5 = 0.5, v_hat = sqrt(0.0625 / 0.25) = 0.5
  //   u = -(2^-6 * 0.5 / 0.5 + 2^-6 * 0.5 * 1) = -0.0234375,  w = 0.9765625 (exact in bf16)
  Tensor w = ones({1}, DType::bf16);
  Tensor m = zeros({1}, DType::bf16), v = zeros({1}, DType::bf16), none;
  adamw16_update_(w, f32({0.5}), m, v, none, 0.015625, 0.5, 0.75, 0.0, 0.5, 1, Rounding::nearest, 0, 0);
  CHECK(m.item() == 0.25);
  CHECK(v.item() == 0.0625);
  CHECK(w.item() == 0.9765625);

  // The same step in fp32 arithmetic (AdamW on an f32 copy) lands on the same value.
  Tensor wf = ones({1}), mf = zeros({1}), vf = zeros({1});
  adam_update_(wf, f32({0.5}), mf, vf, 0.015625, 0.5, 0.75, 0.0, 0.5, true, 1);
  CHECK(wf.item() == 0.9765625);
}

TEST_CASE("AdamW16 in bf16 runs with beta2 = 0.99609375 instead of 0.999", "[optim][pure16]") {
  Variable p(from_vector(std::vector<double>{1.0, -0.5, 0.25}, {3}, DType::bf16), true, "p");
  AdamW opt({p}, {.lr = 0.01, .rounding = UpdateRounding::nearest});
  Tensor w = p.data().clone(), m = zeros({3}, DType::bf16), v = zeros({3}, DType::bf16), none;
  const std::vector<std::vector<double>> gs = {{0.5, -0.25, 1.0}, {-0.125, 0.5, 0.75}, {0.25, 0.25, -2.0}};
  for (size_t t = 0; t < gs.size(); ++t) {
    p.set_grad(ScaledGrad{from_vector(gs[t], {3}, DType::bf16), 1.0f});
    opt.step();
    adamw16_update_(w, f32(gs[t]), m, v, none, 0.01, 0.8984375, 0.99609375, 1e-8, 1e-2, int64_t(t) + 1,
                    Rounding::nearest, 0, 0);
    CHECK(bytes_of(p.data()) == bytes_of(w));
  }
  const TensorDict sd = opt.state_dict();
  CHECK(bytes_of(sd.at("state.0.exp_avg_sq")) == bytes_of(v));
  CHECK(sd.at("state.0.exp_avg").dtype() == DType::bf16);
}

TEST_CASE("stochastic rounding of weight updates is unbiased", "[optim][pure16]") {
  // 65536 weights at 1.0, each moved by -u with u well below half an ulp: nearest rounding
  // keeps every weight at 1.0, stochastic rounding moves a fraction u / ulp of them by an ulp,
  // so the mean tracks 1 - t u. Standard error of the mean after one step: ulp sqrt(p (1 - p)) /
  // 256 ~ 2.4e-6 (bf16), checked at 1.5e-5; after 20 steps ~ 1e-5, checked at 6e-5.
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    const int64_t n = 65536;
    const double u = dt == DType::bf16 ? 1e-4 : 1e-5;
    const Tensor g = full({n}, 1.0, DType::f32);
    Tensor none;
    Tensor w_sr = ones({n}, dt), w_rn = ones({n}, dt);
    Generator gen(1234);
    sgd16_update_(w_sr, g, none, none, u, 0.0, 0.0, Rounding::stochastic, gen.seed(), gen.advance(n));
    sgd16_update_(w_rn, g, none, none, u, 0.0, 0.0, Rounding::nearest, 0, 0);
    CHECK(mean_of(w_rn) == 1.0);
    CHECK(std::abs(mean_of(w_sr) - (1.0 - u)) < 1.5e-5 * (dt == DType::bf16 ? 1.0 : 0.125));
    for (int t = 1; t < 20; ++t)
      sgd16_update_(w_sr, g, none, none, u, 0.0, 0.0, Rounding::stochastic, gen.seed(), gen.advance(n));
    CHECK(std::abs(mean_of(w_sr) - (1.0 - 20 * u)) < 6e-5 * (dt == DType::bf16 ? 1.0 : 0.125));
  }

  // Counter-based: the same (seed, offset) gives the same bits, another offset other bits.
  const Tensor g = full({4096}, 1.0, DType::f32);
  Tensor none, a = ones({4096}, DType::bf16), b = ones({4096}, DType::bf16), c = ones({4096}, DType::bf16);
  sgd16_update_(a, g, none, none, 1e-3, 0.0, 0.0, Rounding::stochastic, 7, 100);
  sgd16_update_(b, g, none, none, 1e-3, 0.0, 0.0, Rounding::stochastic, 7, 100);
  sgd16_update_(c, g, none, none, 1e-3, 0.0, 0.0, Rounding::stochastic, 7, 100 + 4096);
  CHECK(bytes_of(a) == bytes_of(b));
  CHECK(bytes_of(a) != bytes_of(c));
}

TEST_CASE("Kahan summation keeps 10^6 updates that nearest rounding drops", "[optim][pure16]") {
  // One bf16 weight at 1.0 receives 10^6 updates u_t = -5e-7 + 1e-4 r_t, r_t uniform in [-1, 1)
  // (Philox), each below half an ulp of 1 in bf16 (2^-9 = 1.95e-3): the "standard" nearest rule
  // never moves; Kahan's 16-bit compensation carries the lost parts, and the weight ends within
  // a few bf16 ulps (2^-9 near 0.5) of the f64 sum of the updates.
  const int64_t n_steps = 1000000;
  Generator gen(2024);
  const Tensor r = uniform({n_steps}, -1.0, 1.0, gen, DType::f32);
  const float* rv = r.data<float>();
  Tensor none, mom;
  Tensor w_k = ones({1}, DType::bf16), c = zeros({1}, DType::bf16), w_n = ones({1}, DType::bf16);
  Tensor g = zeros({1}, DType::f32);
  float* gp = g.data<float>();
  double exact = 1.0;
  for (int64_t t = 0; t < n_steps; ++t) {
    const float u = float(-5e-7 + 1e-4 * double(rv[t]));
    gp[0] = -u;  // lr = 1: w += u
    exact += double(u);
    sgd16_update_(w_k, g, mom, c, 1.0, 0.0, 0.0, Rounding::nearest, 0, 0);
    sgd16_update_(w_n, g, mom, none, 1.0, 0.0, 0.0, Rounding::nearest, 0, 0);
  }
  std::printf(
      "[pure16] bf16 weight 1.0 after 1e6 updates of mean -5e-7 (|u| <= 1.005e-4): f64 sum %.6f, "
      "Kahan %.6f (c = %.3g), nearest %.6f\n",
      exact, w_k.item(), c.item(), w_n.item());
  CHECK(w_n.item() == 1.0);
  CHECK(std::abs(w_k.item() - exact) < 0.01);  // ~5 ulps at 0.5; nearest is off by 0.49
  CHECK(std::abs(exact - 1.0) > 0.4);

  // Kahan's limit in 16 bits (Note [16-bit update rules]): c holds 8 significant bits, so
  // updates below ulp(c) / 2 ~ ulp(w) 2^-9 stall in c as well. The same constant update of 1e-4
  // carries a weight from 1.0 to the f64 value 2.0 in 10^4 steps, but over 10^6 steps (f64: 101)
  // the weight outgrows that regime near 16, where ulp(16) 2^-9 = 2^-13 > 2 * 1e-4.
  Tensor w_a = ones({1}, DType::bf16), c_a = zeros({1}, DType::bf16);
  gp[0] = -1e-4f;
  double exact_a = 1.0;
  double at_1e4 = 0.0;
  for (int64_t t = 1; t <= n_steps; ++t) {
    sgd16_update_(w_a, g, mom, c_a, 1.0, 0.0, 0.0, Rounding::nearest, 0, 0);
    exact_a += double(1e-4f);
    if (t == 10000) at_1e4 = w_a.item();
  }
  std::printf(
      "[pure16] bf16 weight 1.0 plus 1e-4 per step: after 1e4 steps f64 %.6f, Kahan %.6f; "
      "after 1e6 steps f64 %.4f, Kahan %.4f (stalled)\n",
      1.0 + 10000 * double(1e-4f), at_1e4, exact_a, w_a.item());
  CHECK(std::abs(at_1e4 - (1.0 + 10000 * double(1e-4f))) < 0.07);  // 2 + a few ulps (2^-7)
  CHECK(w_a.item() < 0.5 * exact_a);
}

TEST_CASE("nearest rounding halts SGD far from the optimum, stochastic rounding and Kahan reach it",
          "[optim][pure16]") {
  // Zamirai et al., Theorem 1: minimize 0.5 |w - w*|^2 with w* in [1, 2) (bf16 ulp 2^-7) from
  // w = 0 by SGD with lr 0.01. With nearest rounding an update lr |w - w*| below half an ulp
  // (2^-8) is lost, so the weights stop at |w - w*| ~ 0.39; stochastic rounding and Kahan
  // summation keep going down to the format's resolution.
  const int64_t n = 256;
  Generator gen(5);
  const Tensor target = uniform({n}, 1.0, 2.0, gen, DType::f32);
  auto distance = [&](UpdateRounding rounding) {
    Variable w(zeros({n}, DType::bf16), true, "w");
    SGD opt({w}, {.lr = 0.01, .rounding = rounding, .seed = 11});
    for (int t = 0; t < 800; ++t) {
      w.set_grad(ScaledGrad{w.data().to(DType::f32) - target, 1.0f});
      opt.step();
    }
    return mean_of(abs(w.data().to(DType::f32) - target));
  };
  const double d_near = distance(UpdateRounding::nearest);
  const double d_sr = distance(UpdateRounding::stochastic);
  const double d_kahan = distance(UpdateRounding::kahan);
  std::printf("[pure16] mean |w - w*| after 800 bf16 SGD steps: nearest %.4f, stochastic %.4f, Kahan %.4f\n", d_near,
              d_sr, d_kahan);
  CHECK(d_near > 0.1);
  CHECK(d_sr < 0.02);
  CHECK(d_kahan < 0.01);
}

TEST_CASE("SGD16 and AdamW16 keep 16-bit state and resume from their state dicts", "[optim][pure16]") {
  const std::vector<std::vector<double>> gs = {
      {0.5, -0.25, 1.0}, {-0.125, 0.5, 0.75}, {0.25, 0.25, -2.0}, {1.0, -1.0, 0.5}};
  auto param = [] { return Variable(from_vector(std::vector<double>{1.0, -0.5, 0.25}, {3}, DType::bf16), true); };
  auto set = [](Variable& p, const std::vector<double>& g) {
    p.set_grad(ScaledGrad{from_vector(g, {3}, DType::bf16), 1.0f});
  };
  SECTION("SGD16, Kahan with momentum") {
    Variable a = param(), b = param();
    SGD oa({a}, {.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01, .rounding = UpdateRounding::kahan});
    SGD ob({b}, {.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01, .rounding = UpdateRounding::kahan});
    for (size_t t = 0; t < 2; ++t) {
      set(a, gs[t]);
      oa.step();
    }
    const TensorDict sd = oa.state_dict();
    CHECK(sd.at("state.0.momentum_buffer").dtype() == DType::bf16);
    CHECK(sd.at("state.0.kahan_comp").dtype() == DType::bf16);
    ob.load_state_dict(sd);
    Tensor bd = b.data();
    bd.copy_(a.data());
    for (size_t t = 2; t < 4; ++t) {
      set(a, gs[t]);
      set(b, gs[t]);
      oa.step();
      ob.step();
      CHECK(bytes_of(a.data()) == bytes_of(b.data()));
    }
  }
  SECTION("AdamW16, stochastic: the Philox position is part of the state") {
    Variable a = param(), b = param();
    AdamW oa({a}, {.lr = 0.01, .beta2 = 0.99, .seed = 3});
    AdamW ob({b}, {.lr = 0.01, .beta2 = 0.99, .seed = 999});
    for (size_t t = 0; t < 2; ++t) {
      set(a, gs[t]);
      oa.step();
    }
    CHECK(oa.generator().offset() == 6);  // 3 counters per step
    ob.load_state_dict(oa.state_dict());
    CHECK(ob.generator().seed() == 3);
    CHECK(ob.generator().offset() == 6);
    Tensor bd = b.data();
    bd.copy_(a.data());
    for (size_t t = 2; t < 4; ++t) {
      set(a, gs[t]);
      set(b, gs[t]);
      oa.step();
      ob.step();
      CHECK(bytes_of(a.data()) == bytes_of(b.data()));
    }
  }
}

TEST_CASE("rmsprop16_update_ and adagrad16_update_ with nearest rounding round each stored value once",
          "[optim][pure16]") {
  // The reference: the fp32 formula written out here, each stored value rounded to bf16 once
  // (round_to_bf16) and read back as stored; three steps, every option on.
  auto rn = [](float x) { return to_float(round_to_bf16(x)); };
  const std::vector<std::vector<double>> gs = {{0.3, -0.7, 1.1}, {-0.2, 0.9, 0.05}, {0.6, 0.1, -1.3}};
  const std::vector<double> w0 = {1.0, -0.5, 0.25};
  SECTION("RMSprop16, centered with momentum and weight decay") {
    const float lr = 0.01f, alpha = 0.75f, eps = 1e-6f, wd = 0.125f, mom = 0.5f;
    Tensor w = from_vector(w0, {3}, DType::bf16), sq = zeros({3}, DType::bf16), ga = zeros({3}, DType::bf16);
    Tensor b = zeros({3}, DType::bf16), none;
    std::vector<float> rw, rsq(3, 0.0f), rga(3, 0.0f), rb(3, 0.0f);
    for (double v : w0) rw.push_back(rn(float(v)));
    for (size_t t = 0; t < gs.size(); ++t) {
      rmsprop16_update_(w, f32(gs[t]), sq, ga, b, none, lr, alpha, eps, wd, mom, true, Rounding::nearest, 0, 0);
      for (size_t i = 0; i < 3; ++i) {
        const float d = float(gs[t][i]) + wd * rw[i];
        rsq[i] = rn(alpha * rsq[i] + (1.0f - alpha) * (d * d));
        const float w1 = 1.0f - alpha;  // < 0.5: torch.lerp's a + w (b - a)
        rga[i] = rn(rga[i] + w1 * (d - rga[i]));
        const float var = rsq[i] - rga[i] * rga[i];
        const float avg = std::sqrt(var > 0.0f ? var : 0.0f) + eps;
        rb[i] = rn(mom * rb[i] + d / avg);
        rw[i] = rn(rw[i] + -lr * rb[i]);
      }
      INFO("step " << t + 1);
      CHECK(w.to_vector() == std::vector<double>(rw.begin(), rw.end()));
      CHECK(sq.to_vector() == std::vector<double>(rsq.begin(), rsq.end()));
      CHECK(ga.to_vector() == std::vector<double>(rga.begin(), rga.end()));
      CHECK(b.to_vector() == std::vector<double>(rb.begin(), rb.end()));
    }
  }
  SECTION("Adagrad16 with lr decay, weight decay and an initial accumulator") {
    const float wd = 0.125f, eps = 1e-6f;
    Tensor w = from_vector(w0, {3}, DType::bf16), sum = full({3}, 0.1, DType::bf16), none;
    std::vector<float> rw, rs(3, rn(0.1f));
    for (double v : w0) rw.push_back(rn(float(v)));
    for (size_t t = 0; t < gs.size(); ++t) {
      adagrad16_update_(w, f32(gs[t]), sum, none, 0.05, 0.5, eps, wd, int64_t(t) + 1, Rounding::nearest, 0, 0);
      const float neg_clr = float(-(0.05 / (1.0 + double(t) * 0.5)));
      for (size_t i = 0; i < 3; ++i) {
        const float d = float(gs[t][i]) + wd * rw[i];
        rs[i] = rn(rs[i] + d * d);
        rw[i] = rn(rw[i] + neg_clr * (d / (std::sqrt(rs[i]) + eps)));
      }
      INFO("step " << t + 1);
      CHECK(w.to_vector() == std::vector<double>(rw.begin(), rw.end()));
      CHECK(sum.to_vector() == std::vector<double>(rs.begin(), rs.end()));
    }
  }
  SECTION("AdamW16 with amsgrad keeps the largest stored v and divides by it") {
    // beta2 = 0.5 and a gradient that falls from 1 to 0.25: v falls, its maximum holds.
    Tensor w = ones({1}, DType::bf16), m = zeros({1}, DType::bf16), v = zeros({1}, DType::bf16);
    Tensor vmax = zeros({1}, DType::bf16), none;
    Tensor w2 = ones({1}, DType::bf16), m2 = zeros({1}, DType::bf16), v2 = zeros({1}, DType::bf16);
    const std::vector<double> g = {1.0, 0.25};
    for (size_t t = 0; t < g.size(); ++t) {
      adamw16_update_(w, f32({g[t]}), m, v, none, 0.015625, 0.5, 0.5, 0.0, 0.0, int64_t(t) + 1, Rounding::nearest, 0, 0,
                      &vmax);
      adamw16_update_(w2, f32({g[t]}), m2, v2, none, 0.015625, 0.5, 0.5, 0.0, 0.0, int64_t(t) + 1, Rounding::nearest, 0,
                      0);
    }
    CHECK(v.item() == 0.28125);  // 0.5 * 0.5 + 0.5 * 0.0625
    CHECK(vmax.item() == 0.5);   // step 1's v
    CHECK(m.item() == m2.item());
    CHECK(w.item() != w2.item());  // a larger denominator, a smaller step
    CHECK(w.item() > w2.item());
  }
}

TEST_CASE("stochastic rounding of RMSprop16 and Adagrad16 updates is unbiased", "[optim][pure16]") {
  // 65536 bf16 weights at 1.0 and g = 1. RMSprop with alpha 0.5: square_avg = 0.5 (exact),
  // u = -lr / (sqrt(0.5) + eps); Adagrad: sum = 1, u = -lr / (1 + eps). |u| ~ 1e-4 is far below
  // half an ulp (2^-9): nearest keeps every weight, stochastic rounding moves the mean by u
  // (standard error ~ 2.4e-6 per step, as for SGD).
  const int64_t n = 65536;
  const Tensor g = full({n}, 1.0, DType::f32);
  const double lr = 1e-4;
  const double u_rms = -double(float(lr) * (1.0f / (std::sqrt(0.5f) + 1e-8f)));
  const double u_ada = -double(float(lr) * (1.0f / (1.0f + 1e-10f)));
  for (Rounding r : {Rounding::stochastic, Rounding::nearest}) {
    Tensor none;
    Tensor w = ones({n}, DType::bf16), sq = zeros({n}, DType::bf16);
    Tensor q = ones({n}, DType::bf16), sum = zeros({n}, DType::bf16);
    Generator gen(77);
    for (int t = 0; t < 10; ++t) {
      Tensor sq_t = zeros({n}, DType::bf16), sum_t = zeros({n}, DType::bf16);  // the first step's state each time
      rmsprop16_update_(w, g, sq_t, none, none, none, lr, 0.5, 1e-8, 0.0, 0.0, false, r, gen.seed(), gen.advance(n));
      adagrad16_update_(q, g, sum_t, none, lr, 0.0, 1e-10, 0.0, 1, r, gen.seed(), gen.advance(n));
    }
    if (r == Rounding::nearest) {
      CHECK(mean_of(w) == 1.0);
      CHECK(mean_of(q) == 1.0);
    } else {
      CHECK(std::abs(mean_of(w) - (1.0 + 10 * u_rms)) < 3e-5);
      CHECK(std::abs(mean_of(q) - (1.0 + 10 * u_ada)) < 3e-5);
      CHECK(mean_of(w) < 1.0 - 5 * lr);
    }
  }
}

TEST_CASE("Kahan summation keeps the small RMSprop16 and Adagrad16 updates that nearest rounding loses",
          "[optim][pure16]") {
  // One weight at 1.0, g = 1 for 1000 steps, every update below half an ulp: nearest never moves;
  // Kahan tracks the same rule run on an f32 weight (fp32 state) within a few ulps.
  const int steps = 1000;
  auto run = [&](DType dt, bool adagrad, int rule) {  // rule 0: nearest, 1: Kahan, 2: the f32 reference
    Tensor w = ones({1}, rule == 2 ? DType::f32 : dt), s = zeros({1}, w.dtype()), c = zeros({1}, w.dtype()), none;
    const Tensor g = f32({1.0});
    for (int t = 1; t <= steps; ++t) {
      if (rule == 2 && adagrad) adagrad_update_(w, g, s, 2e-4, 0.0, 1e-10, 0.0, t);
      else if (rule == 2) rmsprop_update_(w, g, s, none, none, 1e-4, 0.5, 1e-8, 0.0, 0.0, false);
      else if (adagrad)
        adagrad16_update_(w, g, s, rule == 1 ? c : none, 2e-4, 0.0, 1e-10, 0.0, t, Rounding::nearest, 0, 0);
      else
        rmsprop16_update_(w, g, s, none, none, rule == 1 ? c : none, 1e-4, 0.5, 1e-8, 0.0, 0.0, false,
                          Rounding::nearest, 0, 0);
    }
    return w.item();
  };
  // RMSprop in bf16 (ulp 2^-8 below 1): steps of ~1e-4 over 1000 steps move the weight by ~0.1.
  const double rms_ref = run(DType::bf16, false, 2);
  CHECK(run(DType::bf16, false, 0) == 1.0);
  CHECK(std::abs(run(DType::bf16, false, 1) - rms_ref) < 0.01);
  CHECK(rms_ref < 0.91);
  // Adagrad in f16 (its sum of 1000 squares is exact there; in bf16 it would stall at 256):
  // steps 2e-4 / sqrt(t), below half an ulp below 1 (2^-12), add up to ~0.0124.
  const double ada_ref = run(DType::f16, true, 2);
  CHECK(run(DType::f16, true, 0) == 1.0);
  CHECK(std::abs(run(DType::f16, true, 1) - ada_ref) < 0.003);
  CHECK(ada_ref < 0.99);
}

TEST_CASE("RMSprop16, Adagrad16 and AdamW16 with amsgrad resume from their state dicts", "[optim][pure16]") {
  const std::vector<std::vector<double>> gs = {
      {0.5, -0.25, 1.0}, {-0.125, 0.5, 0.75}, {0.25, 0.25, -2.0}, {1.0, -1.0, 0.5}};
  auto param = [] { return Variable(from_vector(std::vector<double>{1.0, -0.5, 0.25}, {3}, DType::bf16), true); };
  auto set = [](Variable& p, const std::vector<double>& g) {
    p.set_grad(ScaledGrad{from_vector(g, {3}, DType::bf16), 1.0f});
  };
  auto check_resume =
      [&](Optimizer& oa, Optimizer& ob, Variable& a, Variable& b, const std::vector<std::string>& buffers) {
    for (size_t t = 0; t < 2; ++t) {
      set(a, gs[t]);
      oa.step();
    }
    const TensorDict sd = oa.state_dict();
    for (const std::string& name : buffers) {
      INFO(name);
      CHECK(sd.at("state.0." + name).dtype() == DType::bf16);
    }
    ob.load_state_dict(sd);
    Tensor bd = b.data();
    bd.copy_(a.data());
    for (size_t t = 2; t < 4; ++t) {
      set(a, gs[t]);
      set(b, gs[t]);
      oa.step();
      ob.step();
      CHECK(bytes_of(a.data()) == bytes_of(b.data()));
    }
  };
  SECTION("RMSprop16, Kahan, centered with momentum") {
    Variable a = param(), b = param();
    const RMSpropOptions o{.lr = 0.01, .momentum = 0.9, .centered = true, .rounding = UpdateRounding::kahan};
    RMSprop oa({a}, o), ob({b}, {.lr = 0.5});
    check_resume(oa, ob, a, b, {"square_avg", "momentum_buffer", "grad_avg", "kahan_comp"});
    CHECK(ob.options().centered);
  }
  SECTION("Adagrad16, stochastic: the Philox position is part of the state") {
    Variable a = param(), b = param();
    Adagrad oa({a}, {.lr = 0.01, .initial_accumulator_value = 0.1, .seed = 3});
    Adagrad ob({b}, {.lr = 0.01, .seed = 999});
    check_resume(oa, ob, a, b, {"sum"});
    CHECK(ob.generator().offset() == oa.generator().offset());
    CHECK(ob.options().initial_accumulator_value == 0.1);
  }
  SECTION("AdamW16 with amsgrad, stochastic") {
    Variable a = param(), b = param();
    AdamW oa({a}, {.lr = 0.01, .beta2 = 0.5, .amsgrad = true, .seed = 3});
    AdamW ob({b}, {.lr = 0.01, .beta2 = 0.5, .seed = 4});
    check_resume(oa, ob, a, b, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
    CHECK(ob.options().amsgrad);
  }
}

TEST_CASE("16-bit update rules reject what they cannot do", "[optim][pure16]") {
  // Note [Storage policy]: 16-bit parameters choose the 16-bit rule; f32 ones the plain one; a mix
  // is refused, and so is what the 16-bit rules do not have.
  Variable f(ones({2}), true, "f32 weight"), g16(ones({2}, DType::bf16), true, "bf16 weight");
  CHECK(std::string(SGD({f}).name()) == "SGD");
  CHECK(std::string(SGD({g16}).name()) == "SGD16");
  CHECK(std::string(Adam({g16}).name()) == "AdamW16");
  CHECK_THROWS_WITH(SGD({f, g16}), Catch::Contains("an optimizer's parameters are all 16-bit"));
  SGD wide({f});
  CHECK_THROWS_WITH(wide.add_param_group({g16}), Catch::Contains("cannot join an optimizer of f32 / f64 parameters"));
  CHECK_THROWS_WITH(SGD({g16}, {.momentum = 0.9, .nesterov = true}),
                    Catch::Contains("SGD16: the 16-bit rule") && Catch::Contains("no Nesterov momentum"));
  CHECK_THROWS_WITH(Adam({g16}, {.weight_decay = 0.1}), Catch::Contains("Adam with L2 weight decay 0.1 has none"));
  Tensor w = ones({2}, DType::bf16), c = zeros({2}, DType::bf16), none;
  CHECK_THROWS_WITH(sgd16_update_(w, ones({2}, DType::bf16), none, none, 0.1, 0.0, 0.0, Rounding::nearest, 0, 0),
                    Catch::Contains("must be f32"));
  CHECK_THROWS_WITH(sgd16_update_(w, ones({2}), none, c, 0.1, 0.0, 0.0, Rounding::stochastic, 0, 0),
                    Catch::Contains("Kahan summation rounds to nearest"));
  Tensor wrong = zeros({2}, DType::f16);
  CHECK_THROWS_WITH(sgd16_update_(w, ones({2}), wrong, none, 0.1, 0.9, 0.0, Rounding::nearest, 0, 0),
                    Catch::Contains("momentum buffer"));
  Tensor m = zeros({2}, DType::bf16), v = zeros({2}, DType::bf16);
  CHECK_THROWS_WITH(adamw16_update_(w, ones({2}), m, v, none, 0.1, 0.9, 1.0, 1e-8, 0.0, 1, Rounding::nearest, 0, 0),
                    Catch::Contains("beta2"));
  CHECK_THROWS_WITH(update_rounding_from_name("up"), Catch::Contains("unknown update rounding"));
  Variable h(ones({2}, DType::bf16), true, "h");
  CHECK_THROWS_WITH(RMSprop({h}, {.alpha = 1.0}), Catch::Contains("RMSprop16: alpha must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(Adagrad({h}, {.lr_decay = -1.0}), Catch::Contains("Adagrad16: lr_decay"));
  CHECK_THROWS_WITH(
      rmsprop16_update_(w, ones({2}), m, none, none, none, 0.1, 1.5, 1e-8, 0.0, 0.0, false, Rounding::nearest, 0, 0),
      Catch::Contains("rmsprop16_update_: invalid alpha"));
  CHECK_THROWS_WITH(
      rmsprop16_update_(w, ones({2}), m, none, none, none, 0.1, 0.5, 1e-8, 0.0, 0.0, true, Rounding::nearest, 0, 0),
      Catch::Contains("grad_avg (centered)"));
  CHECK_THROWS_WITH(adagrad16_update_(w, ones({2}), m, none, 0.1, 0.0, 1e-10, 0.0, 0, Rounding::nearest, 0, 0),
                    Catch::Contains("adagrad16_update_: step counts updates from 1"));
  // An RMSprop with alpha 0.999 in bf16 runs with 0.99609375 and says so.
  RMSprop rms({h}, {.alpha = 0.999});
  REQUIRE(rms.warnings().size() == 1);
  CHECK_THAT(rms.warnings()[0], Catch::Contains("alpha") && Catch::Contains("0.99609375"));
}

TEST_CASE("scaled_step drives a pure 16-bit optimizer under loss scaling", "[optim][pure16]") {
  // fp16-pure training needs loss scaling: gradients at scale 2^10 are unscaled in fp32 before
  // the 16-bit rule, and an overflow skips the step without touching weights or state.
  Variable a(from_vector(std::vector<double>{1.0, -0.5}, {2}, DType::f16), true, "a");
  Variable b(from_vector(std::vector<double>{1.0, -0.5}, {2}, DType::f16), true, "b");
  SGD oa({a}, {.lr = 0.125, .momentum = 0.5, .rounding = UpdateRounding::nearest});
  SGD ob({b}, {.lr = 0.125, .momentum = 0.5, .rounding = UpdateRounding::nearest});
  BackoffLossScaler scaler({.init_scale = 1024.0f});
  a.set_grad(ScaledGrad{from_vector(std::vector<double>{0.25 * 1024, 0.5 * 1024}, {2}, DType::f16), 1024.0f});
  b.set_grad(ScaledGrad{from_vector(std::vector<double>{0.25, 0.5}, {2}, DType::f16), 1.0f});
  CHECK(scaled_step(oa, scaler).applied());
  ob.step();
  CHECK(bytes_of(a.data()) == bytes_of(b.data()));
  CHECK(a.data().to_vector() == std::vector<double>{0.96875, -0.5625});
  const std::vector<uint8_t> before = bytes_of(a.data());
  const std::vector<uint8_t> mom = bytes_of(oa.state_dict().at("state.0.momentum_buffer"));
  a.set_grad(ScaledGrad{from_vector(std::vector<double>{INFINITY, 1.0}, {2}, DType::f16), 1024.0f});
  CHECK_FALSE(scaled_step(oa, scaler).applied());
  CHECK(bytes_of(a.data()) == before);
  CHECK(bytes_of(oa.state_dict().at("state.0.momentum_buffer")) == mom);
  CHECK(oa.step_count(0) == 1);
  CHECK_FALSE(a.grad().has_value());
}

namespace {

// The CPU's side of the update formulas (HostUpdate in tensor/cpu/optim.cpp), for evaluating a
// formula element by element with a word drawn here.
template <class P>
struct ScalarUpdate {
  static float sqrt(float x) { return std::sqrt(x); }
  static float load(P v) { return mixtape::load(v); }
  static P nearest(float v) {
    if constexpr (std::is_same_v<P, half>) return round_to_half(v);
    else return round_to_bf16(v);
  }
  static P stochastic(float v, uint32_t r) {
    if constexpr (std::is_same_v<P, half>) return round_to_half_stochastic(v, r);
    else return round_to_bf16_stochastic(v, r);
  }
};

// The four 16-bit updates, each with every state buffer it can use.
enum class Update16 { sgd, adamw, rmsprop, adagrad };

const char* update_name(Update16 u) {
  switch (u) {
    case Update16::sgd: return "sgd16 (momentum)";
    case Update16::adamw: return "adamw16 (amsgrad)";
    case Update16::rmsprop: return "rmsprop16 (centered, momentum)";
    case Update16::adagrad: return "adagrad16";
  }
  return "";
}

int state_count(Update16 u) { return u == Update16::sgd ? 1 : u == Update16::adagrad ? 1 : 3; }

// The operands of one update: the weight, the f32 gradient and the 16-bit state, each either
// contiguous of `shape` or, with `view`, the transpose of a (shape[1], shape[0]) tensor.
struct Operands16 {
  Tensor param, grad;
  std::vector<Tensor> state;
};

Tensor operand(const Shape& shape, bool view, DType dt, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  const Shape stored = view ? Shape{shape[1], shape[0]} : shape;
  int64_t n = 1;
  for (int64_t s : stored) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  const Tensor t = from_vector(v, stored, dt);
  return view ? t.t() : t;
}

Operands16 operands16(Update16 u, const Shape& shape, bool view, DType dt, uint32_t draw) {
  std::mt19937 rng(draw);
  Operands16 o;
  o.param = operand(shape, view, dt, -2.0, 2.0, rng);
  o.grad = operand(shape, view, DType::f32, -1.0, 1.0, rng);
  for (int s = 0; s < state_count(u); ++s) {
    // second moments and sums positive, first moments and momenta of either sign
    const bool positive =
        (u == Update16::adamw && s != 0) || (u == Update16::rmsprop && s == 0) || u == Update16::adagrad;
    o.state.push_back(positive ? operand(shape, view, dt, 1e-4, 1e-2, rng)
                               : operand(shape, view, dt, -1e-2, 1e-2, rng));
  }
  return o;
}

constexpr double kLr = 1e-2;

void run_update16(Update16 u, Operands16& o, uint64_t seed, uint64_t offset) {
  Tensor none;
  switch (u) {
    case Update16::sgd:
      sgd16_update_(o.param, o.grad, o.state[0], none, kLr, 0.9, 1e-2, Rounding::stochastic, seed, offset);
      return;
    case Update16::adamw:
      adamw16_update_(o.param, o.grad, o.state[0], o.state[1], none, kLr, 0.9, 0.99609375, 1e-6, 1e-2, 3,
                      Rounding::stochastic, seed, offset, &o.state[2]);
      return;
    case Update16::rmsprop:
      rmsprop16_update_(o.param, o.grad, o.state[0], o.state[1], o.state[2], none, kLr, 0.98828125, 1e-6, 1e-2, 0.5,
                        true, Rounding::stochastic, seed, offset);
      return;
    case Update16::adagrad:
      adagrad16_update_(o.param, o.grad, o.state[0], none, kLr, 1e-3, 1e-6, 1e-2, 2, Rounding::stochastic, seed,
                        offset);
      return;
  }
}

// The bits of the weight and of every state buffer, each in row-major order.
std::vector<uint8_t> result_bits(const Operands16& o) {
  std::vector<uint8_t> b = bytes_of(o.param);
  for (const Tensor& s : o.state) {
    const std::vector<uint8_t> sb = bytes_of(s);
    b.insert(b.end(), sb.begin(), sb.end());
  }
  return b;
}

template <class P>
std::vector<P> values_of(const Tensor& t) {
  const std::vector<uint8_t> b = bytes_of(t);
  std::vector<P> v(b.size() / sizeof(P));
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// The same update evaluated here, element by element: the formula of update_formulas.h with the
// word rounding_word(seed, offset + i) for the element of row-major index i.
template <class P>
std::vector<uint8_t> direct_update16(Update16 u, const Operands16& in, uint64_t seed, uint64_t offset) {
  using D = ScalarUpdate<P>;
  const formulas::WeightRule sr = formulas::WeightRule::stochastic;
  std::vector<P> p = values_of<P>(in.param);
  const std::vector<double> g = in.grad.to_vector();
  std::vector<std::vector<P>> s;
  for (const Tensor& t : in.state) s.push_back(values_of<P>(t));
  P unused{};
  for (size_t i = 0; i < p.size(); ++i) {
    const uint32_t r = rounding_word(seed, offset + i);
    const float gi = float(g[i]);
    switch (u) {
      case Update16::sgd:
        formulas::sgd16<D>(&p[i], gi, &s[0][i], &unused, r, formulas::sgd16_consts(kLr, 0.9, 1e-2, sr, seed, offset));
        break;
      case Update16::adamw:
        formulas::adamw16<D>(
            &p[i], gi, &s[0][i], &s[1][i], &s[2][i], &unused, r,
            formulas::adamw16_consts(kLr, 0.9, 0.99609375, 1e-6, 1e-2, 3, sr, seed, offset, /*amsgrad=*/true));
        break;
      case Update16::rmsprop:
        formulas::rmsprop16<D>(&p[i], gi, &s[0][i], &s[1][i], &s[2][i], &unused, r,
                               formulas::rmsprop16_consts(kLr, 0.98828125, 1e-6, 1e-2, 0.5, true, sr, seed, offset));
        break;
      case Update16::adagrad:
        formulas::adagrad16<D>(&p[i], gi, &s[0][i], &unused, r,
                               formulas::adagrad16_consts(kLr, 1e-3, 1e-6, 1e-2, 2, sr, seed, offset));
        break;
    }
  }
  std::vector<uint8_t> b(p.size() * sizeof(P));
  if (!b.empty()) std::memcpy(b.data(), p.data(), b.size());
  for (const std::vector<P>& sv : s) {
    const size_t at = b.size();
    b.resize(at + sv.size() * sizeof(P));
    if (!sv.empty()) std::memcpy(b.data() + at, sv.data(), sv.size() * sizeof(P));
  }
  return b;
}

// Restores the thread count and the conversion path on exit.
struct ThreadsAndPath {
  int threads = num_threads();
  std::string path = cpu::conversion_path();
  ~ThreadsAndPath() {
    set_num_threads(threads);
    cpu::set_conversion_path(path);
  }
};

}  // namespace

TEST_CASE("stochastic 16-bit updates draw each element's word alike on every conversion path and thread count",
          "[optim][pure16]") {
  // The CPU kernels draw the words of a row's elements a chunk at a time on the vector path
  // (rounding_words_n); every path and thread count must give the bits of the scalar draw.
  // Sizes leave every tail of a 64- and 128-word group and split rows over threads mid-block; the views are transposes (rows of 29 and 150 elements), and the second offset makes
  // the counters cross 2^32 inside the tensor.
  const ThreadsAndPath restore;
  const std::vector<std::string> paths = cpu::conversion_paths();
  REQUIRE(paths.front() == "scalar");
  const std::vector<std::pair<Shape, bool>> layouts = {{{1}, false},     {{15}, false},     {{17}, false},
                                                       {{255}, false},   {{1000}, false},   {{20011}, false},
                                                       {{37, 29}, true}, {{141, 150}, true}};
  const uint64_t seed = 0x243F6A8885A308D3ull;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (Update16 u : {Update16::sgd, Update16::adamw, Update16::rmsprop, Update16::adagrad}) {
      for (const auto& [shape, view] : layouts) {
        for (uint64_t offset : {uint64_t(12345), uint64_t(0xFFFFFFFFull - 600)}) {
          INFO(dtype_name(dt) << " " << update_name(u) << ", " << (view ? "transposed " : "") << shape.size() << "-d, "
                              << shape[0] << " x " << (shape.size() > 1 ? shape[1] : 1) << ", offset " << offset);
          const Operands16 in = operands16(u, shape, view, dt, uint32_t(offset + shape[0]));
          const std::vector<uint8_t> direct = dt == DType::bf16 ? direct_update16<bfloat16>(u, in, seed, offset)
                                                                : direct_update16<half>(u, in, seed, offset);
          if (in.param.numel() >= 255) {  // a word drawn for the wrong counter would show
            const std::vector<uint8_t> shifted = dt == DType::bf16 ? direct_update16<bfloat16>(u, in, seed, offset + 1)
                                                                   : direct_update16<half>(u, in, seed, offset + 1);
            REQUIRE(shifted != direct);
          }
          std::vector<uint8_t> scalar;
          for (const std::string& path : paths) {
            for (int threads : {1, 3}) {
              INFO("path " << path << ", " << threads << " threads");
              cpu::set_conversion_path(path);
              set_num_threads(threads);
              Operands16 o = operands16(u, shape, view, dt, uint32_t(offset + shape[0]));
              run_update16(u, o, seed, offset);
              const std::vector<uint8_t> got = result_bits(o);
              if (scalar.empty()) scalar = got;
              CHECK(got == scalar);
              CHECK(got == direct);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("adamw16_update_ gives the same bits on every conversion path", "[optim][pure16]") {
  // Note [Vector AdamW]: the AVX-512 chunks (widen, fp32 lanes, round on store) against the
  // scalar formulas, under each rounding rule, in bf16 and f16, on a contiguous tensor with a
  // ragged tail and a row longer than one chunk (3 x 300), and on a transposed one (the scalar
  // loop inside the same row walk). Gradients of every magnitude, four steps, a nonzero offset
  // for the stochastic words.
  for (DType dt : {DType::bf16, DType::f16})
    for (int rule = 0; rule < 3; ++rule)  // nearest, stochastic, kahan
      for (bool transposed : {false, true}) {
        INFO(dtype_name(dt) << " rule " << rule << (transposed ? " transposed" : ""));
        std::vector<std::vector<uint8_t>> outs;
        for (const std::string& path : cpu::conversion_paths()) {
          cpu::set_conversion_path(path);
          Generator gen(9);
          const Tensor base = normal({3, 300}, 0.0, 1.0, gen).to(dt);
          Tensor w = transposed ? base.t().contiguous().t() : base.clone();
          Tensor m = zeros({3, 300}, dt), v = zeros({3, 300}, dt);
          Tensor c = rule == 2 ? zeros({3, 300}, dt) : Tensor();
          const Rounding rounding = rule == 1 ? Rounding::stochastic : Rounding::nearest;
          for (int64_t step = 1; step <= 4; ++step) {
            const Tensor g = normal({3, 300}, 0.0, std::pow(10.0, 2.0 * double(step) - 5.0), gen);
            adamw16_update_(w, g, m, v, c, 1e-2, 0.8984375, 0.99609375, 1e-8, 1e-2, step, rounding, 77, 1000 * step);
          }
          for (const Tensor& t : {w, m, v}) outs.push_back(bytes_of(t));
          outs.push_back(rule == 2 ? bytes_of(c) : std::vector<uint8_t>());
        }
        cpu::set_conversion_path(cpu::conversion_paths().back());
        for (size_t i = 4; i < outs.size(); ++i) CHECK(outs[i] == outs[i % 4]);
      }
}
