// LSTM: a stack of LSTM layers over a sequence (Hochreiter & Schmidhuber 1997; the cell's
// formulas and gate layout i | f | g | o are those of tensor/ops/lstm.h, as in torch).
//
//   nn::LSTM lstm(/*input_size=*/16, /*hidden_size=*/32, /*num_layers=*/2, /*batch_first=*/true);
//   auto [out, state] = lstm(x);           // x [B, T, 16] -> out [B, T, 32]
//   auto [out2, state2] = lstm(x2, state); // carry the state {h, c}, each [2, B, 32]
//
// Note [LSTM layer schedule]
// Per layer, the input projection of all T steps is ONE GEMM: linear over x reshaped to
// [T*B, in] (or [B*T, in] batch first, with no transpose copy), giving the x W_ih^T + b_ih part
// of every step's gates. The projection is split into its T steps with one split node (its
// backward is one concat, not T scatters). Each step then adds one recurrent GEMM,
// linear(h, W_hh, b_hh), and runs the fused lstm_cell op. The step outputs h_t are stacked
// along the time dim. Parameters are cast to the input's dtype once per forward, not per step.
// A bidirectional layer runs a second, independent LSTM layer over the time-reversed input (split
// into steps and concatenated backwards) and reverses its output back the same way.
// Without a gradient-scaling rule on the tape, the steps of a layer are recorded as one node
// that runs the same ops and forms the recurrent weight gradient with one GEMM over all steps
// (Note [LSTM layer node] in autograd/functions/lstm.cpp; in 8 bits Note [8-bit LSTM layer]);
// with a rule, the unrolled graph.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "nn/module.h"

namespace mixtape::nn {

struct LSTMOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;          // b_ih and b_hh per layer
  bool batch_first = false;  // x and output as [B, T, .] instead of [T, B, .]
  double dropout = 0.0;      // on each layer's output but the last, in training mode
  // A second direction over the reversed sequence, as torch's.
  bool bidirectional = false;
};

// Hidden and cell state of every layer, each [num_layers, B, H]; bidirectional:
// [num_layers * 2, B, H] in torch's order (layer 0 forward, layer 0 reverse, layer 1 forward, ...).
struct LSTMState {
  Variable h;
  Variable c;
};

struct LSTMOutput {
  // [T, B, H] or [B, T, H] (batch_first): the last layer's h at every step; bidirectional: 2H
  // features, the forward direction's h_t then the reverse direction's (which has read x_T .. x_t).
  Variable output;
  LSTMState state;  // h_n, c_n after the last step
};

// Parameters per layer l, named as in torch: weight_ih_l{l} [4H, in_l] (in_0 = input_size,
// else H, or 2H bidirectional), weight_hh_l{l} [4H, H], bias_ih_l{l} [4H], bias_hh_l{l} [4H];
// bidirectional: the same again with the suffix _reverse after each layer's forward ones; all
// initialized U(-1/sqrt(H), 1/sqrt(H)) in that order.
class LSTM : public Module {
 public:
  explicit LSTM(const LSTMOptions& options, Generator& gen = default_generator());
  // torch.nn.LSTM's arguments in torch's order.
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
       double dropout = 0.0, bool bidirectional = false, Generator& gen = default_generator());

  // x [T, B, input_size] (or [B, T, input_size]); `state` defaults to zeros. The state is cast
  // to x's dtype like the parameters.
  LSTMOutput forward(const Variable& x, const std::optional<LSTMState>& state = std::nullopt);
  LSTMOutput operator()(const Variable& x, const std::optional<LSTMState>& state = std::nullopt) {
    return forward(x, state);
  }

  std::string extra_repr() const override;
  void reset_parameters(Generator& gen);
  const LSTMOptions& options() const { return options_; }

  struct Layer {
    Variable weight_ih, weight_hh, bias_ih, bias_hh;  // biases undefined without bias
  };
  // One per layer and direction: layers()[l * num_directions + d].
  const std::vector<Layer>& layers() const { return layers_; }

  // The generator of the inter-layer dropout masks (seeded from the construction generator).
  Generator& dropout_generator() { return dropout_gen_; }
  void set_dropout_seed(uint64_t seed) { dropout_gen_ = Generator(seed); }

 private:
  LSTMOptions options_;
  std::vector<Layer> layers_;
  Generator dropout_gen_;
};

}  // namespace mixtape::nn
