// What nn::LSTM and nn::GRU share: parameter names, the time reversal of a bidirectional layer's
// second direction and the initial-state check (internal to nn/).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/functions/shape.h"
#include "autograd/functions/view.h"
#include "nn/module.h"

namespace mixtape::nn::recurrent {

// torch's suffix of layer l's parameters in direction d: "_l0", "_l0_reverse", ...
inline std::string param_suffix(int64_t layer, int64_t direction) {
  return "_l" + std::to_string(layer) + (direction == 1 ? "_reverse" : "");
}

// x with its time dim `tdim` reversed: split into steps and concatenated in the reverse order
// (both nodes pass the gradient scale through and copy values exactly).
inline Variable reverse_time(const Variable& x, int64_t tdim) {
  std::vector<Variable> steps = split(x, 1, tdim);
  std::reverse(steps.begin(), steps.end());
  return concat(steps, tdim);
}

// The [B, H] pieces of an initial state [n, B, H] (checked by the caller), cast to `dt`.
inline std::vector<Variable> state_pieces(const Variable& s, DType dt) {
  std::vector<Variable> pieces = split(cast(s, dt), 1, 0);
  for (Variable& p : pieces) p = squeeze(p, 0);
  return pieces;
}

}  // namespace mixtape::nn::recurrent
