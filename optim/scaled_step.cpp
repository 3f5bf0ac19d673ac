#include "optim/scaled_step.h"

#include <cmath>

#include "autograd/tape.h"
#include "optim/clip.h"

namespace mixtape {

// Note [Scaled step]
// ~~~~~~~~~~~~~~~~~~
// Each gradient arrives as a ScaledGrad {g, alpha}: g holds alpha x the true gradient, and alpha
// is the loss scale S (loss scaling) or the product of the local factors the nodes chose on the
// way (gradient scaling, autograd/gradient_scaling.h). The step, top to bottom:
//   1. check   one pass over the stored (scaled) values: any inf/NaN, and max |g / alpha|;
//   2. decide  the scaler moves its scale and says whether to apply. The decision comes before
//              any write, so a skipped step changes nothing but the dropped gradients
//              (Micikevicius et al., section 3.2: an overflowed step must not reach the weights);
//   3. unscale each gradient by its own alpha, in fp32 (ScaledGrad::unscaled, f64 for f64
//              gradients), exactly once: from here on gradients are plain tensors;
//   4. clip    to a global norm, on the unscaled values, so max_grad_norm keeps its fp32 meaning;
//   5. update  the optimizer's rule on plain gradients. Weight decay acts on what the optimizer
//              holds (the fp32 masters under MasterWeights, where it cannot underflow), and a
//              master's update also writes its 16-bit parameter (Note [Fused master copy]);
//   6. drop    the gradients: the next backward starts from nothing.
StepReport scaled_step(const std::vector<Variable>& params, Optimizer& opt, LossScaler& scaler, double max_grad_norm,
                       const std::vector<size_t>& slot) {
  MT_CHECK(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0,
           "scaled_step: max_grad_norm must be finite and >= 0 (0 turns clipping off), got ", max_grad_norm);
  MT_CHECK(slot.empty() || slot.size() == params.size(), "scaled_step: ", params.size(), " parameters but ",
           slot.size(), " optimizer slots");
  MT_CHECK(!slot.empty() || params.size() == opt.num_params(), "scaled_step: ", params.size(),
           " parameters for an optimizer over ", opt.num_params());
  NoGrad no_grad;
  StepReport r;
  r.check = check_grads(params);       // 1
  r.applied = scaler.update(r.check);  // 2
  if (r.applied) {
    std::vector<Tensor> grads(opt.num_params());  // in the optimizer's order; undefined: no gradient
    for (size_t i = 0; i < params.size(); ++i) {
      const std::optional<ScaledGrad>& g = params[i].grad();
      const size_t j = slot.empty() ? i : slot[i];
      MT_ASSERT(j < grads.size() && !grads[j].defined(), "scaled_step: bad optimizer slot ", j);
      if (g && g->defined()) grads[j] = g->unscaled();  // 3
    }
    r.grad_norm = max_grad_norm > 0.0 ? clip_grad_norm(grads, max_grad_norm) : grad_norm(grads);  // 4
    opt.step(grads);                                                                              // 5
  }
  for (Variable p : params) p.zero_grad();  // 6
  return r;
}

StepReport scaled_step(Optimizer& opt, LossScaler& scaler, double max_grad_norm) {
  return scaled_step(opt.params(), opt, scaler, max_grad_norm);
}

}  // namespace mixtape
