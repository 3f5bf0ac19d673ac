// The fused pointwise part of an LSTM step (no autograd).
//
//   gates [B, 4H] = x W_ih^T + b_ih + h_prev W_hh^T + b_hh   (the GEMMs run outside this op)
//   chunks of H along dim 1, in PyTorch's order:  i | f | g | o
//   i = sigmoid, f = sigmoid, g = tanh, o = sigmoid
//   c = f * c_prev + i * g          [B, H]
//   h = o * tanh(c)                 [B, H]
//
// One kernel computes c and h in fp32 (f64 for f64 tensors); h uses the unrounded c, and each
// output is rounded once.
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

}  // namespace mixtape
