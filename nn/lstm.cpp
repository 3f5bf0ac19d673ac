#include "nn/lstm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/lstm.h"
#include "autograd/functions/dropout.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/view.h"
#include "autograd/scaling.h"
#include "nn/dropout.h"
#include "nn/init.h"

namespace mixtape::nn {

LSTM::LSTM(const LSTMOptions& o, Generator& gen) : Module("LSTM"), options_(o) {
  MT_CHECK(o.input_size > 0 && o.hidden_size > 0, "LSTM: input_size and hidden_size must be positive, got ",
           o.input_size, " and ", o.hidden_size);
  MT_CHECK(o.num_layers > 0, "LSTM: num_layers must be positive, got ", o.num_layers);
  MT_CHECK(o.dropout >= 0.0 && o.dropout < 1.0, "LSTM: dropout must be in [0, 1), got ", o.dropout);
  const int64_t H = o.hidden_size;
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const std::string s = "_l" + std::to_string(l);
    const int64_t in = l == 0 ? o.input_size : H;
    Layer layer;
    layer.weight_ih = register_parameter("weight_ih" + s, empty({4 * H, in}));
    layer.weight_hh = register_parameter("weight_hh" + s, empty({4 * H, H}));
    if (o.bias) {
      layer.bias_ih = register_parameter("bias_ih" + s, empty({4 * H}));
      layer.bias_hh = register_parameter("bias_hh" + s, empty({4 * H}));
    }
    layers_.push_back(layer);
  }
  reset_parameters(gen);
  dropout_gen_ = Generator(draw_seed(gen));
  register_generator("dropout", dropout_gen_);
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool batch_first, bool bias, double dropout,
           Generator& gen)
    : LSTM(LSTMOptions{input_size, hidden_size, num_layers, batch_first, bias, dropout}, gen) {}

void LSTM::reset_parameters(Generator& gen) {
  const double bound = 1.0 / std::sqrt(double(options_.hidden_size));
  for (const Variable& p : parameters(false)) init::uniform_(p, gen, -bound, bound);
}

LSTMOutput LSTM::forward(const Variable& x, const std::optional<LSTMState>& state) {
  const LSTMOptions& o = options_;
  MT_CHECK(x.defined() && x.dim() == 3 && x.size(2) == o.input_size, str(), ": expected input ",
           o.batch_first ? "[B, T, " : "[T, B, ", o.input_size, "], got ",
           x.defined() ? x.data().meta() : "an undefined Variable");
  const int64_t tdim = o.batch_first ? 1 : 0;
  const int64_t T = x.size(tdim), B = x.size(1 - tdim), H = o.hidden_size, L = o.num_layers;
  MT_CHECK(T > 0 && B > 0, str(), ": the input ", x.data().meta(), " has no steps or no batch");
  const DType dt = x.dtype();

  // Initial state per layer: [B, H] pieces of h0 / c0 [L, B, H], or zeros.
  std::vector<Variable> h0(static_cast<size_t>(L)), c0(static_cast<size_t>(L));
  if (state) {
    for (const Variable* s : {&state->h, &state->c})
      MT_CHECK(s->defined() && s->shape() == Shape({L, B, H}), str(), ": the initial state must be two [", L, ", ", B,
               ", ", H, "] tensors (num_layers, batch, hidden), got ",
               s->defined() ? s->data().meta() : "an undefined Variable");
    const std::vector<Variable> hs = split(cast(state->h, dt), 1, 0), cs = split(cast(state->c, dt), 1, 0);
    for (int64_t l = 0; l < L; ++l) {
      h0[size_t(l)] = squeeze(hs[size_t(l)], 0);
      c0[size_t(l)] = squeeze(cs[size_t(l)], 0);
    }
  } else {
    const Variable zero(zeros({B, H}, dt, x.device()));
    std::fill(h0.begin(), h0.end(), zero);
    std::fill(c0.begin(), c0.end(), zero);
  }

  // Note [LSTM layer schedule]
  Variable layer_in = x;
  std::vector<Variable> h_n, c_n;
  for (int64_t l = 0; l < L; ++l) {
    const Layer& p = layers_[size_t(l)];
    const Variable w_ih = cast(p.weight_ih, dt), w_hh = cast(p.weight_hh, dt);
    const Variable b_ih = p.bias_ih.defined() ? cast(p.bias_ih, dt) : Variable();
    const Variable b_hh = p.bias_hh.defined() ? cast(p.bias_hh, dt) : Variable();
    const int64_t in = layer_in.size(2);
    // x W_ih^T + b_ih for every step: (T*B, 4H) = (T*B, in) (4H, in)^T, back to the input layout.
    Shape proj_shape = layer_in.shape();
    proj_shape[2] = 4 * H;
    const Variable proj = reshape(linear(reshape(layer_in, {T * B, in}), w_ih, b_ih), proj_shape);
    if (!scaling_rule_active()) {
      // The recurrence as one node (Note [LSTM layer node]): the same forward, and one GEMM
      // for the weight gradient of all T steps.
      LstmLayerResult r = lstm_layer(proj, w_hh, b_hh, h0[size_t(l)], c0[size_t(l)], tdim);
      h_n.push_back(r.h);
      c_n.push_back(r.c);
      layer_in = r.out;
    } else {
      // Gradient scaling chooses a scale per recurrent GEMM: the unrolled graph.
      const std::vector<Variable> steps = split(proj, 1, tdim);
      Variable h = h0[size_t(l)], c = c0[size_t(l)];
      std::vector<Variable> outs;
      outs.reserve(size_t(T));
      for (int64_t t = 0; t < T; ++t) {
        // gates (B, 4H) = proj_t + h W_hh^T + b_hh
        const Variable gates = squeeze(steps[size_t(t)], tdim) + linear(h, w_hh, b_hh);
        auto [c_next, h_next] = lstm_cell(gates, c);
        c = c_next;
        h = h_next;
        outs.push_back(h);
      }
      h_n.push_back(h);
      c_n.push_back(c);
      layer_in = stack(outs, tdim);
    }
    if (l + 1 < L) layer_in = dropout(layer_in, o.dropout, is_training(), dropout_gen_);
  }
  return {layer_in, {stack(h_n, 0), stack(c_n, 0)}};
}

std::string LSTM::extra_repr() const {
  const LSTMOptions& o = options_;
  std::string s = detail::cat(o.input_size, ", ", o.hidden_size);
  if (o.num_layers != 1) s += detail::cat(", num_layers=", o.num_layers);
  if (o.batch_first) s += ", batch_first=true";
  if (!o.bias) s += ", bias=false";
  if (o.dropout != 0.0) s += detail::cat(", dropout=", o.dropout);
  return s;
}

}  // namespace mixtape::nn
