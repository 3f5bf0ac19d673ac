// Learning-rate schedules. A schedule is a pure function of the step count and the group's
// initial learning rate (PyTorch's closed forms); an LRScheduler binds one to an optimizer:
// it remembers each group's initial lr, sets lr_at(0) at construction, and each step() advances
// the count and sets every group's lr to lr_at(count, base). Call it after optimizer.step():
//
//   AdamW opt(params, {.lr = 1e-3});
//   LRScheduler sched(opt, LinearWarmup(100, CosineAnnealingLR(900)));
//   for (...) { ...backward...; opt.step(); sched.step(); }
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace mixtape {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  // The learning rate after `step` scheduler steps (step >= 0) for initial rate base_lr.
  virtual double lr_at(int64_t step, double base_lr) const = 0;
};

// base_lr * gamma^floor(step / step_size)   (torch.optim.lr_scheduler.StepLR)
class StepLR : public LRSchedule {
 public:
  StepLR(int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2
// (torch.optim.lr_scheduler.CosineAnnealingLR, its closed form; periodic past T_max as there).
class CosineAnnealingLR : public LRSchedule {
 public:
  explicit CosineAnnealingLR(int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t step, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up over the first W steps, then another schedule (or the constant base_lr):
//   step < W:   base_lr * (step + 1) / W          (base_lr / W, 2 base_lr / W, ..., base_lr)
//   step >= W:  after.lr_at(step - W, base_lr)    (the wrapped schedule starts at its step 0)
class LinearWarmup : public LRSchedule {
 public:
  explicit LinearWarmup(int64_t warmup_steps, std::shared_ptr<const LRSchedule> after = nullptr);
  template <std::derived_from<LRSchedule> S>
  LinearWarmup(int64_t warmup_steps, S after)
      : LinearWarmup(warmup_steps, std::make_shared<const S>(std::move(after))) {}
  double lr_at(int64_t step, double base_lr) const override;

 private:
  int64_t warmup_;
  std::shared_ptr<const LRSchedule> after_;
};

// Holds a reference to the optimizer, which must outlive it.
class LRScheduler {
 public:
  LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule);
  template <std::derived_from<LRSchedule> S>
  LRScheduler(Optimizer& optimizer, S schedule)
      : LRScheduler(optimizer, std::make_shared<const S>(std::move(schedule))) {}

  void step();
  int64_t last_step() const { return last_step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  double lr(size_t group = 0) const { return optimizer_.lr(group); }

  // metadata "last_step" and "base_lr.<g>"; loading sets the optimizer's lrs to match.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 private:
  void apply();
  Optimizer& optimizer_;
  std::shared_ptr<const LRSchedule> schedule_;
  std::vector<double> base_lrs_;  // one per parameter group, taken at construction
  int64_t last_step_ = 0;
};

}  // namespace mixtape
