#include "optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "tensor/state_io.h"

namespace mixtape {

StepLR::StepLR(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  MT_CHECK(step_size > 0, "StepLR: step_size must be > 0, got ", step_size);
  MT_CHECK(std::isfinite(gamma) && gamma >= 0.0, "StepLR: gamma must be finite and >= 0, got ", gamma);
}

double StepLR::lr_at(int64_t step, double base_lr) const {
  return base_lr * std::pow(gamma_, double(step / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(int64_t T_max, double eta_min) : t_max_(T_max), eta_min_(eta_min) {
  MT_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", T_max);
  MT_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, "CosineAnnealingLR: eta_min must be finite and >= 0, got ",
           eta_min);
}

double CosineAnnealingLR::lr_at(int64_t step, double base_lr) const {
  return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(std::numbers::pi * double(step) / double(t_max_))) / 2.0;
}

LinearWarmup::LinearWarmup(int64_t warmup_steps, std::shared_ptr<const LRSchedule> after)
    : warmup_(warmup_steps), after_(std::move(after)) {
  MT_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
}

double LinearWarmup::lr_at(int64_t step, double base_lr) const {
  if (step < warmup_) return base_lr * double(step + 1) / double(warmup_);
  return after_ ? after_->lr_at(step - warmup_, base_lr) : base_lr;
}

LRScheduler::LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  MT_CHECK(schedule_ != nullptr, "LRScheduler: no schedule given");
  for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) base_lrs_.push_back(optimizer_.lr(g));
  apply();
}

void LRScheduler::apply() {
  MT_CHECK(base_lrs_.size() == optimizer_.param_groups().size(), "LRScheduler: the optimizer has ",
           optimizer_.param_groups().size(), " parameter groups, the scheduler knows ", base_lrs_.size(),
           " (groups added after the scheduler was made)");
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set_lr(g, schedule_->lr_at(last_step_, base_lrs_[g]));
}

void LRScheduler::step() {
  ++last_step_;
  apply();
}

TensorDict LRScheduler::state_dict() const {
  TensorDict d;
  d.set_meta("last_step", state_io::format(last_step_));
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    d.set_meta("base_lr." + std::to_string(g), state_io::format(base_lrs_[g]));
  return d;
}

void LRScheduler::load_state_dict(const TensorDict& d) {
  const int64_t last = state_io::get_int(d, "last_step", "LRScheduler");
  MT_CHECK(last >= 0, "LRScheduler state dict: last_step must be >= 0, got ", last);
  std::vector<double> base;
  for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
    base.push_back(state_io::get_double(d, "base_lr." + std::to_string(g), "LRScheduler"));
    MT_CHECK(std::isfinite(base.back()) && base.back() >= 0.0, "LRScheduler state dict: base_lr.", g,
             " must be finite and >= 0, got ", base.back());
  }
  MT_CHECK(!d.has_meta("base_lr." + std::to_string(base.size())), "LRScheduler state dict: it has more than the ",
           base.size(), " parameter groups of the optimizer");
  base_lrs_ = std::move(base);
  last_step_ = last;
  apply();
}

}  // namespace mixtape
