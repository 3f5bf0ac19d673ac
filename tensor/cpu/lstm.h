// LSTM and GRU cell CPU kernels, forward and backward side by side. Inputs have any strides;
// outputs are freshly allocated (contiguous) by the front-end. Shapes: LSTM gates [B, 4H], GRU
// gx and gh [B, 3H], the rest [B, H].
#pragma once

#include <vector>

#include "tensor/core/strided.h"
#include "tensor/cpu/quantize.h"

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

// The recurrence of one LSTM layer over a whole sequence (Note [LSTM layer recurrence]), f32,
// f16 or bf16: for t = 0 .. T-1, gates = proj_t + (h_t W^T + b), then the cell.
//   proj [T, B, 4H] (time_dim 0) or [B, T, 4H] (time_dim 1), any strides; w [4H, H]; b [4H] or
//   undefined; hs, cs contiguous [T + 1, B, H], h_0 and c_0 in place at index 0, h_t and c_t
//   written at t; acts contiguous [T, B, 5H] of f32 (lstm_cell's), or undefined.
void lstm_layer_forward(const Strided& proj, int64_t time_dim, const Strided& w, const Strided& b, const Strided& hs,
                        const Strided& cs, const Strided& acts);
// Its backward through time: for t = T-1 .. 0, (dG_t, dc) = the saved cell backward of step t
// from dout_t + dh, then dh = dG_t W (at t = 0 only when need_dh0).
//   acts, cs as the forward wrote them; dout laid out as proj with H columns; dh, dc contiguous
//   [B, H]: the gradients of h_T and c_T in, of h_0 and c_0 out; dg out, laid out as proj with
//   contiguous rows.
void lstm_layer_backward(const Strided& acts, const Strided& cs, const Strided& w, const Strided& dout,
                         int64_t time_dim, const Strided& dh, const Strided& dc, const Strided& dg, bool need_dh0);

// The same recurrence with each step's recurrent GEMM in 8 bits under one scale per tensor
// (current scaling; Note [8-bit LSTM recurrence]): h_t, then dG_t, quantized with q (per tensor,
// no given scale) and multiplied with the weight's codes w_codes [4H, H] (its scale_inv w_inv) in
// fp32; each step's stats in stats[t] and its 1 / s in inv[t] (vectors of T). Backward quantizes
// dG_t only where dh is formed (t > 0, or need_dh0); the other entries stay zero.
struct Fp8StepStats {
  RowCounts counts;
  float scale_inv = 0.0f;
};
void lstm_layer_forward_fp8(const Strided& proj, int64_t time_dim, const Strided& w_codes, float w_inv,
                            const Strided& b, const BlockQuant& q, const Strided& hs, const Strided& cs,
                            const Strided& acts, std::vector<Fp8StepStats>& stats);
void lstm_layer_backward_fp8(const Strided& acts, const Strided& cs, const Strided& w_codes, float w_inv,
                             const Strided& dout, int64_t time_dim, const Strided& dh, const Strided& dc,
                             const Strided& dg, bool need_dh0, const BlockQuant& q, std::vector<Fp8StepStats>& stats);

// GRU (formulas in tensor/ops/lstm.h; backward: Note [GRU cell backward]).
void gru_cell(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& h);
void gru_cell_backward(const Strided& gx, const Strided& gh, const Strided& h_prev, const Strided& dh,
                       const Strided& d_gx, const Strided& d_gh, const Strided& d_h_prev);

}  // namespace mixtape::cpu
