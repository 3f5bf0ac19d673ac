// Gradient clipping on plain gradients, clipping inside scaled_step (after unscaling), and
// learning-rate schedules against their formulas.
#include <catch2/catch.hpp>

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
