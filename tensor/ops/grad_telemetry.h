// Precision statistics of one tensor against a 16-bit storage format, in one pass: what storing
// these values in f16 (or bf16) would do to them. autograd/telemetry.h runs this on every
// gradient of a recorded backward pass (Note [What telemetry measures] there says what the counts
// mean for each gradient dtype).
//
// Every count is over the values as stored in x (for a ScaledGrad: g, i.e. scale x the true
// gradient). Rounding to the format is the library's RNE conversion (tensor/core/half.h): f16 has
// normals in [2^-14, 65504] and subnormals down to 2^-24, so a value below 2^-25 (and 2^-25
// itself, a tie to even) becomes zero and one at or above 65520 becomes inf; bf16 has normals
// from 2^-126 and subnormals down to 2^-133.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace mixtape {

// Default exponent-histogram range: every finite nonzero f32 has floor(log2|x|) in [-149, 127],
// so f32, f16 and bf16 values never reach the edge bins; f64 values beyond are clamped into them.
inline constexpr int64_t kExpHistLo = -150;
inline constexpr int64_t kExpHistHi = 130;

struct GradTelemetry {
  int64_t numel = 0;
  int64_t nonzero = 0;    // finite x != 0
  int64_t underflow = 0;  // finite x != 0 that rounds to +-0 in the format
  int64_t subnormal = 0;  // finite x != 0 that rounds to a nonzero subnormal of the format
  int64_t overflow = 0;   // x inf or NaN, or finite x that rounds to +-inf in the format
  double max_abs = 0.0;   // largest finite |x|; 0 when there is none
  // Exponent histogram over the finite nonzero x: hist[k] counts the x whose
  // clamp(floor(log2|x|), hist_lo, hist_hi) == hist_lo + k, so bin e holds |x| in [2^e, 2^(e+1))
  // and the two edge bins also hold everything beyond. Empty when not requested.
  int64_t hist_lo = kExpHistLo;
  int64_t hist_hi = kExpHistHi;
  std::vector<int64_t> hist;
};

// x: any floating dtype, any strides, any device. format: f16 or bf16. With histogram = false
// the exponent histogram is skipped (hist stays empty). hist_lo <= hist_hi, at most 4096 bins.
GradTelemetry grad_telemetry(const Tensor& x, DType format, bool histogram = true, int64_t hist_lo = kExpHistLo,
                             int64_t hist_hi = kExpHistHi);

}  // namespace mixtape
