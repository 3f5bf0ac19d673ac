// The training step under a loss scale or per-operator gradient scaling: everything between
// "backward has run" and "the weights moved", in one function (Note [Scaled step]).
//
//   BackoffLossScaler scaler;
//   AdamW opt(model.parameters(), {.lr = 1e-3});
//   ... tape.backward(loss, scaler.scale());        // gradients arrive as {S * dL/dw, S}
//   StepReport r = scaled_step(opt, scaler, /*max_grad_norm=*/1.0);
//
// MasterWeights (optim/master_weights.h) calls the same function with its fp32 masters' optimizer.
#pragma once

#include <cstddef>
#include <vector>

#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace mixtape {

// What a step did. Decided on the host, it holds the answers; decided on the device (Note
// [Scaled step]), it reads them from the scaler's device state when asked -- free when the host
// has read the device since the step, one synchronization otherwise -- and is good until that
// scaler's next step. A report reads as whether the step was applied.
class StepReport {
 public:
  StepReport() = default;
  static StepReport decided(bool applied, const GradCheck& check, double grad_norm);
  static StepReport on_device(const LossScaler& scaler);

  bool applied() const;      // false: the scaler skipped the step; nothing but the gradients changed
  GradCheck check() const;   // what the scaler saw (inf/NaN, largest |true gradient|)
  double grad_norm() const;  // global L2 norm of the unscaled gradients before any clipping (0 if skipped)
  operator bool() const { return applied(); }

 private:
  bool applied_ = false;
  GradCheck check_;
  double grad_norm_ = 0.0;
  const LossScaler* device_ = nullptr;  // decided on the device: read from this scaler's state
};

// How a step clips the unscaled gradients (0: not at all).
struct GradClip {
  double max_norm = 0.0;   // > 0: to this global L2 norm (clip_grad_norm)
  double max_value = 0.0;  // > 0: each element to [-max_value, max_value] (clip_grad_value), first
};

// Note [Scaled step]: check, ask the scaler, unscale once, clip, update, drop the gradients.
//   params    the Variables holding the last backward's ScaledGrads (parameters without a
//             gradient are left alone);
//   opt       the optimizer that applies them: over `params` themselves (slot empty), or over
//             their fp32 masters, params[i]'s update being opt.param(slot[i]);
//   clip      clipping of the unscaled gradients: by value, then to a global L2 norm. Value
//             clipping runs on the host, so a scaler that keeps its state on a GPU refuses it.
//   overflow_elsewhere  another process's gradients overflowed (data parallelism:
//             dist::GradSync::any_overflow): the scaler sees an overflow whatever these gradients
//             hold, so every rank skips and backs off together. Decided on the host only.
StepReport scaled_step(const std::vector<Variable>& params, Optimizer& opt, LossScaler& scaler, const GradClip& clip,
                       const std::vector<size_t>& slot = {}, bool overflow_elsewhere = false);
//   max_grad_norm > 0 clips the unscaled gradients to that global L2 norm.
StepReport scaled_step(const std::vector<Variable>& params, Optimizer& opt, LossScaler& scaler,
                       double max_grad_norm = 0.0, const std::vector<size_t>& slot = {});

// The same for an optimizer that updates its own parameters (f32 parameters, or the 16-bit rules
// of optim/pure16.h).
StepReport scaled_step(Optimizer& opt, LossScaler& scaler, double max_grad_norm = 0.0);
StepReport scaled_step(Optimizer& opt, LossScaler& scaler, const GradClip& clip, bool overflow_elsewhere = false);

}  // namespace mixtape
