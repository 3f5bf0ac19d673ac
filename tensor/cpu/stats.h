// Summary-statistics CPU kernels. Each writes its raw sums into a small contiguous f64 tensor;
// the front-end (tensor/ops/stats.cpp) turns them into moments.
#pragma once

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// out (f64, [5]) = {finite count, nonfinite count, sum x, sum x^2, max |x|}.
void tensor_moments(const Strided& x, const Strided& out);
// out (f64, [5]) = {finite nonzero count, nonfinite count, sum ln|x|, sum ln^2|x|, max |x|}.
void log_abs_moments(const Strided& x, const Strided& out);

}  // namespace mixtape::cpu
