// fp32 master weights (Micikevicius et al., section 3.1; OpenSeq2Seq's mixed-precision optimizer
// wrapper): wraps any Optimizer so that the update is always computed and accumulated in fp32.
//
//   auto make = [](std::vector<Variable> masters) {
//     return std::make_unique<AdamW>(std::move(masters), AdamWOptions{.lr = 1e-3});
//   };
//   MasterWeights mw(model.parameters(), make, {.max_grad_norm = 1.0});
//   BackoffLossScaler scaler;
//   ... tape.backward(loss, scaler.scale());
//   bool applied = mw.step(scaler);
//
// Model parameters may be stored in 16 bits (bf16, f16) or in f32/f64:
//   16-bit  MasterWeights keeps an fp32 copy (the master), and the inner optimizer is built over
//           the masters, so its state (momentum, Adam moments) lives in fp32 too. After each
//           applied step the masters are rounded to nearest even into the model parameters.
//   f32/f64 the parameter is its own master (the "mixed" policy, where modules cast their
//           fp32 parameters to the compute dtype in forward): MasterWeights only drives the
//           inner optimizer with the scaler's checks and per-parameter unscaling.
//
// step(scaler) is scaled_step (Note [Scaled step] in optim/scaled_step.h) with the inner
// optimizer over the masters: check the 16-bit (or f32) gradients, let the scaler skip, unscale
// each parameter's gradient by its own scale into fp32, clip, and update the masters. Weight
// decay therefore acts on the fp32 copy, where it cannot underflow (OpenSeq2Seq's wrapper). The
// constructor registers each 16-bit parameter as the rounded copy of its master
// (Optimizer::set_rounded_copy), so the update kernel writes the new fp32 master and its RNE
// rounding into the model in one pass (Note [Fused master copy] in tensor/ops/optim.h).
// step() consumes the gradients either way; the next backward starts from nothing.
//
// Several MasterWeights (each with its own scaler) can train different parameter sets side by
// side, e.g. a GAN's generator and discriminator; a parameter belongs to at most one of them.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/scaled_step.h"

namespace mixtape {

// Builds the inner optimizer over the master Variables (in the order of the model parameters).
// It may split them into groups; it must include every master exactly once.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<Variable> masters)>;

struct MasterWeightsOptions {
  double max_grad_norm = 0.0;   // > 0: clip the unscaled gradients to this global L2 norm
  double max_grad_value = 0.0;  // > 0: clamp each unscaled gradient element to [-v, v] (before the norm)
};

class MasterWeights {
 public:
  MasterWeights(std::vector<Variable> params, const OptimizerFactory& make_optimizer,
                MasterWeightsOptions options = {});
  MasterWeights(const MasterWeights&) = delete;
  MasterWeights& operator=(const MasterWeights&) = delete;

  // One training step from the gradients the last backward left (Note [Scaled step]).
  // The report reads as whether the update was applied (false: the scaler skipped it).
  // overflow_elsewhere: as scaled_step's (another process's gradients overflowed).
  StepReport step(LossScaler& scaler, bool overflow_elsewhere = false);
  // Drops every gradient.
  void zero_grad();

  Optimizer& optimizer() { return *inner_; }
  const Optimizer& optimizer() const { return *inner_; }
  const std::vector<Variable>& params() const { return params_; }
  // The fp32 master of parameter i: a separate f32 Variable for 16-bit parameters, the
  // parameter itself otherwise.
  const Variable& master(size_t i) const;
  bool has_copy(size_t i) const;  // whether parameter i has a separate master
  // The check of the last step() and the global norm of its unscaled gradients before clipping
  // (0 when the step was skipped).
  GradCheck last_check() const { return last_.check(); }
  double last_grad_norm() const { return last_.grad_norm(); }
  const StepReport& last_report() const { return last_; }

  // State for checkpoints: "master.<i>" (the fp32 copies of 16-bit parameters; the others are in
  // the model's own state dict) and the inner optimizer's state under "optimizer.". load_state_dict
  // validates names, shapes and dtypes before changing anything, then rounds the loaded masters
  // into the model parameters, so model and masters agree whatever order things were loaded in.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 private:
  std::vector<Variable> params_;
  std::vector<Variable> masters_;  // masters_[i] belongs to params_[i]
  std::vector<bool> copy_;         // 16-bit parameter with its own fp32 master
  std::vector<size_t> slot_;       // params_[i]'s master is inner_->param(slot_[i])
  std::unique_ptr<Optimizer> inner_;
  MasterWeightsOptions options_;
  StepReport last_;
};

}  // namespace mixtape
