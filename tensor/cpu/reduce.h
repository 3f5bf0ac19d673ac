// Reduction CPU kernels, forward and backward side by side. `dims` are normalized (sorted,
// unique); `out`, `y` and `dy` have the keepdim shape.
#pragma once

#include <vector>

#include "tensor/core/op_kinds.h"
#include "tensor/tensor.h"

namespace mixtape::cpu {

void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, Tensor& out);
void reduce_backward(ReduceOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const std::vector<int64_t>& dims, Tensor& dx);
double max_abs(const Tensor& x);

}  // namespace mixtape::cpu
