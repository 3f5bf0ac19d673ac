#include "autograd/scaling.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "autograd/tape.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/reduce.h"
#include "tensor/tensor.h"

namespace mixtape {

namespace {

// The active tape's rule asked with `q`, its site stamped; 1 without a rule.
template <class Query, class Ask>
float ask(const Query& q, Ask&& ask_rule) {
  Tape* t = Tape::current();
  if (!t || !t->scaling_rule()) return 1.0f;
  Query stamped = q;
  stamped.site = Tape::next_grad_site();
  return ask_rule(*t->scaling_rule(), stamped);
}

}  // namespace

float gemm_beta(const GemmGradQuery& q) {
  return ask(q, [](ScalingRule& r, const GemmGradQuery& s) { return r.gemm_beta(s); });
}
float cast_beta(const CastGradQuery& q) {
  return ask(q, [](ScalingRule& r, const CastGradQuery& s) { return r.cast_beta(s); });
}
float param_beta(const ParamGradQuery& q) {
  return ask(q, [](ScalingRule& r, const ParamGradQuery& s) { return r.param_beta(s); });
}

bool scaling_rule_active() {
  Tape* t = Tape::current();
  return t && t->scaling_rule();
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

// Note [Overflow-free branch sum]
// Algorithm 1 (lines 18-22) picks the common scale so that no rescaled gradient overflows, but
// the sum of M gradients that each fit can still overflow (an LSTM's recurrent weight receives
// one gradient per time step). Under a scaling rule the gradients are therefore rescaled to the
// largest incoming scale in fp32 (exact: powers of two, fp32 has the range), summed in fp32, and
// the common scale is the largest candidate (the incoming scales, largest first, as the paper
// does) under which the exact sum fits the 16-bit format; if none does, the largest power of
// two that fits. The sum is rounded to 16 bits once, instead of once per addition.
ScaledGrad combine_branch(std::vector<ScaledGrad> grads, bool exact_sum) {
  MT_ASSERT(!grads.empty());
  if (grads.size() == 1) return std::move(grads.front());
  const DType dt = grads.front().g.dtype();
  if (!exact_sum || !is_16bit(dt)) {
    const float beta = common_scale(grads);
    Tensor sum = rescale(grads.front().g, beta / grads.front().scale);
    for (size_t i = 1; i < grads.size(); ++i) sum = add(sum, rescale(grads[i].g, beta / grads[i].scale));
    return {std::move(sum), beta};
  }
  float ref = grads.front().scale;
  for (const ScaledGrad& g : grads) ref = std::max(ref, g.scale);
  Tensor sum32 = rescale(grads.front().g.to(DType::f32), ref / grads.front().scale);
  for (size_t i = 1; i < grads.size(); ++i)
    sum32 = add(sum32, rescale(grads[i].g.to(DType::f32), ref / grads[i].scale));
  const double m = max_abs(sum32);  // of ref x the true sum
  if (!std::isfinite(m) || m == 0.0) return {sum32.to(dt), ref};
  const double lmax = max_finite(dt);
  std::vector<float> candidates;
  for (const ScaledGrad& g : grads) candidates.push_back(g.scale);
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  float beta = 0.0f;
  for (float c : candidates)
    if (double(c) / double(ref) * m <= lmax) {
      beta = c;
      break;
    }
  if (beta == 0.0f) {  // even the smallest incoming scale overflows: the largest power of two that fits
    int e = 0;
    std::frexp(lmax * double(ref) / m, &e);  // = f 2^e, f in [0.5, 1): 2^(e-1) <= lmax ref / m
    beta = float(std::ldexp(1.0, std::max(e - 1, -126)));
  }
  return {rescale(sum32, beta / ref).to(dt), beta};  // the one rounding to 16 bits
}

}  // namespace mixtape
