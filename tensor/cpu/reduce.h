// Reduction CPU kernels, forward and backward side by side. `dims` are normalized (sorted,
// unique); `out`, `y` and `dy` have the keepdim shape.
#pragma once

#include <vector>

#include "tensor/core/op_kinds.h"
#include "tensor/core/strided.h"

namespace mixtape::cpu {

void reduce(ReduceOp op, const Strided& x, const std::vector<int64_t>& dims, const Strided& out);
void reduce_backward(ReduceOp op, const Strided& x, const Strided& y, const Strided& dy,
                     const std::vector<int64_t>& dims, const Strided& dx);
double max_abs(const Strided& x);

// argmax (largest) or argmin of each slice: out (i64, keepdim shape) is the row-major position
// within the reduced dims of the first extreme element; a NaN is the extreme of its slice (the
// first NaN wins), as in PyTorch. Slices are not empty (the front-end checks).
void arg_reduce(bool largest, const Strided& x, const std::vector<int64_t>& dims, const Strided& out);

// Note [Variance]
// var = sum (x - mean)^2 / max(0, n - correction), std = sqrt(var), as torch.var / torch.std
// (correction 1 is unbiased = true, 0 the population variance; n <= correction gives 0 / 0 = NaN
// or inf, as in PyTorch). Two passes over each slice in f64 (the mean, then the squared
// deviations), rounded once: no cancellation of E[x^2] - E[x]^2. Backward, with the mean
// recomputed in f64:
//   var: dx = dy * (x - mean) * 2 / max(0, n - correction)
//   std: dx = dy * (x - mean) / (max(0, n - correction) * std), and 0 where std == 0 (PyTorch's
//        masking: a constant slice has no direction to move in).
// Both are dy times a factor that does not depend on dy, so a power-of-two gradient scale passes
// through exactly.
void var(const Strided& x, const std::vector<int64_t>& dims, double correction, bool take_sqrt, const Strided& out);
void var_backward(const Strided& x, const Strided& y, const Strided& dy, const std::vector<int64_t>& dims,
                  double correction, bool take_sqrt, const Strided& dx);

}  // namespace mixtape::cpu
