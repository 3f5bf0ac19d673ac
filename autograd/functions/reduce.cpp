#include "autograd/functions/reduce.h"

#include "autograd/tape.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

Variable reduce(ReduceOp op, const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = mixtape::reduce(op, x.data(), dims, keepdim);
  // Scale rule: pass-through (every backward here is linear in dy).
  const bool needs_values = op == ReduceOp::max || op == ReduceOp::amax || op == ReduceOp::min;
  Tensor sx = needs_values ? x.data() : Tensor();
  Tensor sy = needs_values ? y : Tensor();
  const Shape xshape = x.shape();
  const OpId id = op == ReduceOp::sum    ? OpId::sum
                  : op == ReduceOp::mean ? OpId::mean
                  : op == ReduceOp::max  ? OpId::max
                  : op == ReduceOp::min  ? OpId::min
                                         : OpId::amax;
  return record(id, {x}, y, [op, dims, sx, sy, xshape](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{reduce_backward(op, xshape, sx, sy, dy[0], dims)};
  });
}

namespace {
Variable variance(bool take_sqrt, const Variable& x, const std::vector<int64_t>& dims, double correction,
                  bool keepdim) {
  Tensor y =
      take_sqrt ? mixtape::std(x.data(), dims, correction, keepdim) : mixtape::var(x.data(), dims, correction, keepdim);
  // Saves x (for the mean and the deviations) and, for std, the output it divides by.
  const Tensor sx = x.data();
  const Tensor sy = take_sqrt ? y : Tensor();
  // Scale rule: pass-through (dx = dy * k, k independent of dy; Note [Variance]).
  return record(take_sqrt ? OpId::std : OpId::var, {x}, y,
                [take_sqrt, dims, correction, sx, sy](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{var_backward(sx, sy, dy[0], dims, correction, take_sqrt)};
  });
}
}  // namespace

Variable var(const Variable& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return variance(false, x, dims, correction, keepdim);
}
Variable std(const Variable& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return variance(true, x, dims, correction, keepdim);
}

}  // namespace mixtape
