// Differentiable 2-D pooling and upsample (shapes and semantics in tensor/ops/pool.h). The
// gradient scale passes through.
#pragma once

#include "autograd/variable.h"
#include "tensor/ops/pool.h"

namespace mixtape {

// The gradient goes to the first maximum of each window.
Variable max_pool2d(const Variable& x, Size2 kernel);
Variable max_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding = 0, Size2 dilation = 1,
                    bool ceil_mode = false);
// The gradient is spread evenly over each window (divided as the forward divides: padded
// positions count when count_include_pad).
Variable avg_pool2d(const Variable& x, Size2 kernel);
Variable avg_pool2d(const Variable& x, Size2 kernel, Size2 stride, Size2 padding = 0, bool ceil_mode = false,
                    bool count_include_pad = true);

// The gradient of each output is spread evenly over its adaptive window.
Variable adaptive_avg_pool2d(const Variable& x, OptionalSize2 output_size);

// The gradient of each output goes to the inputs it read, times their weights (nearest: weight 1).
Variable upsample(const Variable& x, const UpsampleOptions& options);

}  // namespace mixtape
