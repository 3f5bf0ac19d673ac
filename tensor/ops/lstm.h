// The fused pointwise parts of an LSTM step and of a GRU step (no autograd).
//
// LSTM:
//   gates [B, 4H] = x W_ih^T + b_ih + h_prev W_hh^T + b_hh   (the GEMMs run outside this op)
//   chunks of H along dim 1, in PyTorch's order:  i | f | g | o
//   i = sigmoid, f = sigmoid, g = tanh, o = sigmoid
//   c = f * c_prev + i * g          [B, H]
//   h = o * tanh(c)                 [B, H]
//
// One kernel computes c and h in fp32 (f64 for f64 tensors); h uses the unrounded c, and each
// output is rounded once.
//
// GRU (Cho et al. 2014, with PyTorch's placement of the reset gate):
//   gx [B, 3H] = x W_ih^T + b_ih,  gh [B, 3H] = h_prev W_hh^T + b_hh   (the GEMMs run outside)
//   chunks of H along dim 1, in PyTorch's order:  r | z | n
//   r = sigmoid(gx_r + gh_r),  z = sigmoid(gx_z + gh_z)
//   n = tanh(gx_n + r * gh_n)       r scales the whole hidden-side term, b_hn included
//   h = (1 - z) * n + z * h_prev    computed as n + z * (h_prev - n), as PyTorch's kernels do
// The hidden-side pre-activations stay a separate input because r multiplies gh_n alone. One
// kernel computes h in fp32 (f64 for f64 tensors) and rounds it once.
#pragma once

#include <vector>

#include "tensor/ops/quantize.h"
#include "tensor/tensor.h"

namespace mixtape {

template <class T>
struct LstmCellResult {
  T c;  // new cell state [B, H]
  T h;  // new hidden state [B, H]
};

struct LstmCellGrads {
  Tensor d_gates;   // [B, 4H]
  Tensor d_c_prev;  // [B, H]
};

LstmCellResult<Tensor> lstm_cell(const Tensor& gates, const Tensor& c_prev);

// The forward that also returns the activations for lstm_cell_backward_saved: acts [B, 5H],
// i | f | g | o | tanh(c), unrounded, in the compute type (f32; f64 for f64 tensors).
struct LstmCellSaved {
  Tensor c, h, acts;
};
LstmCellSaved lstm_cell_saving(const Tensor& gates, const Tensor& c_prev);

// Gradients of lstm_cell from dc and dh (both [B, H]; either may be all zeros). Recomputes the
// gate activations and c from the forward inputs (Note [LSTM cell backward] in cpu/lstm.cpp).
// Linear in (dc, dh), so a power-of-two gradient scale shared by both passes through exactly.
LstmCellGrads lstm_cell_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& dc, const Tensor& dh);
// The same gradients, bit for bit, from the activations lstm_cell_saving returned.
LstmCellGrads lstm_cell_backward_saved(const Tensor& acts, const Tensor& c_prev, const Tensor& dc, const Tensor& dh);

// The recurrence of one LSTM layer over a whole sequence, for the LSTM layer node (Note [LSTM
// layer node] in autograd/functions/lstm.cpp): for t = 0 .. T-1
//   gates_t = proj_t + (h_t W^T + b),  (c_{t+1}, h_{t+1}) = lstm_cell(gates_t, c_t)
// with the step ops' values and roundings (add, linear, lstm_cell_saving). proj is [T, B, 4H]
// (time_dim 0) or [B, T, 4H] (time_dim 1), w [4H, H], b [4H] or undefined, h0 and c0 [B, H].
// On the CPU (f32, f16, bf16) one kernel runs all T steps (Note [LSTM layer recurrence] in
// cpu/lstm.cpp); elsewhere, and in f64, the step ops do.
struct LstmSequence {
  Tensor hs, cs;  // [T + 1, B, H]: h_0 .. h_T and c_0 .. c_T
  Tensor acts;    // [T, B, 5H], lstm_cell_saving's activations of each step (when saved)
};
LstmSequence lstm_sequence(const Tensor& proj, int64_t time_dim, const Tensor& w, const Tensor& b, const Tensor& h0,
                           const Tensor& c0, bool save);

// Its backward through time from the saved sequence (save = true): for t = T-1 .. 0
//   (dG_t, dc) = lstm_cell_backward_saved(acts_t, c_t, dc, dout_t + dh),  dh = dG_t W
// dout is laid out as proj with H columns; dh and dc are the gradients of h_T and c_T.
struct LstmSequenceGrads {
  Tensor dg;      // each step's gates gradient, laid out as proj (contiguous)
  Tensor dh, dc;  // of h_0 (only when need_dh0) and of c_0
};
LstmSequenceGrads lstm_sequence_backward(const LstmSequence& s, const Tensor& w, const Tensor& dout, int64_t time_dim,
                                         const Tensor& dh, const Tensor& dc, bool need_dh0);

// lstm_sequence and its backward with each step's recurrent GEMM in 8 bits under current scaling
// (Note [8-bit LSTM recurrence] in cpu/lstm.cpp), on the CPU: h_t (forward) and dG_t (backward,
// where dh is formed) quantized per tensor with `spec` (a per-tensor layout, no given scale) and
// multiplied with w's codes (w quantized per tensor: [4H, H]); the values of the step ops
// (quantize, scaled_matmul_nt, add, the cells). stats[t]: what quantizing step t's operand did
// (zero where backward formed no dh). 16-bit proj only.
LstmSequence lstm_sequence_fp8(const Tensor& proj, int64_t time_dim, const Quantized& w, const Tensor& b,
                               const Tensor& h0, const Tensor& c0, const QuantSpec& spec,
                               std::vector<QuantStats>& stats);
LstmSequenceGrads lstm_sequence_fp8_backward(const LstmSequence& s, const Quantized& w, const Tensor& dout,
                                             int64_t time_dim, const Tensor& dh, const Tensor& dc, bool need_dh0,
                                             const QuantSpec& spec, std::vector<QuantStats>& stats);

// The GRU step (formulas above): gx and gh [B, 3H], h_prev [B, H] -> h [B, H].
Tensor gru_cell(const Tensor& gx, const Tensor& gh, const Tensor& h_prev);

struct GruCellGrads {
  Tensor d_gx;      // [B, 3H]
  Tensor d_gh;      // [B, 3H]; its r and z chunks equal d_gx's
  Tensor d_h_prev;  // [B, H], the direct path through z only (not through gh)
};

// Gradients of gru_cell from dh [B, H]. Recomputes r, z and n from the forward inputs (Note [GRU
// cell backward] in cpu/lstm.cpp). Linear in dh, so a power-of-two gradient scale passes through
// exactly.
GruCellGrads gru_cell_backward(const Tensor& gx, const Tensor& gh, const Tensor& h_prev, const Tensor& dh);

}  // namespace mixtape
