// Shapes, strides and broadcasting.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace mixtape {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
Shape contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"

// Broadcast two shapes NumPy-style (trailing dims align; 1 stretches). Throws naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Normalize a possibly negative dim index into [0, ndim); throws naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace mixtape
