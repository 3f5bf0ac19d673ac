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

// Checks a recurrent module's sizes (o: LSTMOptions or GRUOptions) and registers torch's
// parameters, for each layer l and direction d in that order: weight_ih<suffix> [gates*H, in],
// weight_hh<suffix> [gates*H, H] and, with o.bias, bias_ih<suffix> and bias_hh<suffix> [gates*H]
// (in = input_size for layer 0, num_directions * H above). Uninitialized: the caller's
// reset_parameters draws them.
template <class Layer, class Options>
std::vector<Layer> register_layers(Module& m, const Options& o, int64_t gates) {
  const std::string kind = m.type_name();
  MT_CHECK(o.input_size > 0 && o.hidden_size > 0, kind, ": input_size and hidden_size must be positive, got ",
           o.input_size, " and ", o.hidden_size);
  MT_CHECK(o.num_layers > 0, kind, ": num_layers must be positive, got ", o.num_layers);
  MT_CHECK(o.dropout >= 0.0 && o.dropout < 1.0, kind, ": dropout must be in [0, 1), got ", o.dropout);
  const int64_t H = o.hidden_size, D = o.bidirectional ? 2 : 1;
  std::vector<Layer> layers;
  for (int64_t l = 0; l < o.num_layers; ++l) {
    for (int64_t d = 0; d < D; ++d) {
      const std::string s = param_suffix(l, d);
      const int64_t in = l == 0 ? o.input_size : D * H;
      Layer layer;
      layer.weight_ih = m.register_parameter("weight_ih" + s, empty({gates * H, in}));
      layer.weight_hh = m.register_parameter("weight_hh" + s, empty({gates * H, H}));
      if (o.bias) {
        layer.bias_ih = m.register_parameter("bias_ih" + s, empty({gates * H}));
        layer.bias_hh = m.register_parameter("bias_hh" + s, empty({gates * H}));
      }
      layers.push_back(layer);
    }
  }
  return layers;
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
