#include "nn/lstm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/fp8.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/lstm.h"
#include "autograd/functions/dropout.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/view.h"
#include "autograd/scaling.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/recurrent.h"

namespace mixtape::nn {

LSTM::LSTM(const LSTMOptions& o, Generator& gen) : Module("LSTM"), options_(o) {
  layers_ = recurrent::register_layers<Layer>(*this, o, 4);
  reset_parameters(gen);
  dropout_gen_ = Generator(draw_seed(gen));
  register_generator("dropout", dropout_gen_);
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
           bool bidirectional, Generator& gen)
    : LSTM(LSTMOptions{input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional}, gen) {}

void LSTM::reset_parameters(Generator& gen) {
  const double bound = 1.0 / std::sqrt(double(options_.hidden_size));
  for (const Variable& p : parameters(false)) init::uniform_(p, gen, -bound, bound);
}

namespace {

// One layer in one direction over `in` ([T, B, in] or [B, T, in]), from the state (h0, c0).
LstmLayerResult run_direction(const LSTM::Layer& p, const Variable& in_seq, const Variable& h0, const Variable& c0,
                              int64_t tdim, int64_t H) {
  const DType dt = in_seq.dtype();
  const int64_t T = in_seq.size(tdim), B = in_seq.size(1 - tdim);
  const Variable w_ih = cast(p.weight_ih, dt), w_hh = cast(p.weight_hh, dt);
  const Variable b_ih = p.bias_ih.defined() ? cast(p.bias_ih, dt) : Variable();
  const Variable b_hh = p.bias_hh.defined() ? cast(p.bias_hh, dt) : Variable();
  const int64_t in = in_seq.size(2);
  // x W_ih^T + b_ih for every step: (T*B, 4H) = (T*B, in) (4H, in)^T, back to the input layout.
  Shape proj_shape = in_seq.shape();
  proj_shape[2] = 4 * H;
  const Variable proj = reshape(linear(reshape(in_seq, {T * B, in}), w_ih, b_ih), proj_shape);
  // The recurrence as one node (Note [LSTM layer node]): the same forward, and one GEMM for the
  // weight gradient of all T steps; under 8-bit training the node quantizes each step's GEMM
  // operands (Note [8-bit LSTM layer]).
  if (!scaling_rule_active()) {
    if (Fp8Context* fp8 = active_fp8(); fp8 && is_16bit(dt))
      return lstm_layer_fp8(*fp8, proj, w_hh, b_hh, h0, c0, tdim);
    return lstm_layer(proj, w_hh, b_hh, h0, c0, tdim);
  }
  // Gradient scaling chooses a scale per recurrent GEMM (and, in 8 bits, the beta of each step's
  // cast of dG to the gradient format): the unrolled graph, a linear node per step.
  const std::vector<Variable> steps = split(proj, 1, tdim);
  Variable h = h0, c = c0;
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
  return {stack(outs, tdim), h, c};
}

}  // namespace

LSTMOutput LSTM::forward(const Variable& x, const std::optional<LSTMState>& state) {
  const LSTMOptions& o = options_;
  MT_CHECK(x.defined() && x.dim() == 3 && x.size(2) == o.input_size, str(), ": expected input ",
           o.batch_first ? "[B, T, " : "[T, B, ", o.input_size, "], got ",
           x.defined() ? x.data().meta() : "an undefined Variable");
  const int64_t tdim = o.batch_first ? 1 : 0;
  const int64_t T = x.size(tdim), B = x.size(1 - tdim), H = o.hidden_size, L = o.num_layers;
  const int64_t D = o.bidirectional ? 2 : 1, N = L * D;
  MT_CHECK(T > 0 && B > 0, str(), ": the input ", x.data().meta(), " has no steps or no batch");
  const DType dt = x.dtype();

  // Initial state per layer and direction: [B, H] pieces of h0 / c0 [L * D, B, H], or zeros.
  std::vector<Variable> h0(static_cast<size_t>(N)), c0(static_cast<size_t>(N));
  if (state) {
    for (const Variable* s : {&state->h, &state->c})
      MT_CHECK(s->defined() && s->shape() == Shape({N, B, H}), str(), ": the initial state must be two [", N, ", ", B,
               ", ", H, "] tensors (", D == 2 ? "num_layers * 2" : "num_layers", ", batch, hidden), got ",
               s->defined() ? s->data().meta() : "an undefined Variable");
    h0 = recurrent::state_pieces(state->h, dt);
    c0 = recurrent::state_pieces(state->c, dt);
  } else {
    const Variable zero(zeros({B, H}, dt, x.device()));
    std::fill(h0.begin(), h0.end(), zero);
    std::fill(c0.begin(), c0.end(), zero);
  }

  // Note [LSTM layer schedule]; a bidirectional layer's second direction runs over the
  // time-reversed sequence, and its output is reversed back before the two are concatenated.
  Variable layer_in = x;
  std::vector<Variable> h_n, c_n;  // in torch's order: layer by layer, forward before reverse
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Variable> outs;
    for (int64_t d = 0; d < D; ++d) {
      const size_t k = size_t(l * D + d);
      const Variable in = d == 0 ? layer_in : recurrent::reverse_time(layer_in, tdim);
      LstmLayerResult r = run_direction(layers_[k], in, h0[k], c0[k], tdim, H);
      h_n.push_back(r.h);
      c_n.push_back(r.c);
      outs.push_back(d == 0 ? r.out : recurrent::reverse_time(r.out, tdim));
    }
    layer_in = D == 2 ? concat(outs, 2) : outs[0];  // [.., .., D * H]: forward | reverse
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
  if (o.bidirectional) s += ", bidirectional=true";
  return s;
}

}  // namespace mixtape::nn
