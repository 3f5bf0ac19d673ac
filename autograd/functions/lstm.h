// Differentiable fused LSTM cell (tensor-level version and formulas: tensor/ops/lstm.h).
//
//   auto [c, h] = lstm_cell(gates, c_prev);   // gates [B, 4H] (i | f | g | o), c_prev [B, H]
//
// A two-output node: the tape gives dc and dh one common scale (zeros for an output nobody
// used), and the backward is linear in them, so the scale passes through.
#pragma once

#include "autograd/variable.h"
#include "tensor/ops/lstm.h"

namespace mixtape {

LstmCellResult<Variable> lstm_cell(const Variable& gates, const Variable& c_prev);

}  // namespace mixtape
