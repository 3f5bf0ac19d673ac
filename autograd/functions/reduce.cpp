#include "autograd/functions/reduce.h"

#include "autograd/tape.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

Variable reduce(ReduceOp op, const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = mixtape::reduce(op, x.data(), dims, keepdim);
  const bool needs_values = op == ReduceOp::max || op == ReduceOp::amax;
  Tensor sx = needs_values ? x.data() : Tensor();
  Tensor sy = needs_values ? y : Tensor();
  const Shape xshape = x.shape();
  const OpId id = op == ReduceOp::sum    ? OpId::sum
                  : op == ReduceOp::mean ? OpId::mean
                  : op == ReduceOp::max  ? OpId::max
                                         : OpId::amax;
  return record(id, {x}, y, [op, dims, sx, sy, xshape](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{reduce_backward(op, xshape, sx, sy, dy[0], dims)};
  });
}

}  // namespace mixtape
