// Differentiable shape ops and casts (tensor-level versions: tensor/ops/shape.h, Tensor::to).
//
// Gradient scales (Zhao et al., Algorithm 1; autograd/scaling.h):
//   concat  the pieces of dY share its scale (line 17: "duplicate the gradient scale").
//   split   a multi-output node: the tape brings the pieces' gradients to one common scale
//           (lines 18-22) and zero-fills pieces nobody used; backward concatenates them.
//   stack   pass-through (dX_i = dY selected at i).
//   cast    16-bit -> f32/f64 (the cast before softmax/loss) asks the tape's ScalingRule for a
//           local factor beta (cast_beta) and passes on <beta alpha, round(beta dY)>; every
//           other cast passes the scale through. The gradient is cast back to x's dtype (RNE).
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"

namespace mixtape {

Variable concat(const std::vector<Variable>& xs, int64_t dim = 0);
std::vector<Variable> split(const Variable& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Variable> split(const Variable& x, int64_t chunk_size, int64_t dim = 0);
Variable stack(const std::vector<Variable>& xs, int64_t dim = 0);

// Returns x itself (no node) when x already has `dtype`. Floating dtypes only.
Variable cast(const Variable& x, DType dtype);

}  // namespace mixtape
