// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_), on plain (unscaled)
// gradients: scaled_step (optim/scaled_step.h) unscales first, then clips.
#pragma once

#include <vector>

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

}  // namespace mixtape
