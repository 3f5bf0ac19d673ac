// CPU kernel of grad_telemetry (tensor/ops/grad_telemetry.h): one strided pass over x.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// Leading entries of the counts tensor, before the histogram bins.
inline constexpr int64_t kTelemetryCounts = 4;

// counts: i64[kTelemetryCounts + nbins], written whole: [nonzero, underflow, subnormal,
// overflow, hist[0..nbins)] with hist[k] for exponent hist_lo + k (clamped into the range).
// max_abs: one element of x's compute dtype (f32, or f64 for f64 x).
void grad_telemetry(const Strided& x, DType format, int64_t hist_lo, const Strided& counts, const Strided& max_abs);

}  // namespace mixtape::cpu
