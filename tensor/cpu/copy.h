// Copy with cast: dst = round(src) elementwise, src broadcast to dst's shape.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// Rounding::stochastic rounds element i (its row-major index in dst) with rounding_word(seed,
// offset + i) (Note [Rounding words] in tensor/core/rng.h).
void copy_cast(const Strided& src, const Strided& dst, Rounding rounding, uint64_t seed, uint64_t offset);
void fill(const Strided& out, double value);
// i64 counter += by (tensor.h increment_).
void increment(const Strided& counter, int64_t by);

}  // namespace mixtape::cpu
