// Whole-tensor summary statistics in one pass, accumulated in f64 whatever the dtype: what
// gradient-scaling rules (autograd/gradient_scaling.h) and precision telemetry measure on a gradient.
// Inf and NaN elements are counted and otherwise left out, so one bad value does not turn
// every statistic into NaN; callers decide what a nonzero `nonfinite` means.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

struct TensorMoments {
  int64_t count = 0;      // finite elements
  int64_t nonfinite = 0;  // inf or NaN elements
  double mean = 0.0;
  double std = 0.0;      // population standard deviation (divides by count)
  double rms = 0.0;      // sqrt(mean of x^2): the spread about zero
  double max_abs = 0.0;  // over the finite elements
};
TensorMoments tensor_moments(const Tensor& x);

// Statistics of ln|x| over the finite nonzero elements: the parameters of a log-normal model
// of the magnitudes (Zhao et al., Theorem 2).
struct LogAbsMoments {
  int64_t count = 0;      // finite nonzero elements
  int64_t nonfinite = 0;  // inf or NaN elements
  double mu = 0.0;        // mean of ln|x|
  double sigma = 0.0;     // population standard deviation of ln|x|
  double max_abs = 0.0;   // over the finite elements
};
LogAbsMoments log_abs_moments(const Tensor& x);

}  // namespace mixtape
