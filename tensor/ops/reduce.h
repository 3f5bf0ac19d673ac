// Reductions over chosen dims. `dims` empty means every dim. Accumulation is in f64 on the CPU
// (at least fp32, as docs/design.md requires for large reductions); the result is rounded once.
#pragma once

#include <optional>
#include <vector>

#include "tensor/core/op_kinds.h"
#include "tensor/tensor.h"

namespace mixtape {

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// dx for a reduction of an input of shape x_shape; y and dy have the reduced shape (keepdim or
// not). max (min) sends dy to the first maximum (minimum) of each slice; amax splits it evenly
// among ties; mean divides by the slice size. x and y are read only by max, amax and min (else
// may be undefined).
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

inline Tensor min(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::min, x, dims, keepdim);
}

// The index (i64) of the first maximum / minimum along `dim`, or, without a dim, in the
// row-major order of the whole tensor (then keepdim gives every dim size 1), as torch.argmax /
// torch.argmin: ties give the first occurrence; a NaN counts as the extreme (the first NaN's
// index). An empty slice throws. Not differentiable.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// Variance and standard deviation over `dims` (empty: all), as torch.var / torch.std with
// `correction` (1: unbiased = true, Bessel's correction; 0: unbiased = false). Computed in f64 and
// rounded once (Note [Variance] in tensor/cpu/reduce.h). Call std qualified, mixtape::std(x), as
// with libtorch's torch::std: an unqualified std(...) also finds the namespace std.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);
// dx of var (take_sqrt false) or std of an input x; y (the forward result, read by std only) and
// dy have the reduced shape (keepdim or not).
Tensor var_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const std::vector<int64_t>& dims,
                    double correction, bool take_sqrt);

// Sum a broadcast gradient back to `shape` (the reverse of broadcasting to g's shape).
Tensor sum_to(const Tensor& g, const Shape& shape);

// max |x| over all elements as a double (0 for an empty tensor; NaN if any element is NaN).
double max_abs(const Tensor& x);

// Sorted, de-duplicated, wrapped dims; empty input means all dims.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
// The shape of a reduction with keepdim = true.
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims);

}  // namespace mixtape
