// LSTM and GRU cell CPU kernels, forward and backward side by side. Inputs have any strides;
// outputs are freshly allocated (contiguous) by the front-end. Shapes: LSTM gates [B, 4H], GRU
// gx and gh [B, 3H], the rest [B, H].
#pragma once

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// acts: undefined, or a contiguous [B, 5H] tensor of the compute type (f32; f64 for f64) that
// receives i | f | g | o | tanh(c) unrounded, for lstm_cell_backward_saved.
void lstm_cell(const Strided& gates, const Strided& c_prev, const Strided& c, const Strided& h, const Strided& acts);
void lstm_cell_backward(const Strided& gates, const Strided& c_prev, const Strided& dc, const Strided& dh,
                        const Strided& d_gates, const Strided& d_c_prev);
// The same gradients from the saved activations instead of recomputing them (Note [LSTM cell
// backward]): the same expressions on the same values, so the same bits.
void lstm_cell_backward_saved(const Strided& acts, const Strided& c_prev, const Strided& dc, const Strided& dh,
                              const Strided& d_gates, const Strided& d_c_prev);

// GRU (formulas in tensor/ops/lstm.h; backward: Note [GRU cell backward]).
void gru_cell(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& h);
void gru_cell_backward(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& dh,
                       const Strided& d_gx, const Strided& d_gh, const Strided& d_h_prev);

}  // namespace mixtape::cpu
