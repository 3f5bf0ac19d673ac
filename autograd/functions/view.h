// Differentiable views and layout changes. Forward results share storage with the input
// (except contiguous() of a non-contiguous input); gradients are reshaped, permuted, scattered
// or summed back.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace mixtape {

Variable reshape(const Variable& x, Shape shape);  // one -1 allowed
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable permute(const Variable& x, const std::vector<int64_t>& dims);
Variable slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Variable expand(const Variable& x, Shape shape);
Variable contiguous(const Variable& x);

// Conveniences built on the above.
Variable narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
Variable select(const Variable& x, int64_t dim, int64_t index);  // drops dim
Variable flatten(const Variable& x, int64_t start_dim = 0, int64_t end_dim = -1);
Variable unsqueeze(const Variable& x, int64_t dim);
Variable squeeze(const Variable& x, int64_t dim);

}  // namespace mixtape
