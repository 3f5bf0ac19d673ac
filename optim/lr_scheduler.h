// Learning-rate schedules. A schedule is a pure function of the step count and the group's
// initial learning rate (PyTorch's closed forms); an LRScheduler binds one to an optimizer:
// it remembers each group's initial lr, sets lr_at(0) at construction, and each step() advances
// the count and sets every group's lr to lr_at(count, base). Call it after optimizer.step():
//
//   AdamW opt(params, {.lr = 1e-3});
//   LRScheduler sched(opt, LinearWarmup(100, CosineAnnealingLR(900)));
//   for (...) { ...backward...; opt.step(); sched.step(); }
//
// Because the lr is a function of the count, a schedule does not compound with changes made to
// the lr by hand (PyTorch's chainable form would), and a resumed schedule needs only its count.
// ReduceLROnPlateau, which depends on the metrics it has seen, is a scheduler of its own (below).
#pragma once

#include <concepts>
#include <string>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace mixtape {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  // The learning rate after `step` scheduler steps (step >= 0) for initial rate base_lr.
  virtual double lr_at(int64_t step, double base_lr) const = 0;
  // The optimizer's momentum (Optimizer::momentum: SGD's momentum, Adam's beta1) after `step`
  // steps, for a schedule that moves it too; nullopt leaves it where it is.
  virtual std::optional<double> momentum_at(int64_t) const { return std::nullopt; }
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
  // The wrapped schedule's, held at its step 0 during the warm-up.
  std::optional<double> momentum_at(int64_t step) const override;

 private:
  int64_t warmup_;
  std::shared_ptr<const LRSchedule> after_;
};

// base_lr * gamma^step   (torch.optim.lr_scheduler.ExponentialLR, its closed form)
class ExponentialLR : public LRSchedule {
 public:
  explicit ExponentialLR(double gamma);
  double lr_at(int64_t step, double base_lr) const override;

 private:
  double gamma_;
};

// base_lr * gamma^(number of milestones <= step)   (torch.optim.lr_scheduler.MultiStepLR; a
// milestone given twice counts twice, as there). Milestones need not be sorted.
class MultiStepLR : public LRSchedule {
 public:
  MultiStepLR(std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t step, double base_lr) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// The 1cycle policy (Smith & Topin), torch.optim.lr_scheduler.OneCycleLR: from
// initial = max_lr / div_factor up to max_lr over the first pct_start of total_steps, then down
// to min = initial / final_div_factor; three_phase: up, back down to initial (as long as the way
// up), then down to min. Each phase anneals with
//   cos     end + (start - end) / 2 * (cos(pi * pct) + 1)
//   linear  (end - start) * pct + start
// pct being the fraction of the phase done (PyTorch's phase ends: pct_start * total_steps - 1,
// 2 pct_start * total_steps - 2, total_steps - 1). Every group follows max_lr (the groups'
// own lrs are not read). A loop that calls step() after each of its total_steps updates ends at
// step total_steps, where no update follows: there the lr stays at its final value (PyTorch
// extrapolates the last phase one step on, which with linear annealing can give a negative lr);
// stepping past it throws, as PyTorch does.
// cycle_momentum (on by default, as in PyTorch) moves the optimizer's momentum against the lr
// with the same annealing: max_momentum down to base_momentum while the lr rises, back up to
// max_momentum while it falls (three_phase: and there it stays for the last phase). It is SGD's
// or RMSprop's momentum, or Adam's beta1 (Optimizer::momentum); an optimizer without one
// (Adagrad) is refused by the LRScheduler. PyTorch sets it per group; here it is one value for
// the optimizer, as the option it moves is.
class OneCycleLR : public LRSchedule {
 public:
  enum class Anneal : uint8_t { cos, linear };
  struct Options {
    double pct_start = 0.3;
    Anneal anneal = Anneal::cos;
    double div_factor = 25.0;
    double final_div_factor = 1e4;
    bool three_phase = false;
    bool cycle_momentum = true;
    double base_momentum = 0.85;
    double max_momentum = 0.95;
  };
  OneCycleLR(double max_lr, int64_t total_steps, Options options);
  OneCycleLR(double max_lr, int64_t total_steps) : OneCycleLR(max_lr, total_steps, Options{}) {}
  double lr_at(int64_t step, double base_lr) const override;
  std::optional<double> momentum_at(int64_t step) const override;

 private:
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };
  // The phase holding `step` and the fraction of it done.
  std::pair<const Phase*, double> locate(int64_t step) const;
  double anneal(double start, double end, double pct) const;
  std::vector<Phase> phases_;
  int64_t total_;
  Anneal anneal_;
  bool cycle_momentum_;
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
  // Sets every group's lr, and the momentum where the schedule moves it, for `step`; computes
  // them all before setting any.
  void apply(int64_t step);
  Optimizer& optimizer_;
  std::shared_ptr<const LRSchedule> schedule_;
  std::vector<double> base_lrs_;  // one per parameter group, taken at construction
  int64_t last_step_ = 0;
};

// torch.optim.lr_scheduler.ReduceLROnPlateau: step(metric) once per evaluation; after more than
// `patience` evaluations without improvement every group's lr becomes max(lr * factor, min_lr),
// unless that changes it by eps or less, and `cooldown` evaluations pass before bad ones count
// again. Improvement (a metric better than the best so far):
//   min, rel:  metric < best * (1 - threshold)       min, abs:  metric < best - threshold
//   max, rel:  metric > best * (1 + threshold)       max, abs:  metric > best + threshold
// A NaN metric is never an improvement. Holds a reference to the optimizer.
class ReduceLROnPlateau {
 public:
  enum class Mode : uint8_t { min, max };
  enum class ThresholdMode : uint8_t { rel, abs };
  struct Options {
    Mode mode = Mode::min;
    double factor = 0.1;  // in [0, 1)
    int64_t patience = 10;
    double threshold = 1e-4;
    ThresholdMode threshold_mode = ThresholdMode::rel;
    int64_t cooldown = 0;
    double min_lr = 0.0;  // for every group
    double eps = 1e-8;
  };
  ReduceLROnPlateau(Optimizer& optimizer, Options options);
  explicit ReduceLROnPlateau(Optimizer& optimizer) : ReduceLROnPlateau(optimizer, Options{}) {}

  void step(double metric);
  const Options& options() const { return options_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  int64_t last_epoch() const { return last_epoch_; }
  double lr(size_t group = 0) const { return optimizer_.lr(group); }

  // metadata: the options ("mode", "factor", ...) and the counters "best", "num_bad_epochs",
  // "cooldown_counter", "last_epoch". The lrs themselves are the optimizer's state; loading
  // restores options and counters (validated before anything changes).
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 private:
  static void validate(const Options& o);
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  Options options_;
  double best_;
  int64_t num_bad_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace mixtape
