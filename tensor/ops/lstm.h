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
