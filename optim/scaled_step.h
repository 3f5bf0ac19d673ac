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

struct StepReport {
  bool applied = false;    // false: the scaler skipped the step; nothing but the gradients changed
  GradCheck check;         // what the scaler saw (inf/NaN, largest |true gradient|)
  double grad_norm = 0.0;  // global L2 norm of the unscaled gradients before clipping (0 if skipped)
};

// Note [Scaled step]: check, ask the scaler, unscale once, clip, update, drop the gradients.
//   params    the Variables holding the last backward's ScaledGrads (parameters without a
//             gradient are left alone);
//   opt       the optimizer that applies them: over `params` themselves (slot empty), or over
//             their fp32 masters, params[i]'s update being opt.param(slot[i]);
//   max_grad_norm > 0 clips the unscaled gradients to that global L2 norm.
StepReport scaled_step(const std::vector<Variable>& params, Optimizer& opt, LossScaler& scaler,
                       double max_grad_norm = 0.0, const std::vector<size_t>& slot = {});

// The same for an optimizer that updates its own parameters (f32 parameters, or the 16-bit rules
// of optim/pure16.h).
StepReport scaled_step(Optimizer& opt, LossScaler& scaler, double max_grad_norm = 0.0);

}  // namespace mixtape
