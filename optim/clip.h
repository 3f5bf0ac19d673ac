// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_), on scaled gradients.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace mixtape {

// The L2 norm of all unscaled gradients of `params` taken together (parameters without a
// gradient are skipped), computed in fp32 per element and summed in double. When the norm is
// finite and above max_norm, every stored gradient g (whatever its scale and dtype) is
// multiplied by max_norm / (norm + 1e-6), in fp32 and rounded once to g's dtype, so that the
// unscaled gradients have norm max_norm (up to that epsilon, as PyTorch). An inf or NaN norm is
// returned as it is and nothing is scaled: the caller (a loss scaler) decides whether to skip.
double clip_grad_norm(const std::vector<Variable>& params, double max_norm);

// The same norm without clipping.
double grad_norm(const std::vector<Variable>& params);

}  // namespace mixtape
