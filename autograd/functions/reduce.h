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

}  // namespace mixtape
