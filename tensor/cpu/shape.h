// Shape CPU kernels. Inputs have any strides; the output is freshly allocated by the front-end.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// out = the xs laid end to end along `dim` (normalized); shapes and dtypes already validated.
void concat(const std::vector<Strided>& xs, int64_t dim, const Strided& out);

}  // namespace mixtape::cpu
