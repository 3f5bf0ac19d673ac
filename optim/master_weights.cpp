#include "optim/master_weights.h"

#include <cmath>
#include <map>
#include <string>

#include "autograd/tape.h"
#include "tensor/state_io.h"

namespace mixtape {

MasterWeights::MasterWeights(std::vector<Variable> params, const OptimizerFactory& make_optimizer,
                             MasterWeightsOptions options)
    : params_(std::move(params)), options_(options) {
  const char* who = "MasterWeights";
  MT_CHECK(!params_.empty(), who, ": needs at least one parameter");
  MT_CHECK(std::isfinite(options_.max_grad_norm) && options_.max_grad_norm >= 0.0, who,
           ": max_grad_norm must be finite and >= 0 (0 turns clipping off), got ", options_.max_grad_norm);
  MT_CHECK(bool(make_optimizer), who, ": the optimizer factory is empty");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Variable& p = params_[i];
    MT_CHECK(p.defined(), who, ": parameter ", i, " is undefined");
    MT_CHECK(p.is_leaf() && is_floating(p.dtype()), who, ": parameter '", p.name(), "' ", p.data().meta(),
             " must be a floating leaf Variable");
    for (size_t j = 0; j < i; ++j)
      MT_CHECK(!params_[j].same(p), who, ": parameter '", p.name(), "' ", p.data().meta(), " appears twice");
    const bool copy = is_16bit(p.dtype());
    copy_.push_back(copy);
    // The master starts as the exact fp32 value of the 16-bit weight (widening is exact).
    masters_.push_back(copy ? Variable(p.data().to(DType::f32), true, p.name() + ".master") : p);
  }
  inner_ = make_optimizer(masters_);
  MT_CHECK(inner_ != nullptr, who, ": the optimizer factory returned no optimizer");
  MT_CHECK(inner_->num_params() == masters_.size(), who, ": the inner ", inner_->name(), " holds ",
           inner_->num_params(), " parameters, but there are ", masters_.size(), " masters");
  slot_.assign(params_.size(), inner_->num_params());
  for (size_t j = 0; j < inner_->num_params(); ++j) {
    size_t i = 0;
    while (i < masters_.size() && !masters_[i].same(inner_->param(j))) ++i;
    MT_CHECK(i < masters_.size(), who, ": parameter ", j, " of the inner ", inner_->name(), " ('",
             inner_->param(j).name(), "') is not one of the masters this MasterWeights built");
    slot_[i] = j;
    // The rounding into the model, fused into the update's pass (Note [Fused master copy]).
    if (copy_[i]) inner_->set_rounded_copy(j, params_[i]);
  }
}

const Variable& MasterWeights::master(size_t i) const {
  MT_CHECK(i < masters_.size(), "MasterWeights::master: index ", i, " out of range (", masters_.size(), " parameters)");
  return masters_[i];
}

bool MasterWeights::has_copy(size_t i) const {
  MT_CHECK(i < copy_.size(), "MasterWeights::has_copy: index ", i, " out of range (", copy_.size(), " parameters)");
  return copy_[i];
}

void MasterWeights::zero_grad() {
  for (Variable& p : params_) p.zero_grad();
}

StepReport MasterWeights::step(LossScaler& scaler, bool overflow_elsewhere) {
  last_ = scaled_step(params_, *inner_, scaler,
                      GradClip{.max_norm = options_.max_grad_norm, .max_value = options_.max_grad_value}, slot_,
                      overflow_elsewhere);
  return last_;
}

TensorDict MasterWeights::state_dict() const {
  TensorDict d;
  d.set_meta("master_weights.params", state_io::format(int64_t(params_.size())));
  for (size_t i = 0; i < params_.size(); ++i)
    if (copy_[i]) d.add("master." + std::to_string(i), masters_[i].data());
  d.merge("optimizer.", inner_->state_dict());
  return d;
}

void MasterWeights::load_state_dict(const TensorDict& d) {
  const char* who = "MasterWeights::load_state_dict";
  const int64_t n = state_io::get_int(d, "master_weights.params", "MasterWeights");
  MT_CHECK(n == int64_t(params_.size()), who, ": the state dict has ", n, " parameters, this MasterWeights ",
           params_.size());
  std::map<size_t, const Tensor*> loaded;
  for (const auto& [name, t] : d.tensors) {
    if (name.starts_with("optimizer.")) continue;
    MT_CHECK(name.starts_with("master."), who, ": unexpected tensor '", name, "'");
    const std::string idx = name.substr(7);
    size_t i = 0;
    bool ok = !idx.empty() && idx.size() < 10;
    for (char c : idx) ok = ok && c >= '0' && c <= '9';
    if (ok) i = size_t(std::stoull(idx));
    MT_CHECK(ok && i < params_.size() && copy_[i], who, ": unexpected tensor '", name,
             "' (masters exist for the 16-bit parameters only)");
    MT_CHECK(t.dtype() == DType::f32 && t.shape() == params_[i].shape(), who, ": tensor '", name, "' ", t.meta(),
             " must be f32 shaped like parameter ", i, " ", params_[i].data().meta());
    loaded[i] = &t;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    MT_CHECK(!copy_[i] || loaded.count(i), who, ": missing tensor 'master.", i, "' for parameter '", params_[i].name(),
             "' ", params_[i].data().meta());
  inner_->load_state_dict(d.sub("optimizer."));  // validates before it changes anything
  NoGrad no_grad;
  for (const auto& [i, t] : loaded) {
    Tensor m = masters_[i].data();
    m.copy_(t->to(m.device()));  // a loaded file is on the CPU; the master may be on a GPU
    Tensor p = params_[i].data();
    p.copy_(m);  // the model holds the rounded master
  }
}

}  // namespace mixtape
