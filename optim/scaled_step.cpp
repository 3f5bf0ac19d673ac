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
//   4. clip    by value and/or to a global norm, on the unscaled values, so max_grad_value and
//              max_grad_norm keep their fp32 meaning;
//   5. update  the optimizer's rule on plain gradients. Weight decay acts on what the optimizer
//              holds (the fp32 masters under MasterWeights, where it cannot underflow), and a
//              master's update also writes its 16-bit parameter (Note [Fused master copy]);
//   6. drop    the gradients: the next backward starts from nothing.
// Where the decision lives is the one switch. On the host (the CPU, and any rule or optimizer
// without a device form), the steps run as written: the check is read back, and the host
// branches on it. On a GPU, when the scaler keeps its state there (Note [Loss scale on the
// device]) and the optimizer has a multi-tensor rule (Note [Device-side step] in
// optim/optimizer.h), steps 1-4 are one multi-tensor launch that unscales every gradient into
// fp32 (the unscaled copy is made whether or not the step is applied: the decision is not known
// on the host, and a skipped step drops it with the gradients), checks it and sums its squares,
// plus one launch that lets the scaler's rule decide and computes the clip factor; step 5 is one
// multi-tensor launch that does nothing unless the device says the step is applied, as PyTorch's
// fused optimizers read GradScaler's found_inf. Nothing is read back: the report reads the
// decision when the host asks (StepReport). The arithmetic is the same on both sides (the
// formulas of tensor/core/update_formulas.h); the sums of the norm run in another order. Value
// clipping has no device form: a step that clips by value decides on the host.
namespace {

// Whether this step decides on the device (the one switch of Note [Scaled step]).
bool decides_on_device(const Optimizer& opt, const LossScaler& scaler) {
  return scaler.on_device() && opt.device_step_ready();
}

}  // namespace

StepReport StepReport::decided(bool applied, const GradCheck& check, double grad_norm) {
  StepReport r;
  r.applied_ = applied;
  r.check_ = check;
  r.grad_norm_ = grad_norm;
  return r;
}

StepReport StepReport::on_device(const LossScaler& scaler) {
  StepReport r;
  r.device_ = &scaler;
  return r;
}

bool StepReport::applied() const { return device_ ? device_->last_device_applied() : applied_; }
GradCheck StepReport::check() const { return device_ ? device_->last_device_check() : check_; }
double StepReport::grad_norm() const { return device_ ? device_->last_device_grad_norm() : grad_norm_; }

StepReport scaled_step(const std::vector<Variable>& params, Optimizer& opt, LossScaler& scaler, double max_grad_norm,
                       const std::vector<size_t>& slot) {
  return scaled_step(params, opt, scaler, GradClip{.max_norm = max_grad_norm}, slot);
}

StepReport scaled_step(const std::vector<Variable>& params, Optimizer& opt, LossScaler& scaler, const GradClip& clip,
                       const std::vector<size_t>& slot, bool overflow_elsewhere) {
  const double max_grad_norm = clip.max_norm;
  MT_CHECK(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0,
           "scaled_step: max_grad_norm must be finite and >= 0 (0 turns clipping off), got ", max_grad_norm);
  MT_CHECK(std::isfinite(clip.max_value) && clip.max_value >= 0.0,
           "scaled_step: max_grad_value must be finite and >= 0 (0 turns value clipping off), got ", clip.max_value);
  MT_CHECK(clip.max_value == 0.0 || !scaler.on_device(), "scaled_step: value clipping (max_grad_value ", clip.max_value,
           ") runs on the host, but the ", scaler.name(),
           " loss scaler keeps its state on the device; build it without keep_on, or clip by norm");
  MT_CHECK(slot.empty() || slot.size() == params.size(), "scaled_step: ", params.size(), " parameters but ",
           slot.size(), " optimizer slots");
  MT_CHECK(!slot.empty() || params.size() == opt.num_params(), "scaled_step: ", params.size(),
           " parameters for an optimizer over ", opt.num_params());
  MT_CHECK(!overflow_elsewhere || !decides_on_device(opt, scaler),
           "scaled_step: another process's overflow is a host decision, and this step decides on the device");
  NoGrad no_grad;
  StepReport r;
  std::vector<Tensor> grads(opt.num_params());  // in the optimizer's order; undefined: no gradient
  if (decides_on_device(opt, scaler)) {
    std::vector<Tensor> stored;  // 1-4 on the device, in the order of `params`
    std::vector<float> scales;
    std::vector<size_t> to;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::optional<ScaledGrad>& g = params[i].grad();
      if (!g || !g->defined()) continue;
      stored.push_back(g->g);
      scales.push_back(g->scale);
      to.push_back(slot.empty() ? i : slot[i]);
    }
    const std::vector<Tensor> unscaled = scaler.unscale_and_decide(stored, scales, max_grad_norm);  // 1-4
    for (size_t k = 0; k < to.size(); ++k) {
      MT_ASSERT(to[k] < grads.size() && !grads[to[k]].defined(), "scaled_step: bad optimizer slot ", to[k]);
      grads[to[k]] = unscaled[k];
    }
    opt.step_on_device(grads, scaler.device_state());  // 5, skipped on the device's decision
    r = StepReport::on_device(scaler);
  } else {
    GradCheck check = check_grads(params);  // 1
    check.found_inf = check.found_inf || overflow_elsewhere;
    const bool applied = scaler.update(check);  // 2
    double norm = 0.0;
    if (applied) {
      for (size_t i = 0; i < params.size(); ++i) {
        const std::optional<ScaledGrad>& g = params[i].grad();
        const size_t j = slot.empty() ? i : slot[i];
        MT_ASSERT(j < grads.size() && !grads[j].defined(), "scaled_step: bad optimizer slot ", j);
        if (g && g->defined()) grads[j] = g->unscaled();  // 3
      }
      if (clip.max_value > 0.0) {  // 4, by value first; the report keeps the norm before clipping
        norm = grad_norm(grads);
        clip_grad_value(grads, clip.max_value);
        if (max_grad_norm > 0.0) clip_grad_norm(grads, max_grad_norm);
      } else {
        norm = max_grad_norm > 0.0 ? clip_grad_norm(grads, max_grad_norm) : grad_norm(grads);  // 4
      }
      opt.step(grads);  // 5
    }
    r = StepReport::decided(applied, check, norm);
  }
  for (Variable p : params) p.zero_grad();  // 6
  return r;
}

StepReport scaled_step(Optimizer& opt, LossScaler& scaler, double max_grad_norm) {
  return scaled_step(opt.params(), opt, scaler, max_grad_norm);
}

StepReport scaled_step(Optimizer& opt, LossScaler& scaler, const GradClip& clip, bool overflow_elsewhere) {
  return scaled_step(opt.params(), opt, scaler, clip, {}, overflow_elsewhere);
}

}  // namespace mixtape
