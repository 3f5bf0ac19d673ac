#include "optim/rmsprop.h"

#include <cmath>

#include "tensor/ops/optim.h"
#include "optim/trainer.h"
#include "tensor/state_io.h"

namespace mixtape {

// ---- RMSprop ----------------------------------------------------------------------------------

RMSprop::RMSprop(std::vector<Variable> params, RMSpropOptions options)
    : Optimizer(options.lr, options.weight_decay, options.rounding, options.seed), options_(options) {
  add_param_group(std::move(params));  // decides the storage, which names the optimizer in messages
  validate(options_);
  finish_construction();
}

void RMSprop::validate(const RMSpropOptions& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(o.alpha >= 0.0 && o.alpha < 1.0, name(), ": alpha must be in [0, 1), got ", o.alpha);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
  MT_CHECK(std::isfinite(o.momentum) && o.momentum >= 0.0, name(), ": momentum must be finite and >= 0, got ",
           o.momentum);
}

std::vector<std::string> RMSprop::buffer_names() const {
  std::vector<std::string> names{"square_avg"};
  if (options_.momentum > 0.0) names.push_back("momentum_buffer");
  if (options_.centered) names.push_back("grad_avg");
  if (kahan()) names.push_back("kahan_comp");
  return names;
}

void RMSprop::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t,
                    Tensor* rounded_copy) {
  Tensor none_b, none_a;
  size_t b = 1;
  Tensor& buf = options_.momentum > 0.0 ? state.buffers[b++] : none_b;
  Tensor& avg = options_.centered ? state.buffers[b++] : none_a;
  if (!pure16()) {
    rmsprop_update_(param, grad, state.buffers[0], avg, buf, group.lr, options_.alpha, options_.eps, group.weight_decay,
                    options_.momentum, options_.centered, rounded_copy);
    return;
  }
  Tensor none_c;
  Tensor& comp = kahan() ? state.buffers[b++] : none_c;
  const double momentum = options_.momentum > 0.0 ? rate16(options_.momentum, param) : 0.0;
  const uint64_t offset = stream_offset(param.numel());
  rmsprop16_update_(param, grad, state.buffers[0], avg, buf, comp, group.lr, rate16(options_.alpha, param),
                    options_.eps, group.weight_decay, momentum, options_.centered, kernel_rounding(),
                    generator().seed(), offset);
}

void RMSprop::save_options(TensorDict& d) const {
  d.set_meta("alpha", state_io::format(options_.alpha));
  d.set_meta("eps", state_io::format(options_.eps));
  d.set_meta("momentum", state_io::format(options_.momentum));
  d.set_meta("centered", state_io::format(options_.centered));
}

void RMSprop::set_momentum(double m) {
  replace_momentum(
      options_, &RMSpropOptions::momentum, m, [&](const RMSpropOptions& o) { validate(o); }, true);
  refresh_warnings();
}

void RMSprop::load_options(const TensorDict& d) {
  RMSpropOptions o = options_;
  o.alpha = state_io::get_double(d, "alpha", name());
  o.eps = state_io::get_double(d, "eps", name());
  o.momentum = state_io::get_double(d, "momentum", name());
  o.centered = state_io::get_bool(d, "centered", name());
  validate(o);
  o.rounding = rounding();
  options_ = o;
}

// ---- Adagrad ----------------------------------------------------------------------------------

Adagrad::Adagrad(std::vector<Variable> params, AdagradOptions options)
    : Optimizer(options.lr, options.weight_decay, options.rounding, options.seed), options_(options) {
  add_param_group(std::move(params));  // decides the storage, which names the optimizer in messages
  validate(options_);
  finish_construction();
}

std::vector<std::string> Adagrad::buffer_names() const {
  if (kahan()) return {"sum", "kahan_comp"};
  return {"sum"};
}

void Adagrad::validate(const AdagradOptions& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(std::isfinite(o.lr_decay) && o.lr_decay >= 0.0, name(), ": lr_decay must be finite and >= 0, got ",
           o.lr_decay);
  MT_CHECK(std::isfinite(o.initial_accumulator_value) && o.initial_accumulator_value >= 0.0, name(),
           ": initial_accumulator_value must be finite and >= 0, got ", o.initial_accumulator_value);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
}

void Adagrad::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                    Tensor* rounded_copy) {
  if (!pure16()) {
    adagrad_update_(param, grad, state.buffers[0], group.lr, options_.lr_decay, options_.eps, group.weight_decay, step,
                    rounded_copy);
    return;
  }
  Tensor none;
  Tensor& comp = kahan() ? state.buffers[1] : none;
  const uint64_t offset = stream_offset(param.numel());
  adagrad16_update_(param, grad, state.buffers[0], comp, group.lr, options_.lr_decay, options_.eps, group.weight_decay,
                    step, kernel_rounding(), generator().seed(), offset);
}

void Adagrad::save_options(TensorDict& d) const {
  d.set_meta("lr_decay", state_io::format(options_.lr_decay));
  d.set_meta("initial_accumulator_value", state_io::format(options_.initial_accumulator_value));
  d.set_meta("eps", state_io::format(options_.eps));
}

void Adagrad::load_options(const TensorDict& d) {
  AdagradOptions o = options_;
  o.lr_decay = state_io::get_double(d, "lr_decay", name());
  o.initial_accumulator_value = state_io::get_double(d, "initial_accumulator_value", name());
  o.eps = state_io::get_double(d, "eps", name());
  validate(o);
  o.rounding = rounding();
  options_ = o;
}

std::unique_ptr<Optimizer> make_rmsprop(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                        uint64_t seed) {
  return std::make_unique<RMSprop>(std::move(params), RMSpropOptions{.lr = o.lr,
                                                                     .alpha = o.alpha,
                                                                     .eps = o.eps.value_or(RMSpropOptions{}.eps),
                                                                     .weight_decay = o.weight_decay,
                                                                     .momentum = o.momentum,
                                                                     .centered = o.centered,
                                                                     .rounding = rounding,
                                                                     .seed = seed});
}

std::unique_ptr<Optimizer> make_adagrad(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                        uint64_t seed) {
  return std::make_unique<Adagrad>(std::move(params),
                                   AdagradOptions{.lr = o.lr,
                                                  .lr_decay = o.lr_decay,
                                                  .weight_decay = o.weight_decay,
                                                  .initial_accumulator_value = o.initial_accumulator_value,
                                                  .eps = o.eps.value_or(AdagradOptions{}.eps),
                                                  .rounding = rounding,
                                                  .seed = seed});
}

}  // namespace mixtape
