// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_) and by value
// (torch.nn.utils.clip_grad_value_), on plain (unscaled) gradients: scaled_step
// (optim/scaled_step.h) unscales first, then clips.
#pragma once

#include <vector>

#include "autograd/variable.h"
#include "tensor/tensor.h"

namespace mixtape {

// The L2 norm of all `grads` taken together (undefined entries are skipped), computed in fp32
// per element and summed in double without overflow or underflow. When the norm is finite and
// above max_norm, every gradient is replaced by grad * max_norm / (norm + 1e-6), computed in its
// own dtype, so that the gradients have norm max_norm (up to that epsilon, as PyTorch). An inf or
// NaN norm is returned as it is and nothing is scaled: the caller decides whether to skip.
double clip_grad_norm(std::vector<Tensor>& grads, double max_norm);

// The same norm without clipping.
double grad_norm(const std::vector<Tensor>& grads);

// Replaces every gradient (undefined entries are skipped) by its elements clamped to
// [-clip_value, clip_value], in its own dtype; a NaN stays NaN, an inf becomes +-clip_value (as
// torch.clamp). clip_value must be finite and >= 0.
void clip_grad_value(std::vector<Tensor>& grads, double clip_value);

// The forms torch.nn.utils takes, on the parameters (clip_grad_norm_(model.parameters(), 1.0)):
// the same clipping of each parameter's true gradient, its ScaledGrad's g / scale (parameters
// without a gradient are skipped). Each gradient is replaced in place, in its own dtype and at its
// own scale: g * coefficient, or g clamped to +-clip_value * scale (exact: scales are powers of
// two). clip_grad_norm returns the norm of the true gradients before clipping.
double clip_grad_norm(const std::vector<Variable>& parameters, double max_norm);
void clip_grad_value(const std::vector<Variable>& parameters, double clip_value);

}  // namespace mixtape
