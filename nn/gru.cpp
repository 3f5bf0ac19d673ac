#include "nn/gru.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/functions/dropout.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/lstm.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/view.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/recurrent.h"

namespace mixtape::nn {

GRU::GRU(const GRUOptions& o, Generator& gen) : Module("GRU"), options_(o) {
  layers_ = recurrent::register_layers<Layer>(*this, o, 3);
  reset_parameters(gen);
  dropout_gen_ = Generator(draw_seed(gen));
  register_generator("dropout", dropout_gen_);
}

GRU::GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
         bool bidirectional, Generator& gen)
    : GRU(GRUOptions{input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional}, gen) {}

void GRU::reset_parameters(Generator& gen) {
  const double bound = 1.0 / std::sqrt(double(options_.hidden_size));
  for (const Variable& p : parameters(false)) init::uniform_(p, gen, -bound, bound);
}

namespace {

struct DirectionResult {
  Variable out;  // the input's layout with H features
  Variable h;    // h_n [B, H]
};

// One layer in one direction over `in_seq` ([T, B, in] or [B, T, in]) from h0 (Note [GRU layer
// schedule]).
DirectionResult run_direction(const GRU::Layer& p, const Variable& in_seq, const Variable& h0, int64_t tdim,
                              int64_t H) {
  const DType dt = in_seq.dtype();
  const int64_t T = in_seq.size(tdim), B = in_seq.size(1 - tdim), in = in_seq.size(2);
  const Variable w_ih = cast(p.weight_ih, dt), w_hh = cast(p.weight_hh, dt);
  const Variable b_ih = p.bias_ih.defined() ? cast(p.bias_ih, dt) : Variable();
  const Variable b_hh = p.bias_hh.defined() ? cast(p.bias_hh, dt) : Variable();
  // x W_ih^T + b_ih for every step: (T*B, 3H) = (T*B, in) (3H, in)^T, back to the input layout.
  Shape proj_shape = in_seq.shape();
  proj_shape[2] = 3 * H;
  const Variable proj = reshape(linear(reshape(in_seq, {T * B, in}), w_ih, b_ih), proj_shape);
  const std::vector<Variable> steps = split(proj, 1, tdim);
  Variable h = h0;
  std::vector<Variable> outs;
  outs.reserve(size_t(T));
  for (int64_t t = 0; t < T; ++t) {
    // gh (B, 3H) = h W_hh^T + b_hh; the cell adds the step's projection chunk by chunk.
    h = gru_cell(squeeze(steps[size_t(t)], tdim), linear(h, w_hh, b_hh), h);
    outs.push_back(h);
  }
  return {stack(outs, tdim), h};
}

}  // namespace

GRUOutput GRU::forward(const Variable& x, const std::optional<Variable>& h0) {
  const GRUOptions& o = options_;
  MT_CHECK(x.defined() && x.dim() == 3 && x.size(2) == o.input_size, str(), ": expected input ",
           o.batch_first ? "[B, T, " : "[T, B, ", o.input_size, "], got ",
           x.defined() ? x.data().meta() : "an undefined Variable");
  const int64_t tdim = o.batch_first ? 1 : 0;
  const int64_t T = x.size(tdim), B = x.size(1 - tdim), H = o.hidden_size, L = o.num_layers;
  const int64_t D = o.bidirectional ? 2 : 1, N = L * D;
  MT_CHECK(T > 0 && B > 0, str(), ": the input ", x.data().meta(), " has no steps or no batch");
  const DType dt = x.dtype();

  // Initial state per layer and direction: [B, H] pieces of h0 [L * D, B, H], or zeros.
  std::vector<Variable> hs(static_cast<size_t>(N));
  if (h0) {
    MT_CHECK(h0->defined() && h0->shape() == Shape({N, B, H}), str(), ": the initial state must be [", N, ", ", B, ", ",
             H, "] (", D == 2 ? "num_layers * 2" : "num_layers", ", batch, hidden), got ",
             h0->defined() ? h0->data().meta() : "an undefined Variable");
    hs = recurrent::state_pieces(*h0, dt);
  } else {
    std::fill(hs.begin(), hs.end(), Variable(zeros({B, H}, dt, x.device())));
  }

  // Note [GRU layer schedule]
  Variable layer_in = x;
  std::vector<Variable> h_n;  // in torch's order: layer by layer, forward before reverse
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Variable> outs;
    for (int64_t d = 0; d < D; ++d) {
      const size_t k = size_t(l * D + d);
      const Variable in = d == 0 ? layer_in : recurrent::reverse_time(layer_in, tdim);
      DirectionResult r = run_direction(layers_[k], in, hs[k], tdim, H);
      h_n.push_back(r.h);
      outs.push_back(d == 0 ? r.out : recurrent::reverse_time(r.out, tdim));
    }
    layer_in = D == 2 ? concat(outs, 2) : outs[0];  // [.., .., D * H]: forward | reverse
    if (l + 1 < L) layer_in = dropout(layer_in, o.dropout, is_training(), dropout_gen_);
  }
  return {layer_in, stack(h_n, 0)};
}

std::string GRU::extra_repr() const {
  const GRUOptions& o = options_;
  std::string s = detail::cat(o.input_size, ", ", o.hidden_size);
  if (o.num_layers != 1) s += detail::cat(", num_layers=", o.num_layers);
  if (o.batch_first) s += ", batch_first=true";
  if (!o.bias) s += ", bias=false";
  if (o.dropout != 0.0) s += detail::cat(", dropout=", o.dropout);
  if (o.bidirectional) s += ", bidirectional=true";
  return s;
}

}  // namespace mixtape::nn
