#include "autograd/scaling.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "tensor/ops/elementwise.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

bool is_power_of_two(double s) {
  if (!(s > 0.0) || !std::isfinite(s)) return false;
  int e = 0;
  return std::frexp(s, &e) == 0.5 && e - 1 >= -126 && e - 1 <= 127;
}

Tensor ScaledGrad::unscaled() const {
  const DType wide = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor w = g.to(wide);
  return scale == 1.0f ? w : unary(UnaryOp::mul_scalar, w, 1.0 / double(scale));
}

double max_finite(DType t) {
  switch (t) {
    case DType::f16: return kHalfLimits.max_finite;
    case DType::bf16: return kBf16Limits.max_finite;
    case DType::f32: return double(FLT_MAX);
    case DType::f64: return DBL_MAX;
    default: return DBL_MAX;
  }
}

Tensor rescale(const Tensor& g, float factor) {
  return factor == 1.0f ? g : unary(UnaryOp::mul_scalar, g, double(factor));
}

float common_scale(const std::vector<ScaledGrad>& grads) {
  MT_ASSERT(!grads.empty());
  float lo = grads.front().scale, hi = lo;
  for (const ScaledGrad& g : grads) {
    lo = std::min(lo, g.scale);
    hi = std::max(hi, g.scale);
  }
  if (lo == hi) return lo;
  // Candidates: the incoming scales, largest first; keep the first that overflows no gradient.
  std::vector<double> amax_over_scale;  // max|g_i| / alpha_i: the true gradient's magnitude
  for (const ScaledGrad& g : grads) amax_over_scale.push_back(max_abs(g.g) / double(g.scale));
  std::vector<float> candidates;
  for (const ScaledGrad& g : grads) candidates.push_back(g.scale);
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  for (float beta : candidates) {
    bool ok = true;
    for (size_t i = 0; i < grads.size() && ok; ++i)
      ok = double(beta) * amax_over_scale[i] < max_finite(grads[i].g.dtype());
    if (ok) return beta;
  }
  return lo;
}

ScaledGrad combine_branch(std::vector<ScaledGrad> grads) {
  MT_ASSERT(!grads.empty());
  if (grads.size() == 1) return std::move(grads.front());
  const float beta = common_scale(grads);
  Tensor sum = rescale(grads.front().g, beta / grads.front().scale);
  for (size_t i = 1; i < grads.size(); ++i) sum = add(sum, rescale(grads[i].g, beta / grads[i].scale));
  return {std::move(sum), beta};
}

}  // namespace mixtape
