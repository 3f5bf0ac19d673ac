#include "optim/lr_scheduler.h"

#include <algorithm>
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

std::optional<double> LinearWarmup::momentum_at(int64_t step) const {
  if (!after_) return std::nullopt;
  return after_->momentum_at(std::max<int64_t>(step - warmup_, 0));
}

ExponentialLR::ExponentialLR(double gamma) : gamma_(gamma) {
  MT_CHECK(std::isfinite(gamma) && gamma >= 0.0, "ExponentialLR: gamma must be finite and >= 0, got ", gamma);
}

double ExponentialLR::lr_at(int64_t step, double base_lr) const { return base_lr * std::pow(gamma_, double(step)); }

MultiStepLR::MultiStepLR(std::vector<int64_t> milestones, double gamma)
    : milestones_(std::move(milestones)), gamma_(gamma) {
  for (int64_t m : milestones_) MT_CHECK(m >= 0, "MultiStepLR: milestones must be >= 0, got ", m);
  MT_CHECK(std::isfinite(gamma) && gamma >= 0.0, "MultiStepLR: gamma must be finite and >= 0, got ", gamma);
  std::sort(milestones_.begin(), milestones_.end());
}

double MultiStepLR::lr_at(int64_t step, double base_lr) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return base_lr * std::pow(gamma_, double(passed));
}

OneCycleLR::OneCycleLR(double max_lr, int64_t total_steps, Options o)
    : total_(total_steps), anneal_(o.anneal), cycle_momentum_(o.cycle_momentum) {
  MT_CHECK(std::isfinite(max_lr) && max_lr >= 0.0, "OneCycleLR: max_lr must be finite and >= 0, got ", max_lr);
  MT_CHECK(total_steps > 0, "OneCycleLR: total_steps must be > 0, got ", total_steps);
  MT_CHECK(o.pct_start >= 0.0 && o.pct_start <= 1.0, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start);
  MT_CHECK(std::isfinite(o.div_factor) && o.div_factor > 0.0, "OneCycleLR: div_factor must be finite and > 0, got ",
           o.div_factor);
  MT_CHECK(std::isfinite(o.final_div_factor) && o.final_div_factor > 0.0,
           "OneCycleLR: final_div_factor must be finite and > 0, got ", o.final_div_factor);
  MT_CHECK(o.anneal == Anneal::cos || o.anneal == Anneal::linear, "OneCycleLR: invalid anneal strategy ",
           int(o.anneal));
  // The optimizer checks the range when it takes the value (Optimizer::set_momentum).
  MT_CHECK(!o.cycle_momentum || (std::isfinite(o.base_momentum) && std::isfinite(o.max_momentum)),
           "OneCycleLR: base_momentum and max_momentum must be finite, got ", o.base_momentum, " and ", o.max_momentum);
  const double initial = max_lr / o.div_factor, min_lr = initial / o.final_div_factor;
  const double up = o.pct_start * double(total_steps), last = double(total_steps - 1);
  const double lo = o.base_momentum, hi = o.max_momentum;
  if (o.three_phase)
    phases_ = {{up - 1.0, initial, max_lr, hi, lo},
               {2.0 * up - 2.0, max_lr, initial, lo, hi},
               {last, initial, min_lr, hi, hi}};
  else phases_ = {{up - 1.0, initial, max_lr, hi, lo}, {last, max_lr, min_lr, lo, hi}};
  // PyTorch divides by each phase's length; a phase of length <= 0 would divide by zero there.
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    MT_CHECK(phases_[i].end_step > start, "OneCycleLR: phase ", i + 1, " of ", phases_.size(), " ends at step ",
             phases_[i].end_step, ", not after ", start, " (total_steps ", total_steps, ", pct_start ", o.pct_start,
             "): give more steps or another pct_start");
    start = phases_[i].end_step;
  }
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t step) const {
  MT_CHECK(step <= total_, "OneCycleLR: tried to step ", step, " times; the schedule has total_steps ", total_);
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (double(step) <= ph.end_step || i + 1 == phases_.size())  // step total_steps: pct 1 (lr_scheduler.h)
      return {&ph, std::min(1.0, (double(step) - start) / (ph.end_step - start))};
    start = ph.end_step;
  }
  MT_ASSERT(false, "OneCycleLR: no phase");
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (anneal_ == Anneal::linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
}

double OneCycleLR::lr_at(int64_t step, double) const {
  const auto [ph, pct] = locate(step);
  return anneal(ph->start_lr, ph->end_lr, pct);
}

std::optional<double> OneCycleLR::momentum_at(int64_t step) const {
  if (!cycle_momentum_) return std::nullopt;
  const auto [ph, pct] = locate(step);
  return anneal(ph->start_momentum, ph->end_momentum, pct);
}

LRScheduler::LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  MT_CHECK(schedule_ != nullptr, "LRScheduler: no schedule given");
  for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) base_lrs_.push_back(optimizer_.lr(g));
  MT_CHECK(!schedule_->momentum_at(0) || optimizer_.momentum(), "LRScheduler: the schedule moves the momentum, and ",
           optimizer_.name(), " has no momentum or beta1 (OneCycleLR: set cycle_momentum = false)");
  apply(0);
}

void LRScheduler::apply(int64_t step) {
  MT_CHECK(base_lrs_.size() == optimizer_.param_groups().size(), "LRScheduler: the optimizer has ",
           optimizer_.param_groups().size(), " parameter groups, the scheduler knows ", base_lrs_.size(),
           " (groups added after the scheduler was made)");
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(schedule_->lr_at(step, base_lrs_[g]));
  for (double lr : lrs)
    MT_CHECK(std::isfinite(lr) && lr >= 0.0, "LRScheduler: the schedule gives lr ", lr, " at step ", step);
  if (const std::optional<double> m = schedule_->momentum_at(step)) optimizer_.set_momentum(*m);  // validates first
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set_lr(g, lrs[g]);
}

void LRScheduler::step() {
  apply(last_step_ + 1);  // throws, with nothing changed, past the end of a OneCycleLR
  ++last_step_;
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
  // The lrs first: a count past the end of the schedule throws before anything changes.
  const std::vector<double> old_base = base_lrs_;
  base_lrs_ = std::move(base);
  try {
    apply(last);
  } catch (...) {
    base_lrs_ = old_base;
    throw;
  }
  last_step_ = last;
}

// ---- ReduceLROnPlateau ------------------------------------------------------------------------

namespace {

const char* plateau_mode_name(ReduceLROnPlateau::Mode m) { return m == ReduceLROnPlateau::Mode::min ? "min" : "max"; }
const char* threshold_mode_name(ReduceLROnPlateau::ThresholdMode m) {
  return m == ReduceLROnPlateau::ThresholdMode::rel ? "rel" : "abs";
}

}  // namespace

void ReduceLROnPlateau::validate(const Options& o) {
  const char* who = "ReduceLROnPlateau";
  MT_CHECK(o.mode == Mode::min || o.mode == Mode::max, who, ": invalid mode ", int(o.mode));
  MT_CHECK(o.threshold_mode == ThresholdMode::rel || o.threshold_mode == ThresholdMode::abs, who,
           ": invalid threshold mode ", int(o.threshold_mode));
  MT_CHECK(o.factor >= 0.0 && o.factor < 1.0, who, ": factor must be in [0, 1), got ", o.factor);
  MT_CHECK(o.patience >= 0, who, ": patience must be >= 0, got ", o.patience);
  MT_CHECK(std::isfinite(o.threshold) && o.threshold >= 0.0, who, ": threshold must be finite and >= 0, got ",
           o.threshold);
  MT_CHECK(o.cooldown >= 0, who, ": cooldown must be >= 0, got ", o.cooldown);
  MT_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0.0, who, ": min_lr must be finite and >= 0, got ", o.min_lr);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, who, ": eps must be finite and >= 0, got ", o.eps);
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, Options options) : optimizer_(optimizer), options_(options) {
  validate(options_);
  best_ = options_.mode == Mode::min ? INFINITY : -INFINITY;
}

bool ReduceLROnPlateau::is_better(double a) const {
  const Options& o = options_;
  if (o.mode == Mode::min)
    return o.threshold_mode == ThresholdMode::rel ? a < best_ * (1.0 - o.threshold) : a < best_ - o.threshold;
  return o.threshold_mode == ThresholdMode::rel ? a > best_ * (o.threshold + 1.0) : a > best_ + o.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_ = 0;  // bad epochs do not count during the cooldown
  }
  if (num_bad_ > options_.patience) {
    for (size_t g = 0; g < optimizer_.param_groups().size(); ++g) {
      const double old_lr = optimizer_.lr(g);
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_ = 0;
  }
}

TensorDict ReduceLROnPlateau::state_dict() const {
  using state_io::format;
  TensorDict d;
  d.set_meta("mode", plateau_mode_name(options_.mode));
  d.set_meta("factor", format(options_.factor));
  d.set_meta("patience", format(options_.patience));
  d.set_meta("threshold", format(options_.threshold));
  d.set_meta("threshold_mode", threshold_mode_name(options_.threshold_mode));
  d.set_meta("cooldown", format(options_.cooldown));
  d.set_meta("min_lr", format(options_.min_lr));
  d.set_meta("eps", format(options_.eps));
  d.set_meta("best", format(best_));
  d.set_meta("num_bad_epochs", format(num_bad_));
  d.set_meta("cooldown_counter", format(cooldown_counter_));
  d.set_meta("last_epoch", format(last_epoch_));
  return d;
}

void ReduceLROnPlateau::load_state_dict(const TensorDict& d) {
  using namespace state_io;
  const char* who = "ReduceLROnPlateau";
  auto text = [&](const std::string& key) {
    MT_CHECK(d.has_meta(key), who, " state dict: missing metadata entry '", key, "'");
    return d.meta(key);
  };
  Options o;
  const std::string mode = text("mode"), tmode = text("threshold_mode");
  MT_CHECK(mode == "min" || mode == "max", who, " state dict: mode '", mode, "' is not min or max");
  MT_CHECK(tmode == "rel" || tmode == "abs", who, " state dict: threshold_mode '", tmode, "' is not rel or abs");
  o.mode = mode == "min" ? Mode::min : Mode::max;
  o.threshold_mode = tmode == "rel" ? ThresholdMode::rel : ThresholdMode::abs;
  o.factor = get_double(d, "factor", who);
  o.patience = get_int(d, "patience", who);
  o.threshold = get_double(d, "threshold", who);
  o.cooldown = get_int(d, "cooldown", who);
  o.min_lr = get_double(d, "min_lr", who);
  o.eps = get_double(d, "eps", who);
  validate(o);
  const double best = get_double(d, "best", who);
  const int64_t bad = get_int(d, "num_bad_epochs", who), cool = get_int(d, "cooldown_counter", who),
                last = get_int(d, "last_epoch", who);
  MT_CHECK(!std::isnan(best), who, " state dict: best is NaN");
  MT_CHECK(bad >= 0 && cool >= 0 && last >= 0, who,
           " state dict: num_bad_epochs, cooldown_counter and last_epoch must be >= 0, got ", bad, ", ", cool, ", ",
           last);
  options_ = o;
  best_ = best;
  num_bad_ = bad;
  cooldown_counter_ = cool;
  last_epoch_ = last;
}

}  // namespace mixtape
