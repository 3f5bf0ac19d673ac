// Gradient clipping on plain gradients, clipping inside scaled_step (after unscaling), and
// learning-rate schedules against their formulas. The sequences of ExponentialLR, MultiStepLR,
// OneCycleLR and ReduceLROnPlateau are torch.optim.lr_scheduler's own (torch 2, an SGD over one
// parameter, the lr read after each scheduler step, printed with repr).
#include "support/catch.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "mixtape.h"
#include "optim/optim.h"

using namespace mixtape;

namespace {

Tensor vec(const std::vector<double>& v, DType dt = DType::f32) { return from_vector(v, {int64_t(v.size())}, dt); }

Variable param_with_grad(const std::vector<double>& g, float scale, DType dt = DType::f32) {
  Variable p(zeros({int64_t(g.size())}, DType::f32), true);
  std::vector<double> s(g);
  for (double& x : s) x *= scale;
  p.set_grad(ScaledGrad{vec(s, dt), scale});
  return p;
}

bool rel_close(double a, double b, double tol) { return std::abs(a - b) <= tol * std::abs(b); }

}  // namespace

TEST_CASE("clip_grad_norm measures plain gradients and clips them to max_norm", "[optim]") {
  // Norm of [3, 4] and [12] is 13; an undefined entry (a parameter without gradient) is skipped.
  std::vector<Tensor> grads = {vec({3.0, 4.0}), vec({12.0}), Tensor()};
  CHECK(grad_norm(grads) == 13.0);

  SECTION("below max_norm nothing changes") {
    CHECK(clip_grad_norm(grads, 20.0) == 13.0);
    CHECK(grads[0].to_vector() == std::vector<double>{3.0, 4.0});
  }
  SECTION("above max_norm every gradient is multiplied by max_norm / (norm + 1e-6)") {
    CHECK(clip_grad_norm(grads, 6.5) == 13.0);
    const double coef = 6.5 / (13.0 + 1e-6);
    CHECK(rel_close(grads[0].to_vector()[0], 3.0 * coef, 1e-7));
    CHECK(rel_close(grads[0].to_vector()[1], 4.0 * coef, 1e-7));
    CHECK(rel_close(grads[1].item(), 12.0 * coef, 1e-7));
    CHECK(rel_close(grad_norm(grads), 6.5, 1e-6));
    CHECK_FALSE(grads[2].defined());
  }
}

TEST_CASE("scaled_step skips and backs off on another process's overflow, whatever its own gradients hold", "[optim]") {
  Variable a = param_with_grad({3.0, 4.0}, 1024.0f, DType::f16);
  SGD opt({a}, {.lr = 1.0});
  BackoffLossScaler scaler({.init_scale = 1024.0f});
  const StepReport r = scaled_step(opt, scaler, GradClip{}, true);
  CHECK_FALSE(r.applied());
  CHECK(r.check().found_inf);
  CHECK(scaler.scale() == 512.0f);
  CHECK(a.data().to_vector() == std::vector<double>{0.0, 0.0});
  CHECK_FALSE(a.grad().has_value());
}

TEST_CASE("scaled_step clips the unscaled gradients, each parameter by its own scale", "[optim]") {
  // [3, 4] at scale 1024 (stored in f16) and [12] at scale 1: the norm of the true gradients is 13.
  Variable a = param_with_grad({3.0, 4.0}, 1024.0f, DType::f16);
  Variable b = param_with_grad({12.0}, 1.0f);
  Variable c(zeros({2}), true);
  SGD opt({a, b, c}, {.lr = 1.0});
  StaticLossScaler scaler(1.0f);
  const StepReport r = scaled_step(opt, scaler, 6.5);
  REQUIRE(r.applied());
  CHECK(r.grad_norm() == 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  // SGD with lr 1 from zero: the parameter is minus the clipped gradient.
  CHECK(rel_close(-a.data().to_vector()[0], 3.0 * coef, 1e-7));
  CHECK(rel_close(-a.data().to_vector()[1], 4.0 * coef, 1e-7));
  CHECK(rel_close(-b.data().item(), 12.0 * coef, 1e-7));
  CHECK(c.data().to_vector() == std::vector<double>{0.0, 0.0});  // no gradient: untouched
  CHECK_FALSE(a.grad().has_value());                             // gradients are dropped
  CHECK(opt.step_count(2) == 0);
}

TEST_CASE("clip_grad_norm and clip_grad_value on parameters clip the true gradients, keeping each scale", "[optim]") {
  // Two parameters: an f16 gradient at scale 2^10 (true values 3 and 4 times 2^-4) and an f32
  // one at scale 1 (true value 12 * 2^-4); a third without a gradient. True norm 13 * 2^-4.
  Variable a(zeros({2}, DType::f16), true), b(zeros({1}), true), none(zeros({3}), true);
  auto reset = [&] {
    a.set_grad(ScaledGrad{from_vector(std::vector<float>{3 * 64.0f, 4 * 64.0f}, {2}).to(DType::f16), 1024.0f});
    b.set_grad(ScaledGrad{from_vector(std::vector<float>{0.75f}, {1}), 1.0f});
  };
  reset();
  CHECK(clip_grad_norm({a, b, none}, 1.0) == 13.0 / 16.0);  // below max_norm: untouched
  CHECK(a.grad()->unscaled().to_vector() == std::vector<double>{0.1875, 0.25});
  const double norm = clip_grad_norm({a, b, none}, 0.5);
  CHECK(norm == 13.0 / 16.0);
  CHECK(a.grad()->scale == 1024.0f);
  CHECK(a.grad()->g.dtype() == DType::f16);
  CHECK(!none.grad());
  // The same as the tensor form on the true gradients, up to the f16 rounding of a's result.
  std::vector<Tensor> plain = {from_vector(std::vector<float>{0.1875f, 0.25f}, {2}),
                               from_vector(std::vector<float>{0.75f}, {1})};
  clip_grad_norm(plain, 0.5);
  CHECK(b.grad()->unscaled().to_vector() == plain[1].to_vector());
  CHECK(a.grad()->unscaled().to_vector() == plain[0].to(DType::f16).to(DType::f32).to_vector());
  reset();
  clip_grad_value({a, b}, 0.2);  // true values clamped to [-0.2, 0.2]
  const double limit16 = from_vector(std::vector<double>{0.2 * 1024}, {1}).to(DType::f16).to_vector()[0] / 1024;
  CHECK(a.grad()->unscaled().to_vector() == std::vector<double>{0.1875, limit16});
  CHECK(b.grad()->unscaled().to_vector() == std::vector<double>{double(0.2f)});
  CHECK(a.grad()->scale == 1024.0f);
}

TEST_CASE("clip_grad_norm returns inf and NaN norms without scaling", "[optim]") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor b = vec({12.0});
  std::vector<Tensor> g1 = {vec({inf, 1.0}), b};
  CHECK(clip_grad_norm(g1, 1.0) == inf);
  CHECK(g1[1].item() == 12.0);
  std::vector<Tensor> g2 = {vec({std::nan(""), 1.0}), b};
  CHECK(std::isnan(clip_grad_norm(g2, 1.0)));
  std::vector<Tensor> g3 = {vec({inf, 1.0}), vec({std::nan(""), 1.0}), b};
  CHECK(std::isnan(clip_grad_norm(g3, 1.0)));
  CHECK(g3[2].item() == 12.0);
  std::vector<Tensor> g4 = {b};
  CHECK_THROWS_WITH(clip_grad_norm(g4, -1.0), Catch::Contains("max_norm"));
}

TEST_CASE("grad_norm neither overflows nor underflows in fp32", "[optim]") {
  // Squares of these overflow (1e60) or underflow (1e-80) fp32; the norm must not.
  CHECK(rel_close(grad_norm({vec({3e30, 4e30})}), 5e30, 1e-6));
  CHECK(rel_close(grad_norm({vec({3e-40, 4e-40})}), 5e-40, 1e-5));
  CHECK(rel_close(grad_norm({vec({3e30}), vec({4e30})}), 5e30, 1e-6));
}

TEST_CASE("StepLR and CosineAnnealingLR set the lr of every group from its initial lr", "[optim]") {
  Variable a(zeros({1}), true), b(zeros({1}), true);
  SGD opt({a}, {.lr = 0.8});
  opt.add_param_group({b}, {.lr = 0.08});
  SECTION("StepLR(3, 0.5)") {
    LRScheduler sched(opt, StepLR(3, 0.5));
    const double want[] = {0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2};
    for (int t = 0; t < 8; ++t) {
      INFO("step " << t);
      CHECK(sched.last_step() == t);
      CHECK(opt.lr(0) == Approx(want[t]).epsilon(1e-15));
      CHECK(opt.lr(1) == Approx(want[t] / 10).epsilon(1e-15));
      sched.step();
    }
  }
  SECTION("CosineAnnealingLR(4, 0.1)") {
    LRScheduler sched(opt, CosineAnnealingLR(4, 0.1));
    // 0.1 + (0.8 - 0.1) (1 + cos(pi t / 4)) / 2, and periodic past T_max as PyTorch's closed form
    const double c = std::cos(std::numbers::pi / 4);
    const double want[] = {0.8, 0.1 + 0.35 * (1 + c), 0.45, 0.1 + 0.35 * (1 - c), 0.1, 0.1 + 0.35 * (1 - c)};
    for (int t = 0; t < 6; ++t) {
      INFO("step " << t);
      CHECK(opt.lr(0) == Approx(want[t]).epsilon(1e-15));
      sched.step();
    }
  }
  CHECK_THROWS_WITH(StepLR(0), Catch::Contains("step_size"));
  CHECK_THROWS_WITH(CosineAnnealingLR(0), Catch::Contains("T_max"));
}

TEST_CASE("LinearWarmup ramps up, then hands over to the wrapped schedule", "[optim]") {
  Variable a(zeros({1}), true);
  SGD opt({a}, {.lr = 1.0});
  SECTION("to a constant") {
    LRScheduler sched(opt, LinearWarmup(4));
    const double want[] = {0.25, 0.5, 0.75, 1.0, 1.0, 1.0};
    for (double w : want) {
      CHECK(opt.lr() == w);
      sched.step();
    }
  }
  SECTION("to StepLR(2, 0.1), which starts at its own step 0") {
    LRScheduler sched(opt, LinearWarmup(2, StepLR(2, 0.1)));
    const double want[] = {0.5, 1.0, 1.0, 1.0, 0.1, 0.1, 0.01};
    for (double w : want) {
      CHECK(opt.lr() == Approx(w).epsilon(1e-15));
      sched.step();
    }
  }
  SECTION("to cosine annealing") {
    LinearWarmup s(3, CosineAnnealingLR(10, 0.0));
    CHECK(s.lr_at(0, 0.3) == Approx(0.1));
    CHECK(s.lr_at(3, 0.3) == Approx(0.3));
    CHECK(s.lr_at(8, 0.3) == Approx(0.15));
    CHECK(s.lr_at(13, 0.3) == Approx(0.0).margin(1e-15));
  }
}

TEST_CASE("scheduler state dicts resume the schedule", "[optim]") {
  Variable a(zeros({1}), true);
  SGD opt({a}, {.lr = 0.5});
  LRScheduler sched(opt, StepLR(2, 0.1));
  for (int t = 0; t < 3; ++t) sched.step();
  const TensorDict saved = sched.state_dict();
  CHECK(saved.meta("last_step") == "3");

  Variable b(zeros({1}), true);
  SGD opt2({b}, {.lr = 7.0});
  LRScheduler sched2(opt2, StepLR(2, 0.1));
  sched2.load_state_dict(saved);
  CHECK(sched2.last_step() == 3);
  CHECK(sched2.base_lrs() == std::vector<double>{0.5});
  CHECK(opt2.lr() == opt.lr());
  sched.step();
  sched2.step();
  CHECK(opt2.lr() == opt.lr());
  CHECK_THROWS_WITH(sched2.load_state_dict(TensorDict{}), Catch::Contains("missing metadata entry 'last_step'"));
}

TEST_CASE("clip_grad_value clamps every element to [-v, v], NaN stays NaN", "[optim]") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Tensor> grads = {vec({3.0, -4.0, std::nan(""), inf, -inf, 0.5}), Tensor(), vec({-2.5, 1.5}, DType::f16)};
  clip_grad_value(grads, 2.0);
  const std::vector<double> a = grads[0].to_vector();
  CHECK(a[0] == 2.0);
  CHECK(a[1] == -2.0);
  CHECK(std::isnan(a[2]));
  CHECK(a[3] == 2.0);
  CHECK(a[4] == -2.0);
  CHECK(a[5] == 0.5);
  CHECK_FALSE(grads[1].defined());
  CHECK(grads[2].dtype() == DType::f16);
  CHECK(grads[2].to_vector() == std::vector<double>{-2.0, 1.5});
  clip_grad_value(grads, 0.0);  // v = 0 zeroes everything but NaN
  CHECK(grads[2].to_vector() == std::vector<double>{0.0, 0.0});
  CHECK_THROWS_WITH(clip_grad_value(grads, -1.0), Catch::Contains("clip_grad_value: clip_value must be finite"));
  CHECK_THROWS_WITH(clip_grad_value(grads, std::nan("")), Catch::Contains("clip_value"));
}

TEST_CASE("scaled_step clips by value after unscaling, then by norm", "[optim]") {
  // [3, -4] at scale 1024 (stored in f16) and [0.5] at scale 1.
  SECTION("by value only") {
    Variable a = param_with_grad({3.0, -4.0}, 1024.0f, DType::f16);
    Variable b = param_with_grad({0.5}, 1.0f);
    SGD opt({a, b}, {.lr = 1.0});
    StaticLossScaler scaler(1.0f);
    const StepReport r = scaled_step(opt, scaler, GradClip{.max_value = 1.0});
    REQUIRE(r.applied());
    CHECK(r.grad_norm() == std::sqrt(25.25));  // before clipping
    CHECK(a.data().to_vector() == std::vector<double>{-1.0, 1.0});
    CHECK(b.data().item() == -0.5);
  }
  SECTION("by value, then to a norm") {
    Variable a = param_with_grad({3.0, -4.0}, 1024.0f, DType::f16);
    Variable b = param_with_grad({0.5}, 1.0f);
    SGD opt({a, b}, {.lr = 1.0});
    StaticLossScaler scaler(1.0f);
    REQUIRE(scaled_step(opt, scaler, GradClip{.max_norm = 0.75, .max_value = 1.0}).applied());
    const double coef = 0.75 / (1.5 + 1e-6);  // the clamped gradients [1, -1, 0.5] have norm 1.5
    CHECK(rel_close(-a.data().to_vector()[0], coef, 1e-7));
    CHECK(rel_close(b.data().item(), -0.5 * coef, 1e-7));
  }
  SECTION("an inf gradient is still skipped, not clamped into an update") {
    Variable a = param_with_grad({std::numeric_limits<double>::infinity(), 1.0}, 1.0f);
    SGD opt({a}, {.lr = 1.0});
    StaticLossScaler scaler(1.0f);
    CHECK_FALSE(scaled_step(opt, scaler, GradClip{.max_value = 1.0}).applied());
    CHECK(a.data().to_vector() == std::vector<double>{0.0, 0.0});
  }
  SECTION("MasterWeights and the trainer options pass it on") {
    Variable a = param_with_grad({3.0, -4.0}, 1.0f);
    MasterWeights mw({a},
                     [](std::vector<Variable> m) { return std::make_unique<SGD>(std::move(m), SGDOptions{.lr = 1.0}); },
                     {.max_grad_value = 2.0});
    StaticLossScaler scaler(1.0f);
    REQUIRE(mw.step(scaler).applied());
    CHECK(a.data().to_vector() == std::vector<double>{-2.0, 2.0});
  }
  Variable a = param_with_grad({1.0}, 1.0f);
  SGD opt({a}, {.lr = 1.0});
  StaticLossScaler scaler(1.0f);
  CHECK_THROWS_WITH(scaled_step(opt, scaler, GradClip{.max_value = -1.0}), Catch::Contains("max_grad_value"));
}

namespace {

// The lr of group 0 at construction and after each of the following steps.
std::vector<double> lr_sequence(const LRSchedule& schedule, double base_lr, size_t steps) {
  std::vector<double> out;
  for (size_t t = 0; t <= steps; ++t) out.push_back(schedule.lr_at(int64_t(t), base_lr));
  return out;
}

void check_sequence(Optimizer& opt, LRScheduler& sched, const std::vector<double>& want, double tol) {
  for (size_t t = 0; t < want.size(); ++t) {
    INFO("step " << t << ": lr " << opt.lr() << ", torch " << want[t]);
    CHECK(std::abs(opt.lr() - want[t]) <= tol * std::abs(want[t]));
    if (t + 1 < want.size()) sched.step();
  }
}

}  // namespace

TEST_CASE("ExponentialLR and MultiStepLR follow torch.optim.lr_scheduler", "[optim]") {
  Variable a(zeros({1}), true);
  SGD opt({a}, {.lr = 0.1});
  SECTION("ExponentialLR(0.9)") {
    LRScheduler sched(opt, ExponentialLR(0.9));
    // torch multiplies step by step; the closed form rounds differently in the last place.
    check_sequence(opt, sched,
                   {0.1, 0.09000000000000001, 0.08100000000000002, 0.07290000000000002, 0.06561000000000002,
                    0.05904900000000002, 0.05314410000000002, 0.04782969000000002, 0.043046721000000024,
                    0.03874204890000002, 0.03486784401000002, 0.03138105960900001, 0.028242953648100012},
                   1e-14);
  }
  SECTION("MultiStepLR({3, 7, 7, 10}, 0.5): a repeated milestone counts twice") {
    LRScheduler sched(opt, MultiStepLR({10, 7, 3, 7}, 0.5));
    check_sequence(
        opt, sched,
        {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.0125, 0.0125, 0.0125, 0.00625, 0.00625, 0.00625, 0.00625, 0.00625},
        0.0);
  }
  CHECK_THROWS_WITH(ExponentialLR(-0.5), Catch::Contains("ExponentialLR: gamma must be finite and >= 0, got -0.5"));
  CHECK_THROWS_WITH(MultiStepLR({2, -1}), Catch::Contains("MultiStepLR: milestones must be >= 0, got -1"));
  CHECK_THROWS_WITH(MultiStepLR({2}, std::nan("")), Catch::Contains("MultiStepLR: gamma"));
}

TEST_CASE("OneCycleLR follows torch.optim.lr_scheduler.OneCycleLR in every phase", "[optim]") {
  Variable a(zeros({1}), true);
  SGD opt({a}, {.lr = 0.1});
  SECTION("cos, two phases, PyTorch's defaults") {
    LRScheduler sched(opt, OneCycleLR(1.0, 20));
    check_sequence(opt, sched,
                   {0.040000000000000036,
                    0.1316718427000253,
                    0.3716718427000253,
                    0.6683281572999747,
                    0.9083281572999747,
                    1.0,
                    0.9874640062350873,
                    0.9504846320134737,
                    0.89091617757105,
                    0.8117456539497631,
                    0.7169430017913008,
                    0.6112620219362893,
                    0.500002,
                    0.38874197806371075,
                    0.28306099820869923,
                    0.18825834605023697,
                    0.10908782242895004,
                    0.049519367986526286,
                    0.012539993764912554,
                    4e-06},
                   1e-14);
  }
  SECTION("linear, pct_start 0.4, div factors 10 and 100") {
    LRScheduler sched(
        opt, OneCycleLR(
                 0.5, 10,
                 {.pct_start = 0.4, .anneal = OneCycleLR::Anneal::linear, .div_factor = 10, .final_div_factor = 100}));
    check_sequence(opt, sched,
                   {0.05, 0.2, 0.35, 0.5, 0.41675, 0.3335, 0.25025, 0.16700000000000004, 0.08374999999999999,
                    0.0005000000000000004},
                   1e-14);
    // A torch-style loop steps the schedule after each of its 10 updates: the 10th step() takes
    // it to step 10, where the linear phase would extrapolate to a negative lr. It holds the
    // final lr instead, and the 11th step() is refused.
    sched.step();
    CHECK(opt.lr() == Approx(0.0005).epsilon(1e-12));
    CHECK_THROWS_WITH(sched.step(), Catch::Contains("tried to step 11 times"));
  }
  SECTION("cos, three phases") {
    LRScheduler sched(opt, OneCycleLR(2.0, 16, {.pct_start = 0.25, .three_phase = true}));
    check_sequence(opt, sched,
                   {0.08000000000000007, 0.56, 1.5199999999999998, 2.0, 1.52, 0.5600000000000002, 0.08,
                    0.07758794606095319, 0.07064271354698665, 0.06000200000000001, 0.04694923251396656,
                    0.03305876748603346, 0.020006000000000013, 0.00936528645301336, 0.0024200539390468114, 8e-06},
                   1e-14);
    // Step 16 = total_steps is allowed (PyTorch's check is step > total_steps); 17 is not, and a
    // failed step changes nothing.
    sched.step();
    const double lr16 = opt.lr();
    CHECK_THROWS_WITH(sched.step(),
                      Catch::Contains("OneCycleLR: tried to step 17 times; the schedule has total_steps 16"));
    CHECK(sched.last_step() == 16);
    CHECK(opt.lr() == lr16);
  }
  SECTION("every group follows max_lr, and the state dict resumes it") {
    Variable b(zeros({1}), true);
    opt.add_param_group({b}, {.lr = 7.0});
    LRScheduler sched(opt, OneCycleLR(1.0, 20));
    for (int t = 0; t < 5; ++t) sched.step();
    CHECK(opt.lr(1) == opt.lr(0));
    Variable c(zeros({1}), true), d(zeros({1}), true);
    SGD opt2({c}, {.lr = 0.1});
    opt2.add_param_group({d});
    LRScheduler sched2(opt2, OneCycleLR(1.0, 20));
    sched2.load_state_dict(sched.state_dict());
    sched.step();
    sched2.step();
    CHECK(opt2.lr(0) == opt.lr(0));
    CHECK(opt2.lr(1) == opt.lr(1));
  }
  CHECK(lr_sequence(OneCycleLR(1.0, 20), 0.1, 20) == lr_sequence(OneCycleLR(1.0, 20), 123.0, 20));
  CHECK_THROWS_WITH(OneCycleLR(1.0, 0), Catch::Contains("OneCycleLR: total_steps must be > 0, got 0"));
  CHECK_THROWS_WITH(OneCycleLR(-1.0, 10), Catch::Contains("OneCycleLR: max_lr"));
  CHECK_THROWS_WITH(OneCycleLR(1.0, 10, {.pct_start = 1.5}), Catch::Contains("pct_start must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(OneCycleLR(1.0, 10, {.div_factor = 0.0}), Catch::Contains("div_factor"));
  CHECK_THROWS_WITH(OneCycleLR(1.0, 10, {.final_div_factor = -1.0}), Catch::Contains("final_div_factor"));
  // pct_start * total_steps = 1: PyTorch's first phase has length 0 (its division by zero).
  CHECK_THROWS_WITH(OneCycleLR(1.0, 10, {.pct_start = 0.1}), Catch::Contains("phase 1 of 2 ends at step 0"));
}

namespace {

// The optimizer's momentum at construction and after each of the following scheduler steps.
void check_momentum_sequence(Optimizer& opt, LRScheduler& sched, const std::vector<double>& want) {
  for (size_t t = 0; t < want.size(); ++t) {
    INFO("step " << t << ": momentum " << *opt.momentum() << ", torch " << want[t]);
    CHECK(std::abs(*opt.momentum() - want[t]) <= 1e-15);
    if (t + 1 < want.size()) sched.step();
  }
}

}  // namespace

// torch 1.13's OneCycleLR with cycle_momentum (its default), group['momentum'] or
// group['betas'][0] read after each scheduler step.
TEST_CASE("OneCycleLR cycles the momentum or beta1 against the lr, as torch's cycle_momentum", "[optim]") {
  Variable a(zeros({1}), true);
  SECTION("SGD's momentum, cos, PyTorch's defaults") {
    SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
    LRScheduler sched(opt, OneCycleLR(1.0, 20));
    check_momentum_sequence(opt, sched,
                            {0.95,
                             0.9404508497187474,
                             0.9154508497187474,
                             0.8845491502812526,
                             0.8595491502812526,
                             0.85,
                             0.8512536043909088,
                             0.854951556604879,
                             0.8609084258765984,
                             0.8688255099070633,
                             0.878305813044122,
                             0.8888739533021842,
                             0.8999999999999999,
                             0.9111260466978157,
                             0.9216941869558779,
                             0.9311744900929366,
                             0.9390915741234015,
                             0.945048443395121,
                             0.9487463956090911,
                             0.95});
  }
  SECTION("AdamW's beta1, three phases: the last holds max_momentum") {
    AdamW opt({a}, {.lr = 0.1});
    LRScheduler sched(opt, OneCycleLR(2.0, 16, {.pct_start = 0.25, .three_phase = true}));
    check_momentum_sequence(opt, sched,
                            {0.95, 0.9249999999999999, 0.875, 0.85, 0.875, 0.9249999999999999, 0.95, 0.95, 0.95, 0.95,
                             0.95, 0.95, 0.95, 0.95, 0.95, 0.95});
    CHECK(opt.options().beta1 == 0.95);
    CHECK(opt.options().beta2 == 0.999);
  }
  SECTION("RMSprop's momentum, linear, other bounds") {
    RMSprop opt({a}, {.lr = 0.1, .momentum = 0.5});
    LRScheduler sched(opt, OneCycleLR(0.5, 10,
                                      {.pct_start = 0.4,
                                       .anneal = OneCycleLR::Anneal::linear,
                                       .div_factor = 10,
                                       .final_div_factor = 100,
                                       .base_momentum = 0.8,
                                       .max_momentum = 0.9}));
    check_momentum_sequence(opt, sched,
                            {0.9, 0.8666666666666667, 0.8333333333333334, 0.8, 0.8166666666666667, 0.8333333333333334,
                             0.8500000000000001, 0.8666666666666667, 0.8833333333333333, 0.9});
  }
  SECTION("the 16-bit rules' momentum moves the same way") {
    Variable h(zeros({1}, DType::bf16), true);
    AdamW opt({h}, {.lr = 0.1});
    LRScheduler sched(opt, OneCycleLR(1.0, 20));
    for (int t = 0; t < 5; ++t) sched.step();
    CHECK(opt.options().beta1 == 0.85);
    CHECK(opt.warnings().size() == 1);  // beta2 = 0.999, which bf16 holds as 1 - 2^-8; beta1 needs no warning
    SGD sgd({h}, {.lr = 0.1, .momentum = 0.9});
    LRScheduler sgd_sched(sgd, OneCycleLR(1.0, 20));
    CHECK(sgd.options().momentum == 0.95);
  }
  SECTION("cycle_momentum = false leaves it, and Adagrad (no momentum) needs it") {
    SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
    LRScheduler sched(opt, OneCycleLR(1.0, 20, {.cycle_momentum = false}));
    sched.step();
    CHECK(*opt.momentum() == 0.9);
    Adagrad ada({a}, {.lr = 0.1});
    CHECK(!ada.momentum());
    CHECK_THROWS_WITH(LRScheduler(ada, OneCycleLR(1.0, 20)),
                      Catch::Contains("LRScheduler: the schedule moves the momentum, and Adagrad has no momentum or "
                                      "beta1 (OneCycleLR: set cycle_momentum = false)"));
    CHECK_THROWS_WITH(ada.set_momentum(0.9), Catch::Contains("Adagrad has no momentum or beta1"));
    LRScheduler ada_sched(ada, OneCycleLR(1.0, 20, {.cycle_momentum = false}));
    CHECK(ada.lr() == 0.040000000000000036);
  }
  SECTION("a warm-up in front holds the wrapped schedule's first momentum") {
    SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
    LRScheduler sched(opt, LinearWarmup(3, OneCycleLR(1.0, 20)));
    check_momentum_sequence(opt, sched, {0.95, 0.95, 0.95, 0.95, 0.9404508497187474, 0.9154508497187474});
  }
  SECTION("the state dict resumes it, and the optimizer validates it") {
    SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
    LRScheduler sched(opt, OneCycleLR(1.0, 20));
    for (int t = 0; t < 7; ++t) sched.step();
    Variable b(zeros({1}), true);
    SGD opt2({b}, {.lr = 0.1, .momentum = 0.9});
    LRScheduler sched2(opt2, OneCycleLR(1.0, 20));
    sched2.load_state_dict(sched.state_dict());
    CHECK(*opt2.momentum() == *opt.momentum());
    sched.step();
    sched2.step();
    CHECK(*opt2.momentum() == *opt.momentum());
    AdamW adam({b}, {.lr = 0.1});
    CHECK_THROWS_WITH(LRScheduler(adam, OneCycleLR(1.0, 20, {.max_momentum = 1.0})),
                      Catch::Contains("AdamW: beta1 must be in [0, 1), got 1"));
    CHECK(adam.options().beta1 == 0.9);  // nothing changed
    CHECK_THROWS_WITH(OneCycleLR(1.0, 20, {.base_momentum = std::nan("")}),
                      Catch::Contains("OneCycleLR: base_momentum and max_momentum must be finite"));
  }
  SECTION("a momentum buffer is not added to, or dropped from, parameters that have state") {
    SGD opt({a}, {.lr = 0.1});  // momentum 0: no momentum_buffer
    a.set_grad(ScaledGrad{vec({1.0}), 1.0f});
    opt.step();
    CHECK_THROWS_WITH(LRScheduler(opt, OneCycleLR(1.0, 20)),
                      Catch::Contains("SGD: setting momentum from 0 to 0.95 would add a momentum_buffer to parameters "
                                      "that already have state"));
    CHECK(*opt.momentum() == 0.0);
    CHECK(opt.lr() == 0.1);
    RMSprop rms({a}, {.lr = 0.1, .momentum = 0.9});
    rms.step();
    CHECK_THROWS_WITH(rms.set_momentum(0.0), Catch::Contains("would drop the momentum_buffer"));
    rms.set_momentum(0.5);
    CHECK(rms.options().momentum == 0.5);
  }
}

namespace {

// The lr after each metric.
std::vector<double> plateau_lrs(const std::vector<double>& metrics, ReduceLROnPlateau::Options o) {
  Variable a(zeros({1}), true);
  SGD opt({a}, {.lr = 1.0});
  ReduceLROnPlateau sched(opt, o);
  std::vector<double> out;
  for (double m : metrics) {
    sched.step(m);
    out.push_back(opt.lr());
  }
  return out;
}

}  // namespace

TEST_CASE("ReduceLROnPlateau follows torch.optim.lr_scheduler.ReduceLROnPlateau", "[optim]") {
  using P = ReduceLROnPlateau;
  const double nan = std::nan("");
  SECTION("min, rel threshold, patience 2; a NaN metric is a bad epoch") {
    const std::vector<double> m = {10, 9, 9.0005, 9.5, 9.2, 8, 8, 8, 8, 8, 7.99, 7, 7, 7, nan, 7, 7, 6, 6, 6};
    CHECK(plateau_lrs(m, {.factor = 0.5, .patience = 2, .threshold = 1e-3}) ==
          std::vector<double>{1.0,  1.0,  1.0,  1.0,  0.5,   0.5,   0.5,   0.5,   0.25,  0.25,
                              0.25, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125});
  }
  const std::vector<double> m2 = {1,   2,   2.05, 2.2, 2.1, 2.15, 2.3, 2.3, 2.3, 2.3,
                                  2.3, 2.3, 2.3,  2.3, 2.3, 2.3,  2.3, 2.3, 2.3, 2.3};
  SECTION("max, abs threshold, cooldown 2, min_lr") {
    CHECK(plateau_lrs(m2, {.mode = P::Mode::max,
                           .factor = 0.1,
                           .patience = 1,
                           .threshold = 0.1,
                           .threshold_mode = P::ThresholdMode::abs,
                           .cooldown = 2,
                           .min_lr = 0.002}) == std::vector<double>{1.0,
                                                                    1.0,
                                                                    1.0,
                                                                    1.0,
                                                                    1.0,
                                                                    0.1,
                                                                    0.1,
                                                                    0.1,
                                                                    0.1,
                                                                    0.010000000000000002,
                                                                    0.010000000000000002,
                                                                    0.010000000000000002,
                                                                    0.010000000000000002,
                                                                    0.002,
                                                                    0.002,
                                                                    0.002,
                                                                    0.002,
                                                                    0.002,
                                                                    0.002,
                                                                    0.002});
  }
  SECTION("a reduction by eps or less is not made") {
    CHECK(plateau_lrs(m2, {.mode = P::Mode::max,
                           .factor = 0.9,
                           .patience = 0,
                           .threshold = 0.0,
                           .threshold_mode = P::ThresholdMode::abs,
                           .min_lr = 0.5,
                           .eps = 0.06}) == std::vector<double>{1.0,
                                                                1.0,
                                                                1.0,
                                                                1.0,
                                                                0.9,
                                                                0.81,
                                                                0.81,
                                                                0.7290000000000001,
                                                                0.6561000000000001,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002,
                                                                0.5904900000000002});
  }
  SECTION("the state dict resumes the counters mid-cooldown") {
    const P::Options o{.mode = P::Mode::max,
                       .factor = 0.1,
                       .patience = 1,
                       .threshold = 0.1,
                       .threshold_mode = P::ThresholdMode::abs,
                       .cooldown = 2};
    Variable a(zeros({1}), true), b(zeros({1}), true);
    SGD opt_a({a}, {.lr = 1.0}), opt_b({b}, {.lr = 1.0});
    P full(opt_a, o);
    for (size_t t = 0; t < 7; ++t) full.step(m2[t]);  // the reduction at 5, cooldown running
    CHECK(full.cooldown_counter() > 0);
    TensorDict saved;
    saved.merge("optimizer.", opt_a.state_dict());
    saved.merge("sched.", full.state_dict());
    P resumed(opt_b);  // other options: the state dict brings its own
    opt_b.load_state_dict(saved.sub("optimizer."));
    resumed.load_state_dict(saved.sub("sched."));
    CHECK(resumed.options().mode == P::Mode::max);
    CHECK(resumed.best() == full.best());
    CHECK(resumed.last_epoch() == 7);
    for (size_t t = 7; t < m2.size(); ++t) {
      full.step(m2[t]);
      resumed.step(m2[t]);
      CHECK(opt_b.lr() == opt_a.lr());
    }
    TensorDict bad = full.state_dict();
    bad.set_meta("mode", "sideways");
    CHECK_THROWS_WITH(resumed.load_state_dict(bad), Catch::Contains("mode 'sideways' is not min or max"));
  }
  Variable a(zeros({1}), true);
  SGD opt({a}, {.lr = 1.0});
  CHECK_THROWS_WITH(P(opt, {.factor = 1.0}), Catch::Contains("ReduceLROnPlateau: factor must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(P(opt, {.patience = -1}), Catch::Contains("patience"));
  CHECK_THROWS_WITH(P(opt, {.threshold = -1.0}), Catch::Contains("threshold"));
  CHECK_THROWS_WITH(P(opt, {.cooldown = -2}), Catch::Contains("cooldown"));
  CHECK_THROWS_WITH(P(opt, {.min_lr = -1.0}), Catch::Contains("min_lr"));
  CHECK_THROWS_WITH(P(opt, {.eps = std::nan("")}), Catch::Contains("eps"));
}
