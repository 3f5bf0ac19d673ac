// Fused optimizer updates on plain tensors (no autograd): one pass over a parameter reads its
// gradient and state and writes the new parameter and state in place. The optimizers in optim/
// call these on each parameter (or, with master weights, on its fp32 master copy).
//
// Numerics (DESIGN.md: optimizer math in fp32): every element is loaded into the compute type
// (float for f32 params, double for f64 params used by tests), updated, and stored once.
// Scalars that depend only on the step (bias corrections) are computed in double on the host.
//
// Dtypes. param: f32 or f64. grad: the param's compute dtype (f32 for f32, f64 for f64), already
// unscaled (ScaledGrad::unscaled). State buffers: the param's dtype, shape and device.
// 16-bit parameters are rejected here; they are updated through fp32 master weights, or by the
// 16-bit update rules (stochastic rounding, Kahan), which are kernels of their own
// (Note [Update kernel dtypes] in tensor/cpu/optim.cpp).
// All tensors share one device and one shape; any strides, but the ones written (param and
// state) must not be broadcast views (a zero stride over a dim longer than 1).
#pragma once

#include <cstdint>

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
void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                 double dampening, double weight_decay, bool nesterov, int64_t step);

// torch.optim.Adam (decoupled = false) and torch.optim.AdamW (decoupled = true), for one
// parameter at its `step`-th update (1-based, counted per parameter):
//   Adam:  g = grad + weight_decay * param            (L2 penalty folded into the gradient)
//   AdamW: g = grad,  param *= 1 - lr * weight_decay  (decay applied to the weights directly)
//   exp_avg    = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g^2
//   param -= (lr / (1 - beta1^step)) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
// The state buffers start at zero (the optimizer allocates them with zeros).
void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr,
                  double beta1, double beta2, double eps, double weight_decay, bool decoupled, int64_t step);

}  // namespace mixtape
