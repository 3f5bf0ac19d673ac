// Fused optimizer updates on plain tensors (no autograd): one pass over a parameter reads its
// gradient and state and writes the new parameter and state in place. The optimizers in optim/
// call these on each parameter (or, with master weights, on its fp32 master copy).
//
// Numerics (docs/design.md: optimizer math in fp32): every element is loaded into the compute type
// (float for f32 params, double for f64 params used by tests), updated, and stored once.
// Scalars that depend only on the step (bias corrections) are computed in double on the host.
//
// Dtypes. param: f32 or f64. grad: the param's compute dtype (f32 for f32, f64 for f64), already
// unscaled (ScaledGrad::unscaled). State buffers: the param's dtype, shape and device.
// 16-bit parameters are rejected here; they are updated through fp32 master weights, or by the
// 16-bit update rules (stochastic rounding, Kahan), sgd16_update_ and adamw16_update_ below
// (Note [Update kernel dtypes] in tensor/cpu/optim.cpp).
// All tensors share one device and one shape; any strides, but the ones written (param and
// state) must not be broadcast views (a zero stride over a dim longer than 1).
//
// Note [Fused master copy]
// In mixed precision the fp32 master is updated and then rounded into the 16-bit weight the
// next forward reads (Micikevicius et al., section 3.1). rounded_copy, when given, is that
// 16-bit tensor (bf16 or f16, the param's shape and device, any strides): the same pass that
// writes the new fp32 param also writes round_nearest_even(new param) into it, so the copy
// costs one 2-byte store per element instead of a second pass that reads the master again.
// The bits equal those of rounded_copy->copy_(param) after the update (one RNE rounding of the
// same fp32 value). The param must be f32 (a master weight).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/core/update_formulas.h"
#include "tensor/tensor.h"

namespace mixtape {

// torch.optim.SGD, for one parameter at its `step`-th update (1-based):
//   g = grad + weight_decay * param
//   if momentum != 0:
//     buf = g                                        at step 1
//     buf = momentum * buf + (1 - dampening) * g     afterwards
//     g   = nesterov ? g + momentum * buf : buf
//   param -= lr * g
// momentum_buf is read and written only when momentum != 0 (else it may be undefined); at
// step 1 its old contents are ignored. nesterov needs momentum > 0 and dampening == 0.
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum, double dampening,
                 double weight_decay, bool nesterov, int64_t step, Tensor* rounded_copy = nullptr);

// torch.optim.Adam (decoupled = false) and torch.optim.AdamW (decoupled = true), for one
// parameter at its `step`-th update (1-based, counted per parameter):
//   Adam:  g = grad + weight_decay * param            (L2 penalty folded into the gradient)
//   AdamW: g = grad,  param *= 1 - lr * weight_decay  (decay applied to the weights directly)
//   exp_avg    = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g^2
//   param -= (lr / (1 - beta1^step)) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
// The state buffers start at zero (the optimizer allocates them with zeros).
// amsgrad (max_exp_avg_sq given, a buffer like the others, zeros at the first update):
//   max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq)            (torch.maximum: NaN wins)
//   and the denominator takes sqrt(max_exp_avg_sq) instead of sqrt(exp_avg_sq).
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                  double beta2, double eps, double weight_decay, bool decoupled, int64_t step,
                  Tensor* rounded_copy = nullptr, Tensor* max_exp_avg_sq = nullptr);

// torch.optim.RMSprop, for one parameter:
//   g = grad + weight_decay * param
//   square_avg = alpha * square_avg + (1 - alpha) * g^2
//   centered:  grad_avg = lerp(grad_avg, g, 1 - alpha);  avg = sqrt(square_avg - grad_avg^2) + eps
//   else:      avg = sqrt(square_avg) + eps
//   momentum > 0:  buf = momentum * buf + g / avg;  param -= lr * buf
//   else:          param -= lr * (g / avg)
// Buffers start at zero; grad_avg is read and written only when centered, momentum_buf only when
// momentum > 0 (else either may be undefined).
void rmsprop_update_(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& grad_avg, Tensor& momentum_buf,
                     double lr, double alpha, double eps, double weight_decay, double momentum, bool centered,
                     Tensor* rounded_copy = nullptr);

// torch.optim.Adagrad, for one parameter at its `step`-th update (1-based):
//   g = grad + weight_decay * param
//   clr = lr / (1 + (step - 1) * lr_decay)                 (in double on the host)
//   sum = sum + g^2                                         (sum starts at initial_accumulator_value)
//   param -= clr * (g / (sqrt(sum) + eps))
void adagrad_update_(Tensor& param, const Tensor& grad, Tensor& sum, double lr, double lr_decay, double eps,
                     double weight_decay, int64_t step, Tensor* rounded_copy = nullptr);

// ---- gradient statistics for loss scaling ---------------------------------------------------

// What a loss scaler needs from one gradient tensor, in one pass: whether any element is inf or
// NaN, and the largest |g| over the finite elements (0 for an empty or all-zero tensor). g: any
// floating dtype, any strides; the values are read as stored (a ScaledGrad's g, still scaled).
struct GradStats {
  bool has_inf_nan = false;
  double max_abs = 0.0;
};
GradStats grad_stats(const Tensor& g);
// grad_stats of each tensor (undefined entries are not allowed), equal to calling it per tensor.
// Tensors on one CUDA device (none f64) write their stats into the rows of one device buffer
// that is read back once, instead of one host round trip per tensor; anything else (CPU
// tensors, mixed devices, f64) takes the per-tensor path.
std::vector<GradStats> grad_stats(const std::vector<Tensor>& gs);

// ---- the device-side step: every parameter at once (Note [Scaled step] in optim/scaled_step.cpp) ----
//
// CUDA only (the CPU decides on the host, optim/scaled_step.cpp), all tensors on one device,
// contiguous; each is a fixed number of launches whatever the number of tensors (Note
// [Multi-tensor launches] in cuda/optim.cu). The state tensors are the loss scaler's, laid out by
// formulas::StepF (f32) and StepI (i64) in tensor/core/update_formulas.h.

// Steps 1-4: returns grads[i] / (scales[i] * S) in fp32, S = fstate[kScale] (scales[i]: the
// gradient's own power-of-two scale); checks them for inf/NaN, measures their global L2 norm,
// applies `rule` to fstate and istate (scale, counter, step counts, kApplied) and sets
// fstate[kClip] to the clip factor for max_grad_norm (0: none; 1 when nothing is clipped).
// grads: f32, f16 or bf16. Two launches (one more per 32 gradients beyond the first 32).
std::vector<Tensor> unscale_and_decide_(const std::vector<Tensor>& grads, const std::vector<float>& scales,
                                        Tensor& fstate, Tensor& istate, const formulas::LossScaleRule& rule,
                                        double max_grad_norm);

// adam_update_ of every params[i] with grads[i] x control[kClip], at its step steps[step_index[i]] + 1
// (steps: i64, one row per parameter of the optimizer, advanced in place by the launch), with
// lrs[i] and weight_decays[i]; copies[i] defined: its rounded copy (Note [Fused master copy]).
// Nothing is written unless control[kApplied] is 1: the scaler's skip, read on the device.
// Two launches per 32 parameters.
void multi_adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                        const std::vector<Tensor>& copies, const std::vector<double>& lrs,
                        const std::vector<double>& weight_decays, double beta1, double beta2, double eps,
                        bool decoupled, Tensor& steps, const std::vector<int64_t>& step_index, const Tensor& control);

// ---- pure 16-bit updates (Zamirai et al., "Revisiting BFloat16 Training", Algorithms 2-5) ----
//
// Weights and optimizer state are stored in bf16 or f16 (param and every state buffer share that
// dtype); the gradient arrives unscaled in f32. Each element is computed in fp32 between the
// stored 16-bit values (Note [16-bit update rules] in tensor/cpu/optim.cpp). State buffers are
// rounded to nearest even when stored, and the new weight w + u (u the update) is rounded by one
// of three rules:
//   nearest      w = round_nearest(w + u)                           (the "standard" algorithm)
//   stochastic   w = round_stochastic(w + u, r)                      rounding = Rounding::stochastic:
//                r = philox_words(seed, offset + i)[0] for the element of row-major index i,
//                so an update consumes numel counters of the stream (Generator::advance)
//   Kahan        y = u - c;  s = round_nearest(w + y);              kahan_comp defined: c, a 16-bit
//                c = round_nearest((s - w) - y);  w = s             buffer like the state, zeros
//                                                                   at the first update
// kahan_comp is undefined for the first two rules; Kahan summation goes with Rounding::nearest.
// Hyper-parameters enter the fp32 compute as given: callers that model a 16-bit unit round the
// decay rates first (optim/pure16.h).

// Algorithm 2 (stochastic rounding) and 3 (Kahan), and the nearest-rounding baseline:
//   g = grad + weight_decay * w
//   m = momentum * m + g             (momentum_buf read and written only when momentum != 0;
//                                     it starts at zero, so m = g at the first update)
//   u = -lr * m                      (m as stored, after its rounding; g when momentum == 0)
void sgd16_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, Tensor& kahan_comp, double lr,
                   double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset);

// Algorithm 4 (stochastic rounding) and 5 (Kahan), and the nearest-rounding baseline, at the
// parameter's `step`-th update (1-based):
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   u = -(lr * (m / (1 - beta1^step)) / (sqrt(v / (1 - beta2^step)) + eps) + lr * weight_decay * w)
// m and v are read back as stored (16-bit) before u is formed. The bias corrections are computed
// in double on the host from the given betas.
// amsgrad (max_exp_avg_sq given, 16-bit like the moments): the running maximum of the stored v
// replaces v in the denominator; the maximum of two stored values needs no rounding.
void adamw16_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& kahan_comp,
                     double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                     Rounding rounding, uint64_t seed, uint64_t offset, Tensor* max_exp_avg_sq = nullptr);

// rmsprop_update_ with 16-bit state: square_avg, grad_avg (centered) and the momentum buffer
// (momentum > 0) are rounded to nearest when stored and read back as stored; the weight is
// written under the rounding rule. Centered: sq - grad_avg^2 is clamped at 0 before the square
// root (formulas::rmsprop16).
void rmsprop16_update_(Tensor& param, const Tensor& grad, Tensor& square_avg, Tensor& grad_avg, Tensor& momentum_buf,
                       Tensor& kahan_comp, double lr, double alpha, double eps, double weight_decay, double momentum,
                       bool centered, Rounding rounding, uint64_t seed, uint64_t offset);

// adagrad_update_ with a 16-bit accumulator (rounded to nearest when stored), the weight written
// under the rounding rule.
void adagrad16_update_(Tensor& param, const Tensor& grad, Tensor& sum, Tensor& kahan_comp, double lr, double lr_decay,
                       double eps, double weight_decay, int64_t step, Rounding rounding, uint64_t seed,
                       uint64_t offset);

}  // namespace mixtape
