// Differentiable 2-D pooling (shapes and semantics in tensor/ops/pool.h). The gradient scale
// passes through.
#pragma once

#include "autograd/variable.h"
#include "tensor/ops/pool.h"

namespace mixtape {

// The gradient goes to the first maximum of each window.
Variable max_pool2d(const Variable& x, Size2 kernel);
Variable max_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding = 0);
// The gradient is spread evenly over each window (padded positions included in the count).
Variable avg_pool2d(const Variable& x, Size2 kernel);
Variable avg_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding = 0);

}  // namespace mixtape
