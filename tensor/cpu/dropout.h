// The CPU kernel of dropout. x may have any strides; out is allocated by the front-end
// (tensor/ops/dropout.cpp), which has already validated p and the dtype.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// out = x * mask / (1 - p) with the mask of Note [Dropout mask] (tensor/ops/dropout.h).
void dropout(const Strided& x, const Strided& out, double p, uint64_t seed, uint64_t offset);

}  // namespace mixtape::cpu
