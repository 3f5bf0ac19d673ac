#include "optim/pure16.h"

#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "tensor/state_io.h"
#include "tensor/ops/optim.h"

namespace mixtape {

const char* update_rounding_name(UpdateRounding r) {
  switch (r) {
    case UpdateRounding::nearest: return "nearest";
    case UpdateRounding::stochastic: return "stochastic";
    case UpdateRounding::kahan: return "kahan";
  }
  return "?";
}

UpdateRounding update_rounding_from_name(const std::string& name) {
  if (name == "nearest") return UpdateRounding::nearest;
  if (name == "stochastic") return UpdateRounding::stochastic;
  if (name == "kahan") return UpdateRounding::kahan;
  throw Error(detail::cat("unknown update rounding '", name, "' (expected nearest, stochastic or kahan)"));
}

DecayRate16 decay_rate_16(double rate, DType format) {
  MT_CHECK(is_16bit(format), "decay_rate_16: format must be bf16 or f16, got ", dtype_name(format));
  const double r =
      format == DType::bf16 ? double(to_float(round_to_bf16_f64(rate))) : double(to_float(round_to_half_f64(rate)));
  if (rate < 1.0 && r >= 1.0) {
    // The largest value below 1: 1 - 2^-(p) with p = 8 (bf16) or 11 (f16) significand bits.
    return DecayRate16{1.0 - std::ldexp(1.0, format == DType::bf16 ? -8 : -11), true};
  }
  return DecayRate16{r, false};
}

namespace {

// Prints each distinct message once per process.
void warn_once(const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(msg).second) std::fprintf(stderr, "mixtape warning: %s\n", msg.c_str());
}

std::vector<DType> formats_of(const Optimizer& opt) {
  std::vector<DType> out;
  for (const ParamGroup& g : opt.param_groups())
    for (const Variable& p : g.params) {
      bool seen = false;
      for (DType d : out) seen = seen || d == p.dtype();
      if (!seen) out.push_back(p.dtype());
    }
  return out;
}

void check_params_16bit(const Optimizer& opt) {
  for (const ParamGroup& g : opt.param_groups())
    for (const Variable& p : g.params)
      MT_CHECK(is_16bit(p.dtype()), opt.name(), ": parameter '", p.name(), "' ", p.data().meta(),
               " must be bf16 or f16 (pure 16-bit training keeps weights and state in 16 bits; use "
               "MasterWeights for f32 parameters)");
}

// The messages for the rates `rates` (name, value) in every format the optimizer holds.
std::vector<std::string> rate_warnings(const Optimizer& opt, const std::vector<std::pair<const char*, double>>& rates) {
  std::vector<std::string> out;
  for (DType f : formats_of(opt))
    for (const auto& [what, v] : rates) {
      const DecayRate16 d = decay_rate_16(v, f);
      if (d.adjusted)
        out.push_back(detail::cat(opt.name(), ": ", what, " = ", state_io::format(v), " rounds to 1 in ", dtype_name(f),
                                  "; using ", state_io::format(d.value), ", the largest ", dtype_name(f),
                                  " value below 1 (Note [16-bit hyper-parameters])"));
    }
  return out;
}

void check_rounding(const char* who, UpdateRounding r) {
  MT_CHECK(r == UpdateRounding::nearest || r == UpdateRounding::stochastic || r == UpdateRounding::kahan, who,
           ": invalid update rounding ", int(r));
}

Rounding kernel_rounding(UpdateRounding r) {
  return r == UpdateRounding::stochastic ? Rounding::stochastic : Rounding::nearest;
}

uint64_t get_u64(const TensorDict& d, const std::string& key, const char* owner) {
  MT_CHECK(d.has_meta(key), owner, " state dict: missing metadata entry '", key, "'");
  const std::string& s = d.meta(key);
  bool ok = !s.empty() && s.size() <= 20;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  uint64_t v = 0;
  if (ok) {
    try {
      v = std::stoull(s);
    } catch (const std::exception&) { ok = false; }
  }
  MT_CHECK(ok, owner, " state dict: metadata '", key, "' = '", s, "' is not an unsigned 64-bit integer");
  return v;
}

}  // namespace

// ---- shared by the 16-bit optimizers --------------------------------------------------------------

uint64_t Pure16Optimizer::stream_offset(UpdateRounding rounding, int64_t numel) {
  return rounding == UpdateRounding::stochastic ? gen_.advance(uint64_t(numel)) : gen_.offset();
}

void Pure16Optimizer::set_warnings(std::vector<std::string> warnings) {
  warnings_ = std::move(warnings);
  for (const std::string& w : warnings_) warn_once(w);
}

void Pure16Optimizer::save_rounding(TensorDict& d, UpdateRounding rounding) const {
  d.set_meta("rounding", update_rounding_name(rounding));
  // uint64 values as decimal text: seeds above 2^63 keep their bits through int64.
  d.set_meta("rng.seed", std::to_string(gen_.seed()));
  d.set_meta("rng.offset", std::to_string(gen_.offset()));
}

Pure16Optimizer::RoundingState Pure16Optimizer::load_rounding(const TensorDict& d) const {
  MT_CHECK(d.has_meta("rounding"), name(), " state dict: missing metadata entry 'rounding'");
  return {update_rounding_from_name(d.meta("rounding")), get_u64(d, "rng.seed", name()),
          get_u64(d, "rng.offset", name())};
}

// ---- SGD16 -----------------------------------------------------------------------------------

SGD16::SGD16(std::vector<Variable> params, SGD16Options options)
    : Pure16Optimizer(options.lr, options.weight_decay, options.seed), options_(options) {
  validate(options_);
  add_param_group(std::move(params));
  check_params_16bit(*this);
  refresh_warnings();
}

void SGD16::refresh_warnings() { set_warnings(rate_warnings(*this, {{"momentum", options_.momentum}})); }

void SGD16::validate(const SGD16Options& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(std::isfinite(o.momentum) && o.momentum >= 0.0, name(), ": momentum must be finite and >= 0, got ",
           o.momentum);
  check_rounding(name(), o.rounding);
}

std::vector<std::string> SGD16::buffer_names() const {
  std::vector<std::string> names;
  if (options_.momentum != 0.0) names.push_back("momentum_buffer");
  if (options_.rounding == UpdateRounding::kahan) names.push_back("kahan_comp");
  return names;
}

// A 16-bit parameter is its own weight: set_rounded_copy accepts f32 parameters only, so the
// 16-bit rules never receive a rounded copy.
void SGD16::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t, Tensor*) {
  Tensor none_m, none_c;
  size_t b = 0;
  Tensor& mom = options_.momentum != 0.0 ? state.buffers[b++] : none_m;
  Tensor& comp = options_.rounding == UpdateRounding::kahan ? state.buffers[b++] : none_c;
  const double momentum = options_.momentum != 0.0 ? decay_rate_16(options_.momentum, param.dtype()).value : 0.0;
  const uint64_t offset = stream_offset(options_.rounding, param.numel());
  sgd16_update_(param, grad, mom, comp, group.lr, momentum, group.weight_decay, kernel_rounding(options_.rounding),
                generator().seed(), offset);
}

void SGD16::save_options(TensorDict& d) const {
  d.set_meta("momentum", state_io::format(options_.momentum));
  save_rounding(d, options_.rounding);
}

void SGD16::set_momentum(double momentum) {
  replace_momentum(
      options_, &SGD16Options::momentum, momentum, [&](const SGD16Options& o) { validate(o); }, true);
  refresh_warnings();
}

void SGD16::load_options(const TensorDict& d) {
  SGD16Options o = options_;
  o.momentum = state_io::get_double(d, "momentum", name());
  const RoundingState r = load_rounding(d);
  o.rounding = r.rounding;
  validate(o);
  o.seed = r.seed;
  options_ = o;
  restore_stream(r);
  refresh_warnings();
}

// ---- AdamW16 ---------------------------------------------------------------------------------

AdamW16::AdamW16(std::vector<Variable> params, AdamW16Options options)
    : Pure16Optimizer(options.lr, options.weight_decay, options.seed), options_(options) {
  validate(options_);
  add_param_group(std::move(params));
  check_params_16bit(*this);
  refresh_warnings();
}

void AdamW16::refresh_warnings() {
  std::vector<std::string> warnings = rate_warnings(*this, {{"beta1", options_.beta1}, {"beta2", options_.beta2}});
  for (DType f : formats_of(*this))
    if (f == DType::f16)
      warnings.push_back(
          "AdamW16: exp_avg_sq in f16 holds g^2, which underflows to 0 for |g| < 2^-12 and overflows for "
          "|g| > 256 (bf16 has the range for it)");
  set_warnings(std::move(warnings));
}

void AdamW16::validate(const AdamW16Options& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, name(), ": beta1 must be in [0, 1), got ", o.beta1);
  MT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, name(), ": beta2 must be in [0, 1), got ", o.beta2);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
  check_rounding(name(), o.rounding);
}

std::vector<std::string> AdamW16::buffer_names() const {
  std::vector<std::string> names{"exp_avg", "exp_avg_sq"};
  if (options_.amsgrad) names.push_back("max_exp_avg_sq");
  if (options_.rounding == UpdateRounding::kahan) names.push_back("kahan_comp");
  return names;
}

void AdamW16::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                    Tensor*) {
  Tensor none;
  size_t b = 2;
  Tensor* vmax = options_.amsgrad ? &state.buffers[b++] : nullptr;
  Tensor& comp = options_.rounding == UpdateRounding::kahan ? state.buffers[b++] : none;
  const double beta1 = decay_rate_16(options_.beta1, param.dtype()).value;
  const double beta2 = decay_rate_16(options_.beta2, param.dtype()).value;
  const uint64_t offset = stream_offset(options_.rounding, param.numel());
  adamw16_update_(param, grad, state.buffers[0], state.buffers[1], comp, group.lr, beta1, beta2, options_.eps,
                  group.weight_decay, step, kernel_rounding(options_.rounding), generator().seed(), offset, vmax);
}

void AdamW16::save_options(TensorDict& d) const {
  d.set_meta("beta1", state_io::format(options_.beta1));
  d.set_meta("beta2", state_io::format(options_.beta2));
  d.set_meta("eps", state_io::format(options_.eps));
  d.set_meta("amsgrad", state_io::format(options_.amsgrad));
  save_rounding(d, options_.rounding);
}

void AdamW16::set_momentum(double beta1) {
  replace_momentum(
      options_, &AdamW16Options::beta1, beta1, [&](const AdamW16Options& o) { validate(o); }, false);
  refresh_warnings();
}

void AdamW16::load_options(const TensorDict& d) {
  AdamW16Options o = options_;
  o.beta1 = state_io::get_double(d, "beta1", name());
  o.beta2 = state_io::get_double(d, "beta2", name());
  o.eps = state_io::get_double(d, "eps", name());
  // Absent in state saved before amsgrad existed: those optimizers had none.
  o.amsgrad = d.has_meta("amsgrad") && state_io::get_bool(d, "amsgrad", name());
  const RoundingState r = load_rounding(d);
  o.rounding = r.rounding;
  validate(o);
  o.seed = r.seed;
  options_ = o;
  restore_stream(r);
  refresh_warnings();
}

// ---- RMSprop16 -------------------------------------------------------------------------------

RMSprop16::RMSprop16(std::vector<Variable> params, RMSprop16Options options)
    : Pure16Optimizer(options.lr, options.weight_decay, options.seed), options_(options) {
  validate(options_);
  add_param_group(std::move(params));
  check_params_16bit(*this);
  refresh_warnings();
}

void RMSprop16::refresh_warnings() {
  std::vector<std::string> warnings =
      rate_warnings(*this, {{"alpha", options_.alpha}, {"momentum", options_.momentum}});
  for (DType f : formats_of(*this))
    if (f == DType::f16)
      warnings.push_back(
          "RMSprop16: square_avg in f16 holds g^2, which underflows to 0 for |g| < 2^-12 and overflows for "
          "|g| > 256 (bf16 has the range for it)");
  set_warnings(std::move(warnings));
}

void RMSprop16::validate(const RMSprop16Options& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(o.alpha >= 0.0 && o.alpha < 1.0, name(), ": alpha must be in [0, 1), got ", o.alpha);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
  MT_CHECK(std::isfinite(o.momentum) && o.momentum >= 0.0, name(), ": momentum must be finite and >= 0, got ",
           o.momentum);
  check_rounding(name(), o.rounding);
}

std::vector<std::string> RMSprop16::buffer_names() const {
  std::vector<std::string> names{"square_avg"};
  if (options_.momentum > 0.0) names.push_back("momentum_buffer");
  if (options_.centered) names.push_back("grad_avg");
  if (options_.rounding == UpdateRounding::kahan) names.push_back("kahan_comp");
  return names;
}

void RMSprop16::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t, Tensor*) {
  Tensor none_b, none_a, none_c;
  size_t b = 1;
  Tensor& buf = options_.momentum > 0.0 ? state.buffers[b++] : none_b;
  Tensor& avg = options_.centered ? state.buffers[b++] : none_a;
  Tensor& comp = options_.rounding == UpdateRounding::kahan ? state.buffers[b++] : none_c;
  const double alpha = decay_rate_16(options_.alpha, param.dtype()).value;
  const double momentum = options_.momentum > 0.0 ? decay_rate_16(options_.momentum, param.dtype()).value : 0.0;
  const uint64_t offset = stream_offset(options_.rounding, param.numel());
  rmsprop16_update_(param, grad, state.buffers[0], avg, buf, comp, group.lr, alpha, options_.eps, group.weight_decay,
                    momentum, options_.centered, kernel_rounding(options_.rounding), generator().seed(), offset);
}

void RMSprop16::save_options(TensorDict& d) const {
  d.set_meta("alpha", state_io::format(options_.alpha));
  d.set_meta("eps", state_io::format(options_.eps));
  d.set_meta("momentum", state_io::format(options_.momentum));
  d.set_meta("centered", state_io::format(options_.centered));
  save_rounding(d, options_.rounding);
}

void RMSprop16::set_momentum(double momentum) {
  replace_momentum(
      options_, &RMSprop16Options::momentum, momentum, [&](const RMSprop16Options& o) { validate(o); }, true);
  refresh_warnings();
}

void RMSprop16::load_options(const TensorDict& d) {
  RMSprop16Options o = options_;
  o.alpha = state_io::get_double(d, "alpha", name());
  o.eps = state_io::get_double(d, "eps", name());
  o.momentum = state_io::get_double(d, "momentum", name());
  o.centered = state_io::get_bool(d, "centered", name());
  const RoundingState r = load_rounding(d);
  o.rounding = r.rounding;
  validate(o);
  o.seed = r.seed;
  options_ = o;
  restore_stream(r);
  refresh_warnings();
}

// ---- Adagrad16 -------------------------------------------------------------------------------

Adagrad16::Adagrad16(std::vector<Variable> params, Adagrad16Options options)
    : Pure16Optimizer(options.lr, options.weight_decay, options.seed), options_(options) {
  validate(options_);
  add_param_group(std::move(params));
  check_params_16bit(*this);
  refresh_warnings();
}

void Adagrad16::refresh_warnings() {
  std::vector<std::string> warnings;
  for (DType f : formats_of(*this))
    if (f == DType::f16)
      warnings.push_back(
          "Adagrad16: sum in f16 accumulates g^2, which underflows to 0 for |g| < 2^-12 and overflows past "
          "65504 (bf16 has the range for it)");
  set_warnings(std::move(warnings));
}

void Adagrad16::validate(const Adagrad16Options& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(std::isfinite(o.lr_decay) && o.lr_decay >= 0.0, name(), ": lr_decay must be finite and >= 0, got ",
           o.lr_decay);
  MT_CHECK(std::isfinite(o.initial_accumulator_value) && o.initial_accumulator_value >= 0.0, name(),
           ": initial_accumulator_value must be finite and >= 0, got ", o.initial_accumulator_value);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
  check_rounding(name(), o.rounding);
}

std::vector<std::string> Adagrad16::buffer_names() const {
  std::vector<std::string> names{"sum"};
  if (options_.rounding == UpdateRounding::kahan) names.push_back("kahan_comp");
  return names;
}

void Adagrad16::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                      Tensor*) {
  Tensor none;
  Tensor& comp = options_.rounding == UpdateRounding::kahan ? state.buffers[1] : none;
  const uint64_t offset = stream_offset(options_.rounding, param.numel());
  adagrad16_update_(param, grad, state.buffers[0], comp, group.lr, options_.lr_decay, options_.eps, group.weight_decay,
                    step, kernel_rounding(options_.rounding), generator().seed(), offset);
}

void Adagrad16::save_options(TensorDict& d) const {
  d.set_meta("lr_decay", state_io::format(options_.lr_decay));
  d.set_meta("initial_accumulator_value", state_io::format(options_.initial_accumulator_value));
  d.set_meta("eps", state_io::format(options_.eps));
  save_rounding(d, options_.rounding);
}

void Adagrad16::load_options(const TensorDict& d) {
  Adagrad16Options o = options_;
  o.lr_decay = state_io::get_double(d, "lr_decay", name());
  o.initial_accumulator_value = state_io::get_double(d, "initial_accumulator_value", name());
  o.eps = state_io::get_double(d, "eps", name());
  const RoundingState r = load_rounding(d);
  o.rounding = r.rounding;
  validate(o);
  o.seed = r.seed;
  options_ = o;
  restore_stream(r);
  refresh_warnings();
}

}  // namespace mixtape
