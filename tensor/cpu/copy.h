// Copy with cast: dst = round(src) elementwise, src broadcast to dst's shape.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape::cpu {

// Rounding::stochastic draws one Philox word per element from counter (offset + i), i the
// row-major index in dst.
void copy_cast(const Tensor& src, Tensor& dst, Rounding rounding, uint64_t seed, uint64_t offset);
void fill(Tensor& out, double value);
// i64 counter += by (tensor.h increment_).
void increment(Tensor& counter, int64_t by);

}  // namespace mixtape::cpu
