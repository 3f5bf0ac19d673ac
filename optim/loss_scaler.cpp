#include "optim/loss_scaler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "tensor/state_io.h"
#include "tensor/ops/optim.h"

namespace mixtape {

namespace {

constexpr int kMaxExp = 127;  // 2^127: the largest power of two below FLT_MAX

void check_pow2(const char* who, const char* what, double v) {
  MT_CHECK(is_power_of_two(v), who, ": ", what, " must be a power of two in [2^-126, 2^127], got ", v,
           " (Note [Loss scales are powers of two])");
}

void check_clamps(const char* who, float min_scale, float max_scale) {
  check_pow2(who, "min_scale", min_scale);
  if (!std::isinf(max_scale)) check_pow2(who, "max_scale", max_scale);
  MT_CHECK(max_scale > 0.0f && min_scale <= max_scale, who, ": min_scale ", min_scale, " exceeds max_scale ",
           max_scale);
}

void check_init(const char* who, float init, float min_scale, float max_scale) {
  check_pow2(who, "init_scale", init);
  MT_CHECK(init >= min_scale && init <= max_scale, who, ": init_scale ", init, " is outside [min_scale, max_scale] = [",
           min_scale, ", ", max_scale, "]");
}

}  // namespace

// ---- gradient check ------------------------------------------------------------------------

GradCheck check_grads(const std::vector<Variable>& params) {
  NoGrad no_grad;
  GradCheck c;
  // The defined gradients, checked in one call (one read back for gradients on a GPU).
  std::vector<Tensor> grads;
  std::vector<float> scales;
  for (const Variable& p : params) {
    const std::optional<ScaledGrad>& g = p.grad();
    if (!g || !g->defined()) continue;
    grads.push_back(g->g);
    scales.push_back(g->scale);
  }
  const std::vector<GradStats> stats = grad_stats(grads);
  for (size_t i = 0; i < stats.size(); ++i) {
    ++c.grads;
    const GradStats& s = stats[i];
    // g / scale is exact in double (scales are powers of two); past FLT_MAX the fp32 unscaled
    // gradient would be inf, so such a step counts as an overflow too.
    const double m = s.max_abs / double(scales[i]);
    if (s.has_inf_nan || !(m <= double(FLT_MAX))) c.found_inf = true;
    else c.max_abs = std::max(c.max_abs, m);
  }
  return c;
}

// ---- base ------------------------------------------------------------------------------------

bool LossScaler::update(const GradCheck& check) {
  MT_CHECK(!on_device(), name(), " loss scaler: update() decides on the host, but the state is on ", fstate_.device(),
           " (unscale_and_decide decides there)");
  last_scale_ = scale_;
  const bool apply = on_update(check);
  MT_ASSERT(is_power_of_two(scale_), name(), " loss scaler produced scale ", scale_);
  ++steps_;
  if (!apply) ++skipped_;
  last_skipped_ = !apply;
  return apply;
}

float LossScaler::scale() const {
  pull();
  return scale_;
}
int64_t LossScaler::steps() const {
  pull();
  return steps_;
}
int64_t LossScaler::skipped() const {
  pull();
  return skipped_;
}
bool LossScaler::last_skipped() const {
  pull();
  return last_skipped_;
}
float LossScaler::last_scale() const {
  pull();
  return last_scale_;
}

// ---- the state on a device (Note [Loss scale on the device]) ----------------------------------

void LossScaler::keep_on(Device device) {
  if (device.is_cpu()) {
    pull();
    fstate_ = istate_ = Tensor();
    return;
  }
  MT_CHECK(device_rule().has_value(), name(),
           " loss scaler: its rule runs on the host only; it cannot keep its state on ", device);
  pull();
  fstate_ = readout_zeros({formulas::kStepF}, DType::f32, device);
  istate_ = readout_zeros({formulas::kStepI}, DType::i64, device);
  push();
}

void LossScaler::pull() const {
  if (!on_device()) return;
  const std::vector<double> f = fstate_.to_vector(), i = istate_.to_vector();  // one read, or none
  auto* self = const_cast<LossScaler*>(this);  // the host fields mirror the device state
  self->scale_ = float(f[formulas::kScale]);
  self->tracker_ = int64_t(i[formulas::kTracker]);
  self->steps_ = int64_t(i[formulas::kSteps]);
  self->skipped_ = int64_t(i[formulas::kSkipped]);
  self->last_skipped_ = self->steps_ > 0 && f[formulas::kApplied] == 0.0;
  self->last_scale_ = self->steps_ > 0 ? float(f[formulas::kScaleUsed]) : 0.0f;
}

void LossScaler::push() {
  std::vector<float> f(formulas::kStepF, 0.0f);
  f[formulas::kScale] = scale_;
  f[formulas::kScaleUsed] = last_scale_;
  f[formulas::kApplied] = last_skipped_ ? 0.0f : 1.0f;
  f[formulas::kClip] = 1.0f;
  std::vector<int64_t> i(formulas::kStepI, 0);
  i[formulas::kTracker] = tracker_;
  i[formulas::kSteps] = steps_;
  i[formulas::kSkipped] = skipped_;
  fstate_.copy_(from_vector(f, {formulas::kStepF}).to(fstate_.device()));
  istate_.copy_(from_vector(i, {formulas::kStepI}).to(istate_.device()));
}

ScaledGrad LossScaler::seed(const Variable& root) const {
  MT_CHECK(root.defined() && root.numel() == 1, name(), " loss scaler: the seed is for a one-element loss, got ",
           root.defined() ? root.data().meta() : std::string("an undefined Variable"));
  if (!on_device()) return ScaledGrad{full(root.shape(), double(scale_), root.dtype(), root.device()), scale_};
  MT_CHECK(root.device() == fstate_.device(), name(), " loss scaler: the loss ", root.data().meta(),
           " is not on the scaler's device ", fstate_.device());
  // S * ones for one element is S itself: a copy of the device scale, in the loss's dtype.
  const Tensor s = fstate_.narrow(0, formulas::kScale, 1).reshape(root.shape());
  return ScaledGrad{root.dtype() == DType::f32 ? s.clone() : s.to(root.dtype()), 1.0f};
}

std::vector<Tensor> LossScaler::unscale_and_decide(const std::vector<Tensor>& grads, const std::vector<float>& scales,
                                                   double max_grad_norm) {
  MT_CHECK(on_device(), name(), " loss scaler: unscale_and_decide needs the state on a device (keep_on)");
  return unscale_and_decide_(grads, scales, fstate_, istate_, *device_rule(), max_grad_norm);
}

GradCheck LossScaler::last_device_check() const {
  const std::vector<double> f = fstate_.to_vector();
  return GradCheck{.found_inf = f[formulas::kFoundInf] != 0.0, .max_abs = f[formulas::kMaxAbs]};
}
double LossScaler::last_device_grad_norm() const { return fstate_.to_vector()[formulas::kGradNorm]; }
bool LossScaler::last_device_applied() const { return fstate_.to_vector()[formulas::kApplied] != 0.0; }

TensorDict LossScaler::state_dict() const {
  using state_io::format;
  pull();
  TensorDict d;
  d.set_meta("loss_scaler", name());
  d.set_meta("scale", format(double(scale_)));
  d.set_meta("steps", format(steps_));
  d.set_meta("skipped", format(skipped_));
  d.set_meta("last_skipped", format(last_skipped_));
  save_extra(d);
  return d;
}

void LossScaler::load_state_dict(const TensorDict& d) {
  using namespace state_io;
  const std::string kind = d.has_meta("loss_scaler") ? d.meta("loss_scaler") : std::string("(none)");
  MT_CHECK(kind == name(), name(), " loss scaler: load_state_dict got the state of a '", kind, "' scaler");
  MT_CHECK(d.tensors.empty(), name(), " loss scaler: load_state_dict expects metadata only, got tensor '",
           d.tensors.empty() ? "" : d.tensors.front().first, "'");
  const double s = get_double(d, "scale", name());
  check_pow2(name(), "saved 'scale'", s);
  const int64_t steps = get_int(d, "steps", name());
  const int64_t skipped = get_int(d, "skipped", name());
  const bool last = get_bool(d, "last_skipped", name());
  MT_CHECK(steps >= 0 && skipped >= 0 && skipped <= steps, name(), " loss scaler: inconsistent counters steps ", steps,
           ", skipped ", skipped);
  load_extra(d);  // validates before it stores
  scale_ = float(s);
  steps_ = steps;
  skipped_ = skipped;
  last_skipped_ = last;
  if (on_device()) push();
}

// ---- static ----------------------------------------------------------------------------------

StaticLossScaler::StaticLossScaler(float scale) : LossScaler(scale) { check_pow2("StaticLossScaler", "scale", scale); }

// ---- backoff ---------------------------------------------------------------------------------

BackoffLossScaler::BackoffLossScaler(BackoffOptions o) : LossScaler(o.init_scale), options_(o) {
  const char* who = "BackoffLossScaler";
  check_pow2(who, "growth_factor", o.growth_factor);
  check_pow2(who, "backoff_factor", o.backoff_factor);
  MT_CHECK(o.growth_factor >= 1.0f, who, ": growth_factor must be >= 1, got ", o.growth_factor);
  MT_CHECK(o.backoff_factor <= 1.0f, who, ": backoff_factor must be <= 1, got ", o.backoff_factor);
  MT_CHECK(o.growth_interval >= 1, who, ": growth_interval must be >= 1, got ", o.growth_interval);
  check_clamps(who, o.min_scale, o.max_scale);
  check_init(who, o.init_scale, o.min_scale, o.max_scale);
}

std::optional<formulas::LossScaleRule> BackoffLossScaler::device_rule() const {
  return formulas::LossScaleRule{.kind = formulas::LossScaleRule::Kind::backoff,
                                 .growth_factor = options_.growth_factor,
                                 .backoff_factor = options_.backoff_factor,
                                 .min_scale = options_.min_scale,
                                 .max_scale = options_.max_scale,
                                 .growth_interval = options_.growth_interval};
}

int64_t BackoffLossScaler::growth_tracker() const {
  steps();  // brings the device state to the host fields, when it is there
  return tracker_;
}

bool BackoffLossScaler::on_update(const GradCheck& check) {
  return formulas::loss_scale_update(*device_rule(), check.found_inf, scale_, tracker_);
}

void BackoffLossScaler::save_extra(TensorDict& d) const {
  using state_io::format;
  d.set_meta("growth_tracker", format(tracker_));
  d.set_meta("init_scale", format(double(options_.init_scale)));
  d.set_meta("growth_factor", format(double(options_.growth_factor)));
  d.set_meta("backoff_factor", format(double(options_.backoff_factor)));
  d.set_meta("growth_interval", format(options_.growth_interval));
  d.set_meta("min_scale", format(double(options_.min_scale)));
  d.set_meta("max_scale", format(double(options_.max_scale)));
}

void BackoffLossScaler::load_extra(const TensorDict& d) {
  using namespace state_io;
  BackoffOptions o;
  o.init_scale = float(get_double(d, "init_scale", name()));
  o.growth_factor = float(get_double(d, "growth_factor", name()));
  o.backoff_factor = float(get_double(d, "backoff_factor", name()));
  o.growth_interval = get_int(d, "growth_interval", name());
  o.min_scale = float(get_double(d, "min_scale", name()));
  o.max_scale = float(get_double(d, "max_scale", name()));
  const BackoffLossScaler check(o);  // validates the options
  const int64_t tracker = get_int(d, "growth_tracker", name());
  MT_CHECK(tracker >= 0 && tracker < o.growth_interval, name(), " loss scaler: growth_tracker ", tracker,
           " outside [0, growth_interval = ", o.growth_interval, ")");
  const double s = get_double(d, "scale", name());
  MT_CHECK(s >= o.min_scale && s <= o.max_scale, name(), " loss scaler: saved scale ", s,
           " outside [min_scale, max_scale]");
  options_ = o;
  tracker_ = tracker;
}

// ---- LogMax ----------------------------------------------------------------------------------
//
// Note [LogMax statistics]
// Following OpenSeq2Seq's LogMaxScaler (open_seq2seq/optimizers/automatic_loss_scaler.py):
// x = log2 of the step's max |gradient| over all parameters, measured on the unscaled
// gradients; mu is the beta1-average of x and sigma^2 = E[x^2] - E[x]^2 with both expectations
// beta2-averages, all bias-corrected; the next scale puts the log-normal model's 1 - 0.001
// quantile, mu + 3.09 sigma, at the format's overflow exponent log_max: 2^(log_max - mu - 3.09 sigma).
// Where we differ, and why:
//   - a step with inf/NaN gradients feeds x = log_max - log2(S), the smallest log2 max |g|
//     consistent with an overflow at scale S (the unscaled maximum exceeded ~2^log_max / S).
//     OpenSeq2Seq feeds 2^log_max (= 65536) there, in log units, which pins mu near 650 and the
//     scale at its minimum for hundreds of steps; the bound keeps x in the units of the
//     statistic and still pulls the scale down.
//   - a step whose gradients are all zero (or that has none) carries no information about the
//     maximum: the statistics and the scale stay as they are (log2(0) would poison them).
//   - the proposed scale is rounded down to a power of two, so that it never exceeds the
//     quantile rule (Note [Loss scales are powers of two]); OpenSeq2Seq uses 2^(...) unrounded.
//   - the running sums are kept in double rather than fp32 (they are host scalars).

LogMaxLossScaler::LogMaxLossScaler(LogMaxOptions o) : LossScaler(o.init_scale), options_(o) {
  const char* who = "LogMaxLossScaler";
  MT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, who, ": beta1 must be in [0, 1), got ", o.beta1);
  MT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, who, ": beta2 must be in [0, 1), got ", o.beta2);
  MT_CHECK(std::isfinite(o.overflow_std_dev) && o.overflow_std_dev >= 0.0, who,
           ": overflow_std_dev must be finite and >= 0, got ", o.overflow_std_dev);
  MT_CHECK(std::isfinite(o.log_max) && std::abs(o.log_max) <= 1024.0, who, ": log_max must be finite, got ", o.log_max);
  check_clamps(who, o.min_scale, o.max_scale);
  check_init(who, o.init_scale, o.min_scale, o.max_scale);
}

double LogMaxLossScaler::mu() const {
  if (iteration_ == 0) return 0.0;
  return x_hat_ / (1.0 - std::pow(options_.beta1, double(iteration_)));
}

double LogMaxLossScaler::sigma() const {
  if (iteration_ == 0) return 0.0;
  const double c2 = 1.0 - std::pow(options_.beta2, double(iteration_));
  const double slow_mu = slow_x_hat_ / c2;
  return std::sqrt(std::max(xsq_hat_ / c2 - slow_mu * slow_mu, 0.0));
}

bool LogMaxLossScaler::on_update(const GradCheck& check) {
  double x;
  if (check.found_inf) x = options_.log_max - std::log2(double(scale_));
  else if (check.max_abs > 0.0) x = std::log2(check.max_abs);
  else return true;  // no information (Note [LogMax statistics])
  const double b1 = options_.beta1, b2 = options_.beta2;
  x_hat_ = b1 * x_hat_ + (1.0 - b1) * x;
  slow_x_hat_ = b2 * slow_x_hat_ + (1.0 - b2) * x;
  xsq_hat_ = b2 * xsq_hat_ + (1.0 - b2) * (x * x);
  ++iteration_;
  const double log_cutoff = mu() + options_.overflow_std_dev * sigma();
  const double lo = std::log2(double(options_.min_scale));
  const double hi = std::isinf(options_.max_scale) ? double(kMaxExp) : std::log2(double(options_.max_scale));
  const double e = std::clamp(std::floor(options_.log_max - log_cutoff), lo, hi);
  scale_ = float(std::ldexp(1.0, int(e)));
  return !check.found_inf;
}

void LogMaxLossScaler::save_extra(TensorDict& d) const {
  using state_io::format;
  d.set_meta("iteration", format(iteration_));
  d.set_meta("x_hat", format(x_hat_));
  d.set_meta("slow_x_hat", format(slow_x_hat_));
  d.set_meta("xsquared_hat", format(xsq_hat_));
  d.set_meta("init_scale", format(double(options_.init_scale)));
  d.set_meta("beta1", format(options_.beta1));
  d.set_meta("beta2", format(options_.beta2));
  d.set_meta("overflow_std_dev", format(options_.overflow_std_dev));
  d.set_meta("log_max", format(options_.log_max));
  d.set_meta("min_scale", format(double(options_.min_scale)));
  d.set_meta("max_scale", format(double(options_.max_scale)));
}

void LogMaxLossScaler::load_extra(const TensorDict& d) {
  using namespace state_io;
  LogMaxOptions o;
  o.init_scale = float(get_double(d, "init_scale", name()));
  o.beta1 = get_double(d, "beta1", name());
  o.beta2 = get_double(d, "beta2", name());
  o.overflow_std_dev = get_double(d, "overflow_std_dev", name());
  o.log_max = get_double(d, "log_max", name());
  o.min_scale = float(get_double(d, "min_scale", name()));
  o.max_scale = float(get_double(d, "max_scale", name()));
  const LogMaxLossScaler check(o);  // validates the options
  const int64_t it = get_int(d, "iteration", name());
  MT_CHECK(it >= 0, name(), " loss scaler: iteration must be >= 0, got ", it);
  const double xh = get_double(d, "x_hat", name());
  const double sxh = get_double(d, "slow_x_hat", name());
  const double xsq = get_double(d, "xsquared_hat", name());
  MT_CHECK(std::isfinite(xh) && std::isfinite(sxh) && std::isfinite(xsq) && xsq >= 0.0, name(),
           " loss scaler: running statistics must be finite (x_hat ", xh, ", slow_x_hat ", sxh, ", xsquared_hat ", xsq,
           ")");
  const double s = get_double(d, "scale", name());
  MT_CHECK(s >= o.min_scale && s <= o.max_scale, name(), " loss scaler: saved scale ", s,
           " outside [min_scale, max_scale]");
  options_ = o;
  iteration_ = it;
  x_hat_ = xh;
  slow_x_hat_ = sxh;
  xsq_hat_ = xsq;
}

// ---- choosing a scaler by name -------------------------------------------------------------

std::string LossScaleSpec::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::fixed: {
      std::ostringstream os;
      os << "static:" << scale;
      return os.str();
    }
    case Kind::backoff: return "backoff";
    case Kind::logmax: return "logmax";
    case Kind::gradient: return "gradient";
  }
  return "?";
}

LossScaleSpec parse_loss_scale(const std::string& text) {
  const char* accepted =
      " (accepted: none, static:S with S a power of two such as static:1024, backoff, logmax, gradient)";
  if (text == "none") return {};
  if (text == "backoff") return {LossScaleSpec::Kind::backoff};
  if (text == "logmax") return {LossScaleSpec::Kind::logmax};
  if (text == "gradient") return {LossScaleSpec::Kind::gradient};
  if (text.rfind("static:", 0) == 0) {
    const std::string num = text.substr(7);
    size_t used = 0;
    double s = 0.0;
    try {
      s = std::stod(num, &used);
    } catch (const std::exception&) { used = 0; }
    MT_CHECK(used == num.size() && !num.empty(), "loss scale '", text, "': '", num, "' is not a number", accepted);
    MT_CHECK(is_power_of_two(s), "loss scale '", text,
             "': S must be a power of two in [2^-126, 2^127] so that scaling is exact", accepted);
    return {LossScaleSpec::Kind::fixed, float(s)};
  }
  throw Error(detail::cat("unknown loss scale '", text, "'", accepted));
}

std::unique_ptr<LossScaler> make_loss_scaler(const LossScaleSpec& spec, const BackoffOptions& backoff,
                                             const LogMaxOptions& logmax) {
  switch (spec.kind) {
    case LossScaleSpec::Kind::none: return std::make_unique<NoLossScaler>();
    case LossScaleSpec::Kind::fixed: return std::make_unique<StaticLossScaler>(spec.scale);
    case LossScaleSpec::Kind::backoff: return std::make_unique<BackoffLossScaler>(backoff);
    case LossScaleSpec::Kind::logmax: return std::make_unique<LogMaxLossScaler>(logmax);
    case LossScaleSpec::Kind::gradient: return std::make_unique<StaticLossScaler>(1.0f);
  }
  MT_ASSERT(false, "unknown loss scale kind");
}

}  // namespace mixtape
