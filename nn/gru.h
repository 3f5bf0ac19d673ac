// GRU: a stack of GRU layers over a sequence (Cho et al. 2014; the cell's formulas and gate
// layout r | z | n are those of tensor/ops/lstm.h, as in torch).
//
//   nn::GRU gru(nn::GRUOptions{.input_size = 16, .hidden_size = 32, .num_layers = 2, .batch_first = true});
//   auto [out, h] = gru(x);          // x [B, T, 16] -> out [B, T, 32], h [2, B, 32]
//   auto [out2, h2] = gru(x2, h);    // carry the hidden state
//
// Note [GRU layer schedule]
// Per layer and direction, as nn::LSTM's unrolled graph (Note [LSTM layer schedule]): the input
// projection x W_ih^T + b_ih of all T steps is one GEMM, split into its steps by one split node;
// each step adds one recurrent GEMM gh = h W_hh^T + b_hh (a linear node, so under gradient scaling
// it chooses its own scale) and runs the fused gru_cell op, which keeps gh's n chunk apart because
// the reset gate scales it. The steps' h are stacked along the time dim. A bidirectional layer
// runs its second direction over the time-reversed input and reverses that output back.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "nn/module.h"

namespace mixtape::nn {

struct GRUOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;            // b_ih and b_hh per layer
  bool batch_first = false;    // x and output as [B, T, .] instead of [T, B, .]
  double dropout = 0.0;        // on each layer's output but the last, in training mode
  bool bidirectional = false;  // a second direction over the reversed sequence, as torch's
};

struct GRUOutput {
  // [T, B, H] or [B, T, H] (batch_first): the last layer's h at every step; bidirectional: 2H
  // features, the forward direction's h_t then the reverse direction's.
  Variable output;
  // h_n [num_layers * num_directions, B, H] after the last step, in torch's order (layer 0
  // forward, layer 0 reverse, layer 1 forward, ...).
  Variable h;
};

// Parameters per layer l, named as in torch: weight_ih_l{l} [3H, in_l] (in_0 = input_size, else
// H, or 2H bidirectional), weight_hh_l{l} [3H, H], bias_ih_l{l} [3H], bias_hh_l{l} [3H];
// bidirectional: the same again with the suffix _reverse after each layer's forward ones; all
// initialized U(-1/sqrt(H), 1/sqrt(H)) in that order.
class GRU : public Module {
 public:
  explicit GRU(const GRUOptions& options, Generator& gen = default_generator());
  // torch.nn.GRU's arguments in torch's order.
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
      double dropout = 0.0, bool bidirectional = false, Generator& gen = default_generator());

  // x [T, B, input_size] (or [B, T, input_size]); `h0` [num_layers * num_directions, B, H]
  // defaults to zeros and is cast to x's dtype like the parameters.
  GRUOutput forward(const Variable& x, const std::optional<Variable>& h0 = std::nullopt);
  GRUOutput operator()(const Variable& x, const std::optional<Variable>& h0 = std::nullopt) { return forward(x, h0); }

  std::string extra_repr() const override;
  void reset_parameters(Generator& gen);
  const GRUOptions& options() const { return options_; }

  struct Layer {
    Variable weight_ih, weight_hh, bias_ih, bias_hh;  // biases undefined without bias
  };
  // One per layer and direction: layers()[l * num_directions + d].
  const std::vector<Layer>& layers() const { return layers_; }

  // The generator of the inter-layer dropout masks (seeded from the construction generator).
  Generator& dropout_generator() { return dropout_gen_; }
  void set_dropout_seed(uint64_t seed) { dropout_gen_ = Generator(seed); }

 private:
  GRUOptions options_;
  std::vector<Layer> layers_;
  Generator dropout_gen_;
};

}  // namespace mixtape::nn
