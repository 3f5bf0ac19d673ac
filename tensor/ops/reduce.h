// Reductions over chosen dims. `dims` empty means every dim. Accumulation is in f64 on the CPU
// (at least fp32, as DESIGN.md requires for large reductions); the result is rounded once.
#pragma once

#include <vector>

#include "tensor/core/op_kinds.h"
#include "tensor/tensor.h"

namespace mixtape {

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// dx for a reduction of an input of shape x_shape; y and dy have the reduced shape (keepdim or
// not). max sends dy to the first maximum of each slice; amax splits it evenly among ties;
// mean divides by the slice size. x and y are read only by max and amax (else may be undefined).
Tensor reduce_backward(ReduceOp op, const Shape& x_shape, const Tensor& x, const Tensor& y, const Tensor& dy,
                       const std::vector<int64_t>& dims);

inline Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::sum, x, dims, keepdim);
}
inline Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::mean, x, dims, keepdim);
}
inline Tensor max(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::max, x, dims, keepdim);
}
inline Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::amax, x, dims, keepdim);
}

// Sum a broadcast gradient back to `shape` (the reverse of broadcasting to g's shape).
Tensor sum_to(const Tensor& g, const Shape& shape);

// max |x| over all elements as a double (0 for an empty tensor; NaN if any element is NaN).
double max_abs(const Tensor& x);

// Sorted, de-duplicated, wrapped dims; empty input means all dims.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
// The shape of a reduction with keepdim = true.
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims);

}  // namespace mixtape
