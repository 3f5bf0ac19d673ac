#include "optim/sgd.h"

#include <cmath>

#include "optim/trainer.h"
#include "tensor/state_io.h"
#include "tensor/ops/optim.h"

namespace mixtape {

SGD::SGD(std::vector<Variable> params, SGDOptions options)
    : Optimizer(options.lr, options.weight_decay, options.rounding, options.seed), options_(options) {
  add_param_group(std::move(params));  // decides the storage, which names the optimizer in messages
  validate(options_);
  finish_construction();
}

void SGD::check_storage() const {
  MT_CHECK(!pure16() || (options_.dampening == 0.0 && !options_.nesterov), name(),
           ": the 16-bit rule (Zamirai et al.'s Algorithms 2 and 3) has no dampening and no Nesterov momentum, got "
           "dampening ",
           options_.dampening, ", nesterov ", options_.nesterov);
}

void SGD::validate(const SGDOptions& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(std::isfinite(o.momentum) && o.momentum >= 0.0, name(), ": momentum must be finite and >= 0, got ",
           o.momentum);
  MT_CHECK(std::isfinite(o.dampening), name(), ": dampening must be finite, got ", o.dampening);
  MT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), name(),
           ": Nesterov momentum needs momentum > 0 and dampening 0, got momentum ", o.momentum, ", dampening ",
           o.dampening);
}

std::vector<std::string> SGD::buffer_names() const {
  std::vector<std::string> names;
  if (options_.momentum != 0.0) names.push_back("momentum_buffer");
  if (kahan()) names.push_back("kahan_comp");
  return names;
}

void SGD::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                Tensor* rounded_copy) {
  Tensor none_m, none_c;
  size_t b = 0;
  Tensor& mom = options_.momentum != 0.0 ? state.buffers[b++] : none_m;
  if (!pure16()) {
    sgd_update_(param, grad, mom, group.lr, options_.momentum, options_.dampening, group.weight_decay,
                options_.nesterov, step, rounded_copy);
    return;
  }
  Tensor& comp = kahan() ? state.buffers[b++] : none_c;
  const double momentum = options_.momentum != 0.0 ? rate16(options_.momentum, param) : 0.0;
  const uint64_t offset = stream_offset(param.numel());
  sgd16_update_(param, grad, mom, comp, group.lr, momentum, group.weight_decay, kernel_rounding(), generator().seed(),
                offset);
}

// SGD16 keeps no dampening and no Nesterov momentum, and saves neither.
void SGD::save_options(TensorDict& d) const {
  d.set_meta("momentum", state_io::format(options_.momentum));
  if (pure16()) return;
  d.set_meta("dampening", state_io::format(options_.dampening));
  d.set_meta("nesterov", state_io::format(options_.nesterov));
}

void SGD::set_momentum(double m) {
  replace_momentum(
      options_, &SGDOptions::momentum, m, [&](const SGDOptions& o) { validate(o); }, true);
  refresh_warnings();
}

void SGD::load_options(const TensorDict& d) {
  SGDOptions o = options_;
  o.momentum = state_io::get_double(d, "momentum", name());
  if (!pure16()) {
    o.dampening = state_io::get_double(d, "dampening", name());
    o.nesterov = state_io::get_bool(d, "nesterov", name());
  }
  validate(o);
  o.rounding = rounding();
  options_ = o;
}

std::unique_ptr<Optimizer> make_sgd(std::vector<Variable> params, const OptimizerSpec& o, UpdateRounding rounding,
                                    uint64_t seed) {
  return std::make_unique<SGD>(std::move(params), SGDOptions{.lr = o.lr,
                                                             .momentum = o.momentum,
                                                             .weight_decay = o.weight_decay,
                                                             .nesterov = o.nesterov,
                                                             .rounding = rounding,
                                                             .seed = seed});
}

}  // namespace mixtape
