// Differentiable LSTM and GRU pieces (tensor-level versions and formulas: tensor/ops/lstm.h).
//
//   auto [c, h] = lstm_cell(gates, c_prev);   // gates [B, 4H] (i | f | g | o), c_prev [B, H]
//
// A two-output node: the tape gives dc and dh one common scale (zeros for an output nobody
// used), and the backward is linear in them, so the scale passes through.
//
//   auto [out, h_n, c_n] = lstm_layer(proj, w_hh, b_hh, h0, c0, /*time_dim=*/1);
//
// The recurrence of one LSTM layer over a whole sequence as one node (Note [LSTM layer node]):
// proj [B, T, 4H] (time_dim 1) or [T, B, 4H] (time_dim 0) holds x W_ih^T + b_ih of every step;
// w_hh [4H, H], b_hh [4H] (may be undefined), h0 and c0 [B, H]. out has proj's layout with H
// features; h_n and c_n are the last step's states.
//
//   Variable h = gru_cell(gx, gh, h_prev);    // gx, gh [B, 3H] (r | z | n), h_prev [B, H]
//
// The GRU step after its two GEMMs (gx = x W_ih^T + b_ih, gh = h_prev W_hh^T + b_hh, recorded as
// linear nodes with their own scale rules); the backward is linear in dh, so the scale passes
// through.
#pragma once

#include "autograd/variable.h"
#include "tensor/ops/lstm.h"

namespace mixtape {

LstmCellResult<Variable> lstm_cell(const Variable& gates, const Variable& c_prev);

struct LstmLayerResult {
  Variable out;  // [B, T, H] or [T, B, H]
  Variable h;    // h_n [B, H]
  Variable c;    // c_n [B, H]
};

LstmLayerResult lstm_layer(const Variable& proj, const Variable& w_hh, const Variable& b_hh, const Variable& h0,
                           const Variable& c0, int64_t time_dim);

class Fp8Context;
// The same node under 8-bit training (Note [8-bit LSTM layer] in lstm.cpp): each step's recurrent
// GEMM reads h_{t-1} and W_hh in 8 bits, as the unrolled graph's linear nodes would, and the
// weight gradient of all T steps is one 8-bit GEMM. Refuses a gradient-scaling rule.
LstmLayerResult lstm_layer_fp8(Fp8Context& fp8, const Variable& proj, const Variable& w_hh, const Variable& b_hh,
                               const Variable& h0, const Variable& c0, int64_t time_dim);

Variable gru_cell(const Variable& gx, const Variable& gh, const Variable& h_prev);

}  // namespace mixtape
