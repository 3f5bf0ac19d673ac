// Differentiable reductions over chosen dims (empty dims = all).
#pragma once

#include <vector>

#include "autograd/variable.h"
#include "tensor/core/op_kinds.h"

namespace mixtape {

Variable reduce(ReduceOp op, const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

inline Variable sum(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::sum, x, dims, keepdim);
}
inline Variable mean(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::mean, x, dims, keepdim);
}
// Gradient goes to the first maximum of each slice.
inline Variable max(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::max, x, dims, keepdim);
}
// Gradient is shared evenly among tied maxima.
inline Variable amax(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::amax, x, dims, keepdim);
}

// Gradient goes to the first minimum of each slice, as max sends it to the first maximum
// (torch.min(x, dim) does the same; torch.min(x) over all elements splits it among ties).
inline Variable min(const Variable& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::min, x, dims, keepdim);
}

// Variance and standard deviation as torch.var / torch.std (correction 1: unbiased); the
// tensor ops and Note [Variance] in tensor/cpu/reduce.h.
Variable var(const Variable& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);
Variable std(const Variable& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);

}  // namespace mixtape
