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

}  // namespace mixtape::cpu
