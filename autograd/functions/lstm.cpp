#include "autograd/functions/lstm.h"

#include <optional>

#include "autograd/fp8.h"
#include "autograd/scaling.h"
#include "autograd/tape.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/linalg.h"
#include "tensor/ops/quantize.h"
#include "tensor/ops/shape.h"
#include "tensor/ops/lstm.h"

namespace mixtape {

LstmCellResult<Variable> lstm_cell(const Variable& gates, const Variable& c_prev) {
  MT_CHECK(gates.defined() && c_prev.defined(), "lstm_cell: got an undefined Variable");
  LstmCellResult<Tensor> out = mixtape::lstm_cell(gates.data(), c_prev.data());
  // Saves the inputs only; backward recomputes the activations (Note [LSTM cell backward]).
  Tensor sg = gates.data(), sc = c_prev.data();
  std::vector<Variable> vs = record_multi(OpId::lstm_cell, {gates, c_prev}, {out.c, out.h},
                                          [sg, sc](const std::vector<Tensor>& dys, const std::vector<bool>&) {
    LstmCellGrads g = lstm_cell_backward(sg, sc, dys[0], dys[1]);
    return std::vector<Tensor>{g.d_gates, g.d_c_prev};
  });
  return {vs[0], vs[1]};
}

Variable gru_cell(const Variable& gx, const Variable& gh, const Variable& h_prev) {
  MT_CHECK(gx.defined() && gh.defined() && h_prev.defined(), "gru_cell: got an undefined Variable");
  Tensor h = mixtape::gru_cell(gx.data(), gh.data(), h_prev.data());
  // Saves the inputs only; backward recomputes r, z and n (Note [GRU cell backward]).
  Tensor sx = gx.data(), sh = gh.data(), sp = h_prev.data();
  return record(OpId::gru_cell, {gx, gh, h_prev}, h,
                [sx, sh, sp](const std::vector<Tensor>& dys, const std::vector<bool>& needs) {
    GruCellGrads g = gru_cell_backward(sx, sh, sp, dys[0]);
    return std::vector<Tensor>{needs[0] ? g.d_gx : Tensor(), needs[1] ? g.d_gh : Tensor(),
                               needs[2] ? g.d_h_prev : Tensor()};
  });
}

namespace {

struct LayerDims {
  int64_t T, B, H;
};

// The checks of lstm_layer and lstm_layer_fp8; the sequence's steps, batch and hidden size.
LayerDims check_layer(const Variable& proj, const Variable& w_hh, const Variable& b_hh, const Variable& h0,
                      const Variable& c0, int64_t time_dim) {
  MT_CHECK(proj.defined() && w_hh.defined() && h0.defined() && c0.defined(), "lstm_layer: got an undefined Variable");
  MT_CHECK(time_dim == 0 || time_dim == 1, "lstm_layer: time_dim must be 0 or 1, got ", time_dim);
  MT_CHECK(proj.dim() == 3 && w_hh.dim() == 2 && w_hh.size(0) == proj.size(2) && w_hh.size(0) == 4 * w_hh.size(1),
           "lstm_layer: expected proj [., ., 4H] and w_hh [4H, H], got ", proj.data().meta(), " and ",
           w_hh.data().meta());
  const int64_t T = proj.size(time_dim), B = proj.size(1 - time_dim), H = w_hh.size(1);
  for (const Variable* s : {&h0, &c0})
    MT_CHECK(s->shape() == Shape({B, H}), "lstm_layer: the initial states must be [", B, ", ", H, "], got ",
             s->data().meta());
  MT_CHECK(!b_hh.defined() || b_hh.shape() == Shape({4 * H}), "lstm_layer: b_hh must be [", 4 * H, "], got ",
           b_hh.data().meta());
  MT_CHECK(T > 0, "lstm_layer: the sequence ", proj.data().meta(), " has no steps");
  return {T, B, H};
}

// Steps [T, B, X] in proj's layout: as they are for time_dim 0, [B, T, X] (contiguous) for 1.
Tensor in_proj_layout(const Tensor& steps, int64_t time_dim) {
  return time_dim == 0 ? steps : steps.transpose(0, 1).contiguous();
}

void refuse_rule_in_backward() {
  MT_CHECK(!scaling_rule_active(),
           "lstm_layer: recorded without a gradient-scaling rule but run backward with one; set the rule on the "
           "tape before the forward pass (nn::LSTM then records the unrolled graph)");
}

}  // namespace

// Note [LSTM layer node]
// The unrolled graph (nn/lstm.h, Note [LSTM layer schedule]) records T recurrent linear nodes,
// T cells and a split; its backward forms T weight gradients dW_t = dG_t^T h_{t-1} (each a GEMM
// with a reduction of only B) and sums them through the branch rule, T - 1 additions of a
// [4H, H] tensor, rounded to the compute dtype after each one in 16 bits. This node runs the
// same forward, op for op (so the forward values are identical), and backpropagates through
// time itself:
//
//   for t = T-1 .. 0:  dh_t  = dout_t + dh              (the two uses of h_t: output, next step)
//                      dG_t, dc = the cell backward of step t, from its saved activations
//                      dh    = dG_t W_hh                 (B, H) = (B, 4H) (4H, H)
//   dW_hh = dG^T Hprev:  (4H, H) = (T*B, 4H)^T (T*B, H)  one GEMM, reduction T*B, rounded once
//   db_hh = the sum of dG's T*B rows;  dproj = dG;  dh0 = dh;  dc0 = dc
//
// The cells save their activations (lstm_cell_saving: 5H compute-type values per row, where the
// unrolled graph keeps the 4H gates and recomputes them), which gives the same bits with five
// transcendentals less per element (Note [LSTM cell backward]). Both recurrences run as
// lstm_sequence and lstm_sequence_backward (tensor/ops/lstm.h): on the CPU one kernel each, the
// batch rows split over the threads for all T steps (Note [LSTM layer recurrence]), elsewhere the
// step ops; the same values either way.
// Every activation gradient is computed exactly as the unrolled graph computes it; only the
// weight and bias gradients are summed in a different order (one fp32 accumulation instead of T
// separately rounded pieces), which in 16 bits is also the more accurate sum. The scale passes
// through, as it does through every unrolled op when no ScalingRule is active. Under gradient
// scaling (Zhao et al.) each step's recurrent GEMM chooses its own beta, so dG_t would carry T
// different scales: nn::LSTM records the unrolled graph then, and this node refuses a rule.
LstmLayerResult lstm_layer(const Variable& proj, const Variable& w_hh, const Variable& b_hh, const Variable& h0,
                           const Variable& c0, int64_t time_dim) {
  const LayerDims d = check_layer(proj, w_hh, b_hh, h0, c0, time_dim);
  const int64_t T = d.T, B = d.B, H = d.H;
  const Tensor w = w_hh.data();
  const bool recording = should_record({&proj, &w_hh, &b_hh, &h0, &c0});  // else no activations are kept
  LstmSequence seq =
      lstm_sequence(proj.data(), time_dim, w, b_hh.defined() ? b_hh.data() : Tensor(), h0.data(), c0.data(), recording);
  // hs[t] in proj's layout: steps 1 .. T are the output, steps 0 .. T-1 the weight gradient's rows.
  const auto in_layout = [time_dim](const Tensor& steps) { return in_proj_layout(steps, time_dim); };
  Tensor out = in_layout(seq.hs.narrow(0, 1, T));
  Tensor h_n = seq.hs.select(0, T), c_n = seq.cs.select(0, T);

  std::vector<Variable> vs = record_multi(OpId::lstm_layer, {proj, w_hh, b_hh, h0, c0}, {out, h_n, c_n},
                                          [seq = std::move(seq), w, time_dim, in_layout, T, B, H](
                                              const std::vector<Tensor>& dys, const std::vector<bool>& needs) {
    refuse_rule_in_backward();
    LstmSequenceGrads g = lstm_sequence_backward(seq, w, dys[0], time_dim, dys[1], dys[2], needs[3]);
    std::vector<Tensor> dx(5);
    const Tensor& dG = g.dg;  // proj's layout
    if (needs[0]) dx[0] = dG;
    const Tensor dG_rows = dG.reshape({T * B, 4 * H});
    if (needs[1])  // (4H, H) = (T*B, 4H)^T (T*B, H), rows in proj's (t, b) or (b, t) order
      dx[1] = linear_backward_weight(dG_rows, in_layout(seq.hs.narrow(0, 0, T)).reshape({T * B, H}));
    if (needs[2]) dx[2] = linear_backward_bias(dG_rows);
    if (needs[3]) dx[3] = g.dh;
    if (needs[4]) dx[4] = g.dc;
    return dx;
  });
  return {vs[0], vs[1], vs[2]};
}

// Note [8-bit LSTM layer]
// Under 8-bit training (Note [8-bit training] in autograd/fp8.h) the recurrence runs the step ops
// of the unrolled graph, each step's recurrent GEMM an 8-bit GEMM site of its own (as the
// unrolled graph's linear node would be: delayed scaling keeps a history per step):
//
//   forward,  t = 0 .. T-1:  gates_t = proj_t + (q(h_t) q(W)^T + b),  (c, h) = lstm_cell(gates_t, c)
//   backward, t = T-1 .. 0:  (dG_t, dc) = the cell backward of step t,  dh = q(dG_t) q(W^T)
//   dW = q(dG^T) q(Hprev^T):  (4H, H) = (4H, T*B) (H, T*B)^T, one GEMM, reduction T*B
//
// q() quantizes an operand with its recipe (fprop and dgrad as the unrolled graph does, so the
// forward values and the activation gradients are the unrolled graph's, bit for bit). The weight
// gradient's operands are the whole sequence's dG and h_0 .. h_{T-1}, quantized once each at a
// site of their own (one per-tensor scale for all T steps, or the recipe's blocks along T*B),
// where the unrolled graph forms T products with a reduction of only B and sums them, rounding
// the sum to 16 bits after each one. The dgrad's weight operand is W^T, quantized once per step
// site (per-tensor recipes share W's codes).
LstmLayerResult lstm_layer_fp8(Fp8Context& fp8, const Variable& proj, const Variable& w_hh, const Variable& b_hh,
                               const Variable& h0, const Variable& c0, int64_t time_dim) {
  const LayerDims d = check_layer(proj, w_hh, b_hh, h0, c0, time_dim);
  const int64_t T = d.T, B = d.B, H = d.H;
  MT_CHECK(is_16bit(proj.dtype()) && w_hh.dtype() == proj.dtype() && h0.dtype() == proj.dtype() &&
               c0.dtype() == proj.dtype() && (!b_hh.defined() || b_hh.dtype() == proj.dtype()),
           "lstm_layer_fp8: expected proj, w_hh, b_hh, h0 and c0 in one 16-bit dtype, got ", proj.data().meta(), ", ",
           w_hh.data().meta(), ", ", h0.data().meta(), " and ", c0.data().meta());
  const Tensor w = w_hh.data(), b = b_hh.defined() ? b_hh.data() : Tensor();
  const DType dt = proj.dtype();
  std::vector<int64_t> sites(static_cast<size_t>(T));
  for (int64_t& site : sites) site = fp8.next_site();
  const int64_t wgrad_site = fp8.next_site();
  // Current scaling on the CPU: the recurrence kernel (Note [8-bit LSTM recurrence] in
  // tensor/cpu/lstm.cpp); the other recipes, and other devices, the step ops. The same values.
  const bool kernel = proj.data().device().is_cpu() && fp8.options().recipe == Fp8Recipe::current;
  LstmSequence seq;
  std::optional<Quantized> wq;
  if (kernel) {
    wq = fp8.quantize(sites[0], OpId::lstm_layer, Fp8Role::weight, "fprop", w);
    std::vector<QuantStats> st;
    const QuantSpec spec = fp8.operand_spec(Fp8Role::input);
    seq = lstm_sequence_fp8(proj.data(), time_dim, *wq, b, h0.data(), c0.data(), spec, st);
    for (int64_t t = 0; t < T; ++t)
      fp8.record(sites[size_t(t)], OpId::lstm_layer, Fp8Role::input, "fprop", spec.format, st[size_t(t)]);
  } else {
    std::vector<Tensor> hs{h0.data()}, cs{c0.data()}, acts;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t site = sites[size_t(t)];
      const Tensor lin = scaled_matmul_nt(fp8.quantize(site, OpId::lstm_layer, Fp8Role::input, "fprop", hs.back()),
                                          fp8.quantize(site, OpId::lstm_layer, Fp8Role::weight, "fprop", w), b, dt);
      LstmCellSaved step = lstm_cell_saving(add(proj.data().select(time_dim, t), lin), cs.back());
      acts.push_back(std::move(step.acts));
      cs.push_back(std::move(step.c));
      hs.push_back(std::move(step.h));
    }
    seq = {stack(hs, 0), stack(cs, 0), stack(acts, 0)};
  }
  Tensor out = in_proj_layout(seq.hs.narrow(0, 1, T), time_dim);
  Tensor h_n = seq.hs.select(0, T), c_n = seq.cs.select(0, T);
  Fp8Context* ctx = &fp8;
  std::vector<Variable> vs =
      record_multi(OpId::lstm_layer, {proj, w_hh, b_hh, h0, c0}, {out, h_n, c_n},
                   [ctx, sites = std::move(sites), wgrad_site, seq = std::move(seq), wq, w, time_dim, T, B, H](
                       const std::vector<Tensor>& dys, const std::vector<bool>& needs) {
    refuse_rule_in_backward();
    Tensor dG, gh, gc;  // dG laid out as proj
    if (wq) {
      std::vector<QuantStats> st;
      const QuantSpec spec = ctx->operand_spec(Fp8Role::grad);
      LstmSequenceGrads g = lstm_sequence_fp8_backward(seq, *wq, dys[0], time_dim, dys[1], dys[2], needs[3], spec, st);
      for (int64_t t = T - 1; t >= 0; --t)
        if (t > 0 || needs[3])
          ctx->record(sites[size_t(t)], OpId::lstm_layer, Fp8Role::grad, "dgrad", spec.format, st[size_t(t)]);
      dG = g.dg;
      gh = g.dh;
      gc = g.dc;
    } else {
      gh = dys[1];
      gc = dys[2];
      std::vector<Tensor> dgs(static_cast<size_t>(T));
      for (int64_t t = T - 1; t >= 0; --t) {
        const size_t i = size_t(t);
        LstmCellGrads step = lstm_cell_backward_saved(seq.acts.select(0, t), seq.cs.select(0, t), gc,
                                                      add(dys[0].select(time_dim, t), gh));
        gc = std::move(step.d_c_prev);
        if (t > 0 || needs[3])  // dh = dG_t W: (B, H) = (B, 4H) (H, 4H)^T
          gh = scaled_matmul_nt(ctx->quantize(sites[i], OpId::lstm_layer, Fp8Role::grad, "dgrad", step.d_gates),
                                ctx->quantize(sites[i], OpId::lstm_layer, Fp8Role::weight, "dgrad", w.t()), Tensor(),
                                step.d_gates.dtype());
        dgs[i] = std::move(step.d_gates);
      }
      dG = stack(dgs, time_dim);
    }
    const Tensor dG_rows = dG.reshape({T * B, 4 * H});  // rows in proj's (t, b) or (b, t) order
    std::vector<Tensor> dx(5);
    if (needs[0]) dx[0] = dG;
    if (needs[1]) {  // (4H, H) = (4H, T*B) (H, T*B)^T
      const Tensor h_rows = in_proj_layout(seq.hs.narrow(0, 0, T), time_dim).reshape({T * B, H});
      dx[1] =
          scaled_matmul_nt(ctx->quantize(wgrad_site, OpId::lstm_layer, Fp8Role::grad, "wgrad", dG_rows.transpose(0, 1)),
                           ctx->quantize(wgrad_site, OpId::lstm_layer, Fp8Role::input, "wgrad", h_rows.transpose(0, 1)),
                           Tensor(), dG_rows.dtype());
    }
    if (needs[2]) dx[2] = linear_backward_bias(dG_rows);
    if (needs[3]) dx[3] = gh;
    if (needs[4]) dx[4] = gc;
    return dx;
      });
  return {vs[0], vs[1], vs[2]};
}

}  // namespace mixtape
