// Copy with cast: dst = round(src) elementwise, src broadcast to dst's shape.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// Rounding::stochastic draws one Philox word per element from counter (offset + i), i the
// row-major index in dst.
void copy_cast(const Strided& src, const Strided& dst, Rounding rounding, uint64_t seed, uint64_t offset);
void fill(const Strided& out, double value);
// i64 counter += by (tensor.h increment_).
void increment(const Strided& counter, int64_t by);

}  // namespace mixtape::cpu
