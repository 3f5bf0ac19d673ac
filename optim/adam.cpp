#include "optim/adam.h"

#include <cmath>

#include "optim/trainer.h"
#include "tensor/state_io.h"
#include "tensor/ops/optim.h"

namespace mixtape {

Adam::Adam(std::vector<Variable> params, AdamOptions options) : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Variable> params, AdamOptions options, bool decoupled)
    : Optimizer(options.lr, options.weight_decay, options.rounding, options.seed),
      options_(options),
      decoupled_(decoupled) {
  add_param_group(std::move(params));  // decides the storage, which names the optimizer in messages
  validate(options_);
  finish_construction();
}

AdamW::AdamW(std::vector<Variable> params, AdamWOptions o)
    : Adam(std::move(params), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, o.rounding, o.seed},
           true) {}

void Adam::check_storage() const {
  MT_CHECK(!pure16() || decoupled_ || options_.weight_decay == 0.0, name(),
           ": the 16-bit rule is AdamW's (Zamirai et al.'s Algorithms 4 and 5); Adam with L2 weight decay ",
           options_.weight_decay, " has none: use AdamW");
}

void Adam::validate(const AdamOptions& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, name(), ": beta1 must be in [0, 1), got ", o.beta1);
  MT_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, name(), ": beta2 must be in [0, 1), got ", o.beta2);
  MT_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, name(), ": eps must be finite and >= 0, got ", o.eps);
}

std::vector<std::string> Adam::buffer_names() const {
  std::vector<std::string> names{"exp_avg", "exp_avg_sq"};
  if (options_.amsgrad) names.push_back("max_exp_avg_sq");
  if (kahan()) names.push_back("kahan_comp");
  return names;
}

void Adam::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                 Tensor* rounded_copy) {
  Tensor* vmax = options_.amsgrad ? &state.buffers[2] : nullptr;
  if (!pure16()) {
    adam_update_(param, grad, state.buffers[0], state.buffers[1], group.lr, options_.beta1, options_.beta2,
                 options_.eps, group.weight_decay, decoupled_, step, rounded_copy, vmax);
    return;
  }
  Tensor none;
  Tensor& comp = kahan() ? state.buffers[options_.amsgrad ? 3 : 2] : none;
  const uint64_t offset = stream_offset(param.numel());
  adamw16_update_(param, grad, state.buffers[0], state.buffers[1], comp, group.lr, rate16(options_.beta1, param),
                  rate16(options_.beta2, param), options_.eps, group.weight_decay, step, kernel_rounding(),
                  generator().seed(), offset, vmax);
}

void Adam::apply_all(const std::vector<size_t>& index, const std::vector<Tensor>& params,
                     const std::vector<Tensor>& grads, const std::vector<ParamState*>& states,
                     const std::vector<Tensor>& copies, Tensor& steps, const Tensor& control) {
  std::vector<Tensor> m, v;
  std::vector<double> lrs, wds;
  std::vector<int64_t> rows;
  for (size_t k = 0; k < index.size(); ++k) {
    m.push_back(states[k]->buffers[0]);
    v.push_back(states[k]->buffers[1]);
    lrs.push_back(lr(group_of(index[k])));
    wds.push_back(weight_decay(group_of(index[k])));
    rows.push_back(int64_t(index[k]));
  }
  multi_adam_update_(params, grads, m, v, copies, lrs, wds, options_.beta1, options_.beta2, options_.eps, decoupled_,
                     steps, rows, control);
}

void Adam::save_options(TensorDict& d) const {
  d.set_meta("beta1", state_io::format(options_.beta1));
  d.set_meta("beta2", state_io::format(options_.beta2));
  d.set_meta("eps", state_io::format(options_.eps));
  d.set_meta("amsgrad", state_io::format(options_.amsgrad));
}

void Adam::set_momentum(double beta1) {
  replace_momentum(
      options_, &AdamOptions::beta1, beta1, [&](const AdamOptions& o) { validate(o); }, false);
  refresh_warnings();
}

void Adam::load_options(const TensorDict& d) {
  AdamOptions o = options_;
  o.beta1 = state_io::get_double(d, "beta1", name());
  o.beta2 = state_io::get_double(d, "beta2", name());
  o.eps = state_io::get_double(d, "eps", name());
  // Absent in state saved before amsgrad existed: those optimizers had none.
  o.amsgrad = d.has_meta("amsgrad") && state_io::get_bool(d, "amsgrad", name());
  validate(o);
  o.rounding = rounding();
  options_ = o;
}

namespace {

// Adam or AdamW from a spec: the same settings, each class with its own defaults.
template <class Class, class Options>
std::unique_ptr<Optimizer> make_adam_kind(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                          uint64_t seed) {
  return std::make_unique<Class>(std::move(params), Options{.lr = o.lr,
                                                            .beta1 = o.beta1,
                                                            .beta2 = o.beta2,
                                                            .eps = o.eps.value_or(Options{}.eps),
                                                            .weight_decay = o.weight_decay,
                                                            .amsgrad = o.amsgrad,
                                                            .rounding = rounding,
                                                            .seed = seed});
}

}  // namespace

std::unique_ptr<Optimizer> make_adam(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                     uint64_t seed) {
  return make_adam_kind<Adam, AdamOptions>(std::move(params), o, rounding, seed);
}

std::unique_ptr<Optimizer> make_adamw(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                      uint64_t seed) {
  return make_adam_kind<AdamW, AdamWOptions>(std::move(params), o, rounding, seed);
}

}  // namespace mixtape
