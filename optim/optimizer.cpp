#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/tape.h"
#include "tensor/state_io.h"

namespace mixtape {

void Optimizer::check_lr(double lr) const {
  MT_CHECK(std::isfinite(lr) && lr >= 0.0, name(), ": learning rate must be finite and >= 0, got ", lr);
}

void Optimizer::check_weight_decay(double wd) const {
  MT_CHECK(std::isfinite(wd) && wd >= 0.0, name(), ": weight decay must be finite and >= 0, got ", wd);
}

size_t Optimizer::add_param_group(std::vector<Variable> params, GroupOptions options) {
  MT_CHECK(!params.empty(), name(), ": a parameter group needs at least one parameter");
  ParamGroup g;
  g.lr = options.lr.value_or(default_lr_);
  g.weight_decay = options.weight_decay.value_or(default_weight_decay_);
  check_lr(g.lr);
  check_weight_decay(g.weight_decay);
  for (size_t k = 0; k < params.size(); ++k) {
    const Variable& p = params[k];
    MT_CHECK(p.defined(), name(), ": parameter ", k, " of group ", groups_.size(), " is undefined");
    MT_CHECK(p.is_leaf(), name(), ": parameter '", p.name(), "' ", p.data().meta(),
             " is not a leaf; optimizers update leaf variables");
    MT_CHECK(is_floating(p.dtype()), name(), ": parameter '", p.name(), "' ", p.data().meta(), " is not floating");
    for (const ParamGroup& other : groups_)
      for (const Variable& q : other.params)
        MT_CHECK(!q.same(p), name(), ": parameter '", p.name(), "' ", p.data().meta(),
                 " appears in more than one group");
    for (size_t j = 0; j < k; ++j)
      MT_CHECK(!params[j].same(p), name(), ": parameter '", p.name(), "' ", p.data().meta(),
               " appears twice in one group");
  }
  // Note [Storage policy]: all 16-bit, or none; the first group decides.
  const bool group16 = is_16bit(params[0].dtype());
  for (const Variable& p : params)
    MT_CHECK(is_16bit(p.dtype()) == group16, name(), ": parameter '", p.name(), "' ", p.data().meta(), " is ",
             dtype_name(p.dtype()), " but parameter '", params[0].name(), "' ", params[0].data().meta(), " is ",
             dtype_name(params[0].dtype()),
             ": an optimizer's parameters are all 16-bit (pure 16-bit training) or all f32 / f64 (use "
             "MasterWeights for 16-bit models with f32 masters)");
  MT_CHECK(groups_.empty() || group16 == pure16_, name(), ": a group of ", group16 ? "16-bit" : "f32 / f64",
           " parameters cannot join an optimizer of ", pure16_ ? "16-bit" : "f32 / f64", " parameters");
  pure16_ = group16;
  const size_t gi = groups_.size();
  for (size_t k = 0; k < params.size(); ++k) {
    group_of_.push_back(gi);
    state_.emplace_back();
    copies_.emplace_back();
  }
  g.params = std::move(params);
  groups_.push_back(std::move(g));
  return gi;
}

void Optimizer::finish_construction() {
  MT_CHECK(rounding_ == UpdateRounding::nearest || rounding_ == UpdateRounding::stochastic ||
               rounding_ == UpdateRounding::kahan,
           name(), ": invalid update rounding ", int(rounding_));
  check_storage();
  refresh_warnings();
}

void Optimizer::refresh_warnings() {
  warnings_.clear();
  if (!pure16_) return;
  std::vector<DType> formats;
  for (const ParamGroup& g : groups_)
    for (const Variable& p : g.params)
      if (std::find(formats.begin(), formats.end(), p.dtype()) == formats.end()) formats.push_back(p.dtype());
  for (DType f : formats)
    for (const auto& [what, v] : decay_rates()) {
      const DecayRate16 d = decay_rate_16(v, f);
      if (d.adjusted)
        warnings_.push_back(detail::cat(name(), ": ", what, " = ", state_io::format(v), " rounds to 1 in ",
                                        dtype_name(f), "; using ", state_io::format(d.value), ", the largest ",
                                        dtype_name(f), " value below 1 (Note [16-bit hyper-parameters])"));
    }
  if (const char* w = f16_state_warning(); w && std::find(formats.begin(), formats.end(), DType::f16) != formats.end())
    warnings_.push_back(detail::cat(name(), ": ", w));
  for (const std::string& w : warnings_) warn_once(w);
}

uint64_t Optimizer::stream_offset(int64_t numel) {
  return rounding_ == UpdateRounding::stochastic ? gen_.advance(uint64_t(numel)) : gen_.offset();
}

void Optimizer::save_all_options(TensorDict& d) const {
  save_options(d);
  if (!pure16_) return;
  d.set_meta("rounding", update_rounding_name(rounding_));
  // uint64 values as decimal text: seeds above 2^63 keep their bits through int64.
  d.set_meta("rng.seed", std::to_string(gen_.seed()));
  d.set_meta("rng.offset", std::to_string(gen_.offset()));
}

void Optimizer::load_all_options(const TensorDict& d) {
  if (!pure16_) {
    load_options(d);
    return;
  }
  MT_CHECK(d.has_meta("rounding"), name(), " state dict: missing metadata entry 'rounding'");
  const UpdateRounding rounding = update_rounding_from_name(d.meta("rounding"));
  const uint64_t seed = state_io::get_uint(d, "rng.seed", name()), offset = state_io::get_uint(d, "rng.offset", name());
  const UpdateRounding old = rounding_;
  rounding_ = rounding;  // buffer_names() and the options' checks read it
  try {
    load_options(d);
  } catch (...) {
    rounding_ = old;
    throw;
  }
  gen_.set_state(seed, offset);
  refresh_warnings();
}

const Variable& Optimizer::param(size_t index) const {
  MT_CHECK(index < num_params(), name(), ": parameter index ", index, " out of range (", num_params(), " parameters)");
  size_t first = 0;
  for (const ParamGroup& g : groups_) {
    if (index < first + g.params.size()) return g.params[index - first];
    first += g.params.size();
  }
  MT_ASSERT(false, "parameter index bookkeeping");
}

std::vector<Variable> Optimizer::params() const {
  std::vector<Variable> all;
  for (const ParamGroup& g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  return all;
}

int64_t Optimizer::step_count(size_t index) const {
  MT_CHECK(index < num_params(), name(), ": parameter index ", index, " out of range (", num_params(), " parameters)");
  pull_steps();
  return state_[index].step;
}

void Optimizer::pull_steps() const {
  if (!device_steps_.defined()) return;
  const std::vector<int64_t> steps = device_steps_.values<int64_t>();
  auto& state = const_cast<std::vector<ParamState>&>(state_);  // the host fields mirror the device's counts
  for (size_t i = 0; i < state.size(); ++i) state[i].step = steps[i];
}

double Optimizer::lr(size_t group) const {
  MT_CHECK(group < groups_.size(), name(), ": no parameter group ", group, " (", groups_.size(), " groups)");
  return groups_[group].lr;
}

double Optimizer::weight_decay(size_t group) const {
  MT_CHECK(group < groups_.size(), name(), ": no parameter group ", group, " (", groups_.size(), " groups)");
  return groups_[group].weight_decay;
}

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

void Optimizer::set_lr(size_t group, double lr) {
  MT_CHECK(group < groups_.size(), name(), ": no parameter group ", group, " (", groups_.size(), " groups)");
  check_lr(lr);
  groups_[group].lr = lr;
}

void Optimizer::set_momentum(double) {
  throw Error(
      detail::cat(name(), " has no momentum or beta1 for a schedule to move (OneCycleLR: set cycle_momentum = false)"));
}

void Optimizer::check_momentum_buffer_kept(double from, double to) const {
  if ((from != 0.0) == (to != 0.0)) return;
  for (const ParamState& st : state_)
    MT_CHECK(st.step == 0 && st.buffers.empty(), name(), ": setting momentum from ", from, " to ", to, " would ",
             to != 0.0 ? "add a momentum_buffer to" : "drop the momentum_buffer of",
             " parameters that already have state; give the optimizer a non-zero momentum from the start");
}

Tensor Optimizer::new_buffer(size_t b, const Tensor& like) const {
  const double v = buffer_init(b);
  return v == 0.0 ? zeros_like(like) : full(like.shape(), v, like.dtype(), like.device());
}

void Optimizer::update(size_t index, Tensor& param, const Tensor& grad) {
  MT_CHECK(index < num_params(), name(), ": parameter index ", index, " out of range (", num_params(), " parameters)");
  if (device_steps_.defined()) {  // back to host step counts (a step that decided on the host)
    pull_steps();
    device_steps_ = Tensor();
  }
  ParamState& st = state_[index];
  const std::vector<std::string> names = buffer_names();
  if (st.buffers.size() != names.size()) {  // first update, or the rule now keeps other buffers
    st.buffers.clear();
    for (size_t b = 0; b < names.size(); ++b) st.buffers.push_back(new_buffer(b, param));
  }
  for (size_t b = 0; b < names.size(); ++b)
    MT_CHECK(st.buffers[b].shape() == param.shape(), name(), ": state '", names[b], "' of parameter ", index, " ",
             st.buffers[b].meta(), " does not match the tensor being updated ", param.meta());
  const int64_t next = st.step + 1;
  Tensor copy = copies_[index].defined() ? copies_[index].data() : Tensor();  // a handle to its storage
  apply(groups_[group_of_[index]], param, grad, st, next, copy.defined() ? &copy : nullptr);
  st.step = next;
}

void Optimizer::set_rounded_copy(size_t index, Variable copy) {
  const Variable& p = param(index);  // range-checked
  if (copy.defined()) {
    MT_CHECK(p.dtype() == DType::f32, name(), ": a rounded copy needs an f32 parameter; parameter ", index, " '",
             p.name(), "' is ", p.data().meta());
    MT_CHECK(is_16bit(copy.dtype()), name(), ": the rounded copy '", copy.name(), "' ", copy.data().meta(),
             " of parameter ", index, " must be bf16 or f16");
    MT_CHECK(copy.shape() == p.shape() && copy.data().device() == p.data().device(), name(), ": the rounded copy '",
             copy.name(), "' ", copy.data().meta(), " must have the shape and device of parameter ", index, " '",
             p.name(), "' ", p.data().meta());
    MT_CHECK(!copy.same(p), name(), ": parameter ", index, " cannot be its own rounded copy");
  }
  copies_[index] = std::move(copy);
}

void Optimizer::step(const std::vector<Tensor>& grads) {
  MT_CHECK(grads.size() == num_params(), name(), ": step got ", grads.size(), " gradients for ", num_params(),
           " parameters");
  NoGrad no_grad;
  size_t index = 0;
  for (const ParamGroup& g : groups_) {
    for (const Variable& p : g.params) {
      const Tensor& grad = grads[index];
      if (grad.defined()) {
        MT_CHECK(grad.shape() == p.shape() && grad.device() == p.device(), name(), ": the gradient ", grad.meta(),
                 " of parameter ", index, " '", p.name(), "' ", p.data().meta(), " has another shape or device");
        Tensor data = p.data();  // a handle: the update writes the parameter's storage
        update(index, data, grad);
      }
      ++index;
    }
  }
}

bool Optimizer::device_step_ready() const {
  if (!has_multi_tensor_rule() || num_params() == 0) return false;
  const Device d = param(0).data().device();
  if (!d.is_cuda()) return false;
  for (const ParamGroup& g : groups_)
    for (const Variable& p : g.params)
      if (p.data().device() != d || p.dtype() != DType::f32 || !p.data().is_contiguous()) return false;
  return true;
}

void Optimizer::apply_all(const std::vector<size_t>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                          const std::vector<ParamState*>&, const std::vector<Tensor>&, Tensor&, const Tensor&) {
  throw Error(detail::cat(name(), ": no multi-tensor update rule (Note [Device-side step])"));
}

void Optimizer::allocate_state() {
  const std::vector<std::string> names = buffer_names();
  for (size_t i = 0; i < num_params(); ++i) {
    ParamState& st = state_[i];
    if (st.buffers.size() == names.size()) continue;
    st.buffers.clear();
    for (size_t b = 0; b < names.size(); ++b) st.buffers.push_back(new_buffer(b, param(i).data()));
  }
  if (device_step_ready()) place_steps_on_device();
}

void Optimizer::place_steps_on_device() {
  if (device_steps_.defined()) return;
  std::vector<int64_t> steps;
  for (const ParamState& st : state_) steps.push_back(st.step);
  device_steps_ = from_vector(steps, {int64_t(steps.size())}).to(param(0).data().device());
}

void Optimizer::step_on_device(const std::vector<Tensor>& grads, const Tensor& control) {
  MT_CHECK(grads.size() == num_params(), name(), ": step_on_device got ", grads.size(), " gradients for ", num_params(),
           " parameters");
  MT_CHECK(device_step_ready(), name(),
           ": step_on_device needs a multi-tensor rule and contiguous f32 parameters on one ", "CUDA device");
  NoGrad no_grad;
  place_steps_on_device();  // the counts move to the device (Note [Device-side step])
  const std::vector<std::string> names = buffer_names();
  std::vector<size_t> index;
  std::vector<Tensor> params, gs, copies;
  std::vector<ParamState*> states;
  size_t i = 0;
  for (const ParamGroup& g : groups_) {
    for (const Variable& p : g.params) {
      const Tensor& grad = grads[i];
      if (grad.defined()) {
        MT_CHECK(grad.shape() == p.shape() && grad.device() == p.device(), name(), ": the gradient ", grad.meta(),
                 " of parameter ", i, " '", p.name(), "' ", p.data().meta(), " has another shape or device");
        ParamState& st = state_[i];
        if (st.buffers.size() != names.size()) {  // first update: the rule's buffers, zeros
          st.buffers.clear();
          for (size_t b = 0; b < names.size(); ++b) st.buffers.push_back(new_buffer(b, p.data()));
        }
        index.push_back(i);
        params.push_back(p.data());
        gs.push_back(grad);
        states.push_back(&st);
        copies.push_back(copies_[i].defined() ? copies_[i].data() : Tensor());
      }
      ++i;
    }
  }
  apply_all(index, params, gs, states, copies, device_steps_, control);
}

void Optimizer::step() {
  std::vector<Tensor> grads;
  for (const ParamGroup& g : groups_) {
    for (const Variable& p : g.params) {
      const std::optional<ScaledGrad>& grad = p.grad();
      grads.push_back(grad && grad->defined() ? grad->unscaled() : Tensor());
    }
  }
  step(grads);
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (Variable& p : g.params) p.zero_grad();
}

// ---- state dict --------------------------------------------------------------------------

TensorDict Optimizer::state_dict() const {
  using state_io::format;
  pull_steps();
  TensorDict d;
  d.set_meta("optimizer", name());
  d.set_meta("param_groups", format(int64_t(groups_.size())));
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string k = "param_groups." + std::to_string(g) + ".";
    d.set_meta(k + "lr", format(groups_[g].lr));
    d.set_meta(k + "weight_decay", format(groups_[g].weight_decay));
    d.set_meta(k + "params", format(int64_t(groups_[g].params.size())));
  }
  save_all_options(d);
  const std::vector<std::string> names = buffer_names();
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& st = state_[i];
    if (st.step == 0) continue;
    const std::string k = "state." + std::to_string(i) + ".";
    d.set_meta(k + "step", format(st.step));
    for (size_t b = 0; b < st.buffers.size() && b < names.size(); ++b) d.add(k + names[b], st.buffers[b]);
  }
  return d;
}

void Optimizer::load_state_dict(const TensorDict& d) {
  using namespace state_io;
  const std::string kind = d.has_meta("optimizer") ? d.meta("optimizer") : std::string("(none)");
  MT_CHECK(kind == name(), name(), "::load_state_dict: the state dict was saved by optimizer '", kind, "'");
  const int64_t ngroups = get_int(d, "param_groups", name());
  MT_CHECK(ngroups == int64_t(groups_.size()), name(), "::load_state_dict: the state dict has ", ngroups,
           " parameter groups, this optimizer ", groups_.size());
  std::vector<std::pair<double, double>> settings;  // (lr, weight decay) per group
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string k = "param_groups." + std::to_string(g) + ".";
    const int64_t n = get_int(d, k + "params", name());
    MT_CHECK(n == int64_t(groups_[g].params.size()), name(), "::load_state_dict: group ", g, " has ", n,
             " parameters in the state dict, ", groups_[g].params.size(), " here");
    settings.emplace_back(get_double(d, k + "lr", name()), get_double(d, k + "weight_decay", name()));
    check_lr(settings.back().first);
    check_weight_decay(settings.back().second);
  }

  std::vector<ParamState> state(num_params());
  std::map<std::string, const Tensor*> tensors;
  for (const auto& [n, t] : d.tensors) {
    MT_CHECK(n.starts_with("state."), name(), "::load_state_dict: unexpected tensor '", n, "'");
    tensors[n] = &t;
  }
  size_t steps_found = 0;
  for (size_t i = 0; i < num_params(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    if (d.has_meta(k + "step")) {
      ++steps_found;
      state[i].step = get_int(d, k + "step", name());
      MT_CHECK(state[i].step >= 1, name(), "::load_state_dict: '", k, "step' must be >= 1, got ", state[i].step);
    }
  }

  size_t steps_total = 0;
  for (const auto& [k, v] : d.metadata) steps_total += k.starts_with("state.") ? 1 : 0;
  MT_CHECK(steps_total == steps_found, name(), "::load_state_dict: the state dict has ", steps_total,
           " 'state.*' metadata entries but only ", steps_found, " are step counts of the ", num_params(),
           " parameters");

  // The buffer names may depend on the hyper-parameters (SGD keeps a momentum buffer only with
  // momentum), so the buffers are checked after load_options; a failure restores the old options.
  TensorDict old_options;
  save_all_options(old_options);
  load_all_options(d);
  try {
    const std::vector<std::string> names = buffer_names();
    for (size_t i = 0; i < num_params(); ++i) {
      const std::string k = "state." + std::to_string(i) + ".";
      const Tensor& p = param(i).data();
      for (const std::string& b : names) {
        auto it = tensors.find(k + b);
        if (state[i].step == 0) {
          MT_CHECK(it == tensors.end(), name(), "::load_state_dict: tensor '", k + b, "' without '", k, "step'");
          continue;
        }
        MT_CHECK(it != tensors.end(), name(), "::load_state_dict: missing tensor '", k + b, "'");
        const Tensor& t = *it->second;
        // A buffer has its parameter's shape and dtype (Optimizer::update allocates it with
        // new_buffer); the device may differ (a loaded file is on the CPU) and is moved below.
        MT_CHECK(t.shape() == p.shape(), name(), "::load_state_dict: tensor '", k + b, "' ", t.meta(),
                 " does not match parameter ", i, " ", p.meta());
        MT_CHECK(t.dtype() == p.dtype(), name(), "::load_state_dict: tensor '", k + b, "' ", t.meta(), " is ",
                 dtype_name(t.dtype()), " but parameter ", i, " ", p.meta(), " keeps its state in ",
                 dtype_name(p.dtype()));
        state[i].buffers.push_back(t.to(p.device()).clone());
        tensors.erase(it);
      }
    }
    MT_CHECK(tensors.empty(), name(), "::load_state_dict: unexpected tensor '",
             tensors.empty() ? "" : tensors.begin()->first, "'");
  } catch (...) {
    load_all_options(old_options);
    throw;
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = settings[g].first;
    groups_[g].weight_decay = settings[g].second;
  }
  state_ = std::move(state);
  if (device_steps_.defined()) {  // the loaded counts go where the counting happens
    std::vector<int64_t> steps;
    for (const ParamState& st : state_) steps.push_back(st.step);
    device_steps_.copy_(from_vector(steps, {int64_t(steps.size())}).to(device_steps_.device()));
  }
}

}  // namespace mixtape
