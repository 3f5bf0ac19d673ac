// Optimizer: the base of SGD, Adam, AdamW, RMSprop and Adagrad. It holds parameter groups (each
// with its own learning rate and weight decay), per-parameter state (a step count and the rule's
// buffers), and applies plain (unscaled) gradients as in-place updates:
//
//   step(grads):  for every parameter i (counted over all groups, in group order) whose
//                 grads[i] is defined:  update(i, param(i).data(), grads[i])      under NoGrad
//   step():       the same with the parameters' own gradients, unscaled (ScaledGrad::unscaled);
//                 for training without a loss scale. Under one, scaled_step (optim/scaled_step.h)
//                 checks, unscales and clips first.
//
// Parameters without a gradient are skipped, and their step count does not advance.
//
// Note [Optimizer seam for mixed precision]
// update(i, param, grad) is the whole update rule for one tensor: it allocates the state on
// first use (shaped and typed like `param`, zeros unless the rule starts elsewhere: buffer_init) and calls the fused kernel of
// tensor/ops/optim.h. A master-weight layer (optim/master_weights.h) keeps fp32 copies of 16-bit
// model parameters and builds its inner optimizer over the copies (then rounds them back into
// the model), so the state lives in fp32 next to the masters. Loss scaling and skipped steps sit
// above step() (optim/loss_scaler.h).
// The master-weight layer also registers each 16-bit model parameter as the rounded copy of its
// master (set_rounded_copy), so the update kernel writes the new fp32 master and its 16-bit
// rounding in one pass (Note [Fused master copy] in tensor/ops/optim.h).
//
// Note [Storage policy]
// Where the parameters and the state are stored is a policy of the optimizer, not another class:
//   wide     f32 (or f64) parameters, as the model's own or as master copies (MasterWeights): the
//            state in the same dtype, the update computed and stored in it (sgd_update_, ...);
//   pure16   bf16 or f16 parameters (the pure policies, optim/pure16.h): the state in the same
//            16-bit dtype, the update computed in fp32 and written back under the options'
//            `rounding` (nearest, stochastic from the Philox stream of `seed`, or Kahan with a
//            "kahan_comp" buffer), the decay rates rounded to the format (Note [16-bit
//            hyper-parameters]), by the rule's 16-bit kernel (sgd16_update_, ...).
// The parameters choose it: all of them 16-bit, or none. A pure16 optimizer is named with a
// "16" ("SGD16", "AdamW16", "RMSprop16", "Adagrad16"; Adam's 16-bit rule is AdamW's with no
// decay) and saves the rounding and the stream's position with its state ("rounding",
// "rng.seed", "rng.offset"), so a resumed run draws the same numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "optim/pure16.h"
#include "tensor/core/rng.h"
#include "tensor/safetensors.h"

namespace mixtape {

struct ParamGroup {
  std::vector<Variable> params;
  double lr = 0.0;
  double weight_decay = 0.0;
};

// Per-group overrides; unset values take the optimizer's defaults.
struct GroupOptions {
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", "AdamW", "RMSprop", "Adagrad" ("SGD16", ... when pure16()): names the optimizer
  // in messages and state dicts.
  virtual const char* name() const = 0;

  // Note [Storage policy]: whether the parameters are 16-bit and updated by the rule's 16-bit
  // form; its rounding, the Philox stream of stochastic rounding, and the warnings about its
  // hyper-parameters (Note [16-bit hyper-parameters]).
  bool pure16() const { return pure16_; }
  UpdateRounding rounding() const { return rounding_; }
  const Generator& generator() const { return gen_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

  // One update of every parameter i whose grads[i] is defined: grads holds num_params() plain
  // gradients (already unscaled: f32, or f64 for f64 parameters), shaped like the parameters.
  void step(const std::vector<Tensor>& grads);
  // Note [Device-side step]: the same update for every parameter at once on a GPU, applied only
  // if the loss scaler's device state `control` says so (formulas::kApplied, read by the kernel),
  // with the gradients multiplied by its clip factor (kClip): step 5 of Note [Scaled step] when
  // the decision lives on the device. The step counts move to the device with the first such
  // step (one i64 per parameter, advanced there on applied steps only); step_count() and
  // state_dict() read them back. Needs device_step_ready().
  void step_on_device(const std::vector<Tensor>& grads, const Tensor& control);
  // Whether step_on_device can run: the rule has a multi-tensor kernel (has_multi_tensor_rule)
  // and every parameter is a contiguous f32 tensor on one CUDA device.
  bool device_step_ready() const;
  // Allocates every parameter's state buffers now (as the first update would: zeros, or the
  // rule's buffer_init) and, when device_step_ready(), the device step counts. A GPU training
  // loop calls it before its first step, so that the state does not take the cached blocks the
  // first step's temporaries freed and the second step allocates nothing new (Note [Caching
  // allocator]). Changes no result: the buffers start at the same values either way, and a
  // parameter's state is saved once it has a step.
  void allocate_state();
  // step() with each parameter's own gradient, unscaled (training without a loss scale).
  void step();
  // Drops every parameter's gradient (the next backward starts from nothing).
  void zero_grad();

  // Learning rate of a group; set_lr(lr) sets every group's.
  double lr(size_t group = 0) const;
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  double weight_decay(size_t group = 0) const;

  // The rule's momentum: the one hyper-parameter besides the lr that a schedule moves
  // (OneCycleLR's cycle_momentum, as PyTorch's). It is SGD's and RMSprop's momentum, Adam's and
  // AdamW's beta1, and the same in their 16-bit forms; nullopt for a rule without one (Adagrad).
  // Unlike the lr it is optimizer-wide, not per group.
  virtual std::optional<double> momentum() const { return std::nullopt; }
  // Sets it, validated as the constructor validates it. Throws, with nothing changed, for a rule
  // without one, and, once a parameter has state, for a move between 0 and non-zero in a rule
  // that keeps a momentum buffer only when it is non-zero (SGD, RMSprop and their 16-bit forms).
  virtual void set_momentum(double momentum);

  // Appends a group; returns its index. A parameter may belong to one group only.
  size_t add_param_group(std::vector<Variable> params, GroupOptions options = {});
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  size_t num_params() const { return group_of_.size(); }
  const Variable& param(size_t index) const;
  std::vector<Variable> params() const;  // every parameter, in index order
  // Updates applied so far to parameter `index` (0 before its first).
  int64_t step_count(size_t index) const;

  // The update rule for parameter `index` applied to the tensor `param` (that parameter's data,
  // or its master copy) with the unscaled gradient `grad` (param's compute dtype: f32, or f64
  // for f64 params). See Note [Optimizer seam for mixed precision].
  void update(size_t index, Tensor& param, const Tensor& grad);

  // Note [Fused master copy]: from now on every update of parameter `index` (an f32 parameter)
  // also writes its new value, rounded to nearest even, into `copy`'s data (a bf16 or f16
  // Variable shaped like the parameter, on its device) in the same pass. An undefined `copy`
  // removes it. A copy is a binding, not state: state_dict does not save it.
  void set_rounded_copy(size_t index, Variable copy);

  // State for checkpoints (tensor/safetensors.h):
  //   metadata  "optimizer" = name(), "param_groups" = G,
  //             "param_groups.<g>.lr", ".weight_decay", ".params" (how many),
  //             the rule's hyper-parameters ("momentum", "beta1", ...),
  //             "state.<i>.step" for every parameter that has been updated
  //   tensors   "state.<i>.<buffer>" ("momentum_buffer", "exp_avg", "exp_avg_sq")
  // The tensors are the live buffers (save or clone them); load_state_dict copies what it reads,
  // checks it against this optimizer (kind, group sizes, buffer names and shapes) before
  // changing anything, and restores the hyper-parameters, so the next step() is the one the
  // saved optimizer would have taken.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 protected:
  struct ParamState {
    int64_t step = 0;             // updates applied so far
    std::vector<Tensor> buffers;  // one per buffer_names(), allocated at the first update
  };

  // Default group settings and the rounding of a pure16 update. A derived constructor validates
  // its options, adds its parameters with add_param_group (the first decides the storage), then
  // calls finish_construction (virtual calls such as name() work from there on).
  Optimizer(double lr, double weight_decay, UpdateRounding rounding = UpdateRounding::stochastic, uint64_t seed = 0)
      : default_lr_(lr), default_weight_decay_(weight_decay), rounding_(rounding), gen_(seed) {}
  // Checks the storage against the rule (check_storage) and states the warnings.
  void finish_construction();

  // ---- the pure16 policy (Note [Storage policy]) ----
  // What the rule cannot do in 16 bits, checked once the parameters are known (throws).
  virtual void check_storage() const {}
  // The decay rates the 16-bit rule rounds to the format (name, value), and the warning for f16
  // state that holds squares (nullptr: none).
  virtual std::vector<std::pair<const char*, double>> decay_rates() const { return {}; }
  virtual const char* f16_state_warning() const { return nullptr; }
  // Recomputes warnings() (after a change of the rates) and prints each new one once.
  void refresh_warnings();
  // A decay rate as the 16-bit unit of `param` holds it.
  static double rate16(double rate, const Tensor& param) { return decay_rate_16(rate, param.dtype()).value; }
  // The Philox offset of an update of `numel` elements; the stream advances only under
  // stochastic rounding.
  uint64_t stream_offset(int64_t numel);
  Rounding kernel_rounding() const {
    return rounding_ == UpdateRounding::stochastic ? Rounding::stochastic : Rounding::nearest;
  }
  bool kahan() const { return pure16_ && rounding_ == UpdateRounding::kahan; }

  // Names of the state buffers the rule keeps per parameter (may depend on hyper-parameters).
  virtual std::vector<std::string> buffer_names() const = 0;
  // The value buffer b starts at (Adagrad's initial_accumulator_value); 0 for the others.
  virtual double buffer_init(size_t) const { return 0.0; }
  // A new buffer b for a parameter like `like`: buffer_init(b) in its shape, dtype and device.
  Tensor new_buffer(size_t b, const Tensor& like) const;
  // The multi-tensor form of apply (Note [Device-side step]) for the parameters `index` (those
  // with a gradient), params[k] = param(index[k]).data(): one call for all of them. steps holds
  // every parameter's step count on the device (row = parameter index), control the scaler's
  // state. Rules without one (the default) leave step_on_device unavailable.
  virtual bool has_multi_tensor_rule() const { return false; }
  virtual void apply_all(const std::vector<size_t>& index, const std::vector<Tensor>& params,
                         const std::vector<Tensor>& grads, const std::vector<ParamState*>& states,
                         const std::vector<Tensor>& copies, Tensor& steps, const Tensor& control);
  // Applies the rule to `param` at its `step`-th update (1-based) with the group's settings.
  // rounded_copy: nullptr, or the 16-bit tensor the rule's kernel writes round(new param) into.
  virtual void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
                     Tensor* rounded_copy) = 0;
  // The rule's hyper-parameters in the state dict. load_options validates everything before it
  // changes anything.
  virtual void save_options(TensorDict& dict) const = 0;
  virtual void load_options(const TensorDict& dict) = 0;

  void check_lr(double lr) const;
  // set_momentum's body: options.*field = m, once `validate` accepts a copy of the options with
  // it and, for a rule whose momentum buffer exists only while momentum != 0
  // (buffer_while_nonzero), once no parameter with state would gain or lose that buffer.
  template <class Options, class Validate>
  void replace_momentum(Options& options, double Options::*field, double m, Validate&& validate,
                        bool buffer_while_nonzero) const {
    Options o = options;
    o.*field = m;
    validate(o);
    if (buffer_while_nonzero) check_momentum_buffer_kept(options.*field, m);
    options = o;
  }
  void check_weight_decay(double wd) const;
  size_t group_of(size_t index) const { return group_of_[index]; }

 private:
  void check_momentum_buffer_kept(double from, double to) const;
  // save_options, and the rounding and stream of a pure16 optimizer.
  void save_all_options(TensorDict& dict) const;
  // The inverse: checks the rounding entries before load_options changes anything.
  void load_all_options(const TensorDict& dict);
  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_of_;   // parameter index -> group
  std::vector<ParamState> state_;  // parameter index -> state
  std::vector<Variable> copies_;   // parameter index -> rounded 16-bit copy (or undefined)
  // Note [Device-side step]: the step counts on the device (i64 [num_params]), or undefined
  // while they live in state_[i].step. pull_steps() brings them back to the host fields.
  Tensor device_steps_;
  void pull_steps() const;
  void place_steps_on_device();
  double default_lr_;
  double default_weight_decay_;
  bool pure16_ = false;
  UpdateRounding rounding_;
  Generator gen_;
  std::vector<std::string> warnings_;
};

}  // namespace mixtape
