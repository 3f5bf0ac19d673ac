#include "optim/sgd.h"

#include <cmath>

#include "tensor/state_io.h"
#include "tensor/ops/optim.h"

namespace mixtape {

SGD::SGD(std::vector<Variable> params, SGDOptions options)
    : Optimizer(options.lr, options.weight_decay), options_(options) {
  validate(options_);
  add_param_group(std::move(params));
}

void SGD::validate(const SGDOptions& o) const {
  check_lr(o.lr);
  check_weight_decay(o.weight_decay);
  MT_CHECK(std::isfinite(o.momentum) && o.momentum >= 0.0, "SGD: momentum must be finite and >= 0, got ", o.momentum);
  MT_CHECK(std::isfinite(o.dampening), "SGD: dampening must be finite, got ", o.dampening);
  MT_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening 0, got momentum ", o.momentum, ", dampening ",
           o.dampening);
}

std::vector<std::string> SGD::buffer_names() const {
  if (options_.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                Tensor* rounded_copy) {
  Tensor none;
  Tensor& buf = state.buffers.empty() ? none : state.buffers[0];
  sgd_update_(param, grad, buf, group.lr, options_.momentum, options_.dampening, group.weight_decay, options_.nesterov,
              step, rounded_copy);
}

void SGD::save_options(TensorDict& d) const {
  d.set_meta("momentum", state_io::format(options_.momentum));
  d.set_meta("dampening", state_io::format(options_.dampening));
  d.set_meta("nesterov", state_io::format(options_.nesterov));
}

void SGD::set_momentum(double m) {
  replace_momentum(
      options_, &SGDOptions::momentum, m, [&](const SGDOptions& o) { validate(o); }, true);
}

void SGD::load_options(const TensorDict& d) {
  SGDOptions o = options_;
  o.momentum = state_io::get_double(d, "momentum", name());
  o.dampening = state_io::get_double(d, "dampening", name());
  o.nesterov = state_io::get_bool(d, "nesterov", name());
  validate(o);
  options_ = o;
}

}  // namespace mixtape
