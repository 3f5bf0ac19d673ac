#include "optim/clip.h"

#include <cmath>

#include "tensor/core/update_formulas.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/reduce.h"

namespace mixtape {

namespace {

// sum(u^2) of one unscaled gradient without overflow or underflow: u is first multiplied by
// 2^-e, e = floor(log2 max|u|), so the fp32 squares are below 4, and the sum (accumulated in
// double, rounded once to fp32) is scaled back by 2^(2e) in double. The factor goes in two
// halves so that each fits in fp32 (max|u| may be subnormal); scaling by powers of two is exact.
double sum_squares(const Tensor& u) {
  const double m = max_abs(u);
  if (!std::isfinite(m)) return m * m;  // inf, or NaN
  if (m == 0.0) return 0.0;
  const int e = std::ilogb(m);
  const int half = -e / 2;
  Tensor v = u;
  if (half != 0) v = std::ldexp(1.0, half) * v;
  if (-e - half != 0) v = std::ldexp(1.0, -e - half) * v;
  return std::ldexp(sum(v * v).item(), 2 * e);
}

}  // namespace

double grad_norm(const std::vector<Tensor>& grads) {
  double total = 0.0;
  for (const Tensor& g : grads)
    if (g.defined()) total += sum_squares(g);
  return std::sqrt(total);
}

double clip_grad_norm(std::vector<Tensor>& grads, double max_norm) {
  MT_CHECK(std::isfinite(max_norm) && max_norm >= 0.0, "clip_grad_norm: max_norm must be finite and >= 0, got ",
           max_norm);
  const double norm = grad_norm(grads);
  const double coef = formulas::clip_coefficient(norm, max_norm);  // 1 for an inf or NaN norm
  if (coef == 1.0) return norm;
  for (Tensor& g : grads)
    if (g.defined()) g = coef * g;
  return norm;
}

double clip_grad_norm(const std::vector<Variable>& parameters, double max_norm) {
  MT_CHECK(std::isfinite(max_norm) && max_norm >= 0.0, "clip_grad_norm: max_norm must be finite and >= 0, got ",
           max_norm);
  double total = 0.0;
  for (const Variable& p : parameters)
    if (const std::optional<ScaledGrad>& g = p.grad(); g && g->defined())
      total += std::ldexp(sum_squares(g->g), -2 * std::ilogb(g->scale));  // / scale^2, exactly
  const double norm = std::sqrt(total);
  const double coef = formulas::clip_coefficient(norm, max_norm);  // 1 for an inf or NaN norm
  if (coef == 1.0) return norm;
  for (Variable p : parameters)  // a handle: the copy sets the parameter's own gradient
    if (const std::optional<ScaledGrad> g = p.grad(); g && g->defined()) p.set_grad(ScaledGrad{coef * g->g, g->scale});
  return norm;
}

void clip_grad_value(const std::vector<Variable>& parameters, double clip_value) {
  MT_CHECK(std::isfinite(clip_value) && clip_value >= 0.0, "clip_grad_value: clip_value must be finite and >= 0, got ",
           clip_value);
  for (Variable p : parameters)
    if (const std::optional<ScaledGrad> g = p.grad(); g && g->defined()) {
      const double c = clip_value * double(g->scale);
      p.set_grad(ScaledGrad{clamp(g->g, -c, c), g->scale});
    }
}

void clip_grad_value(std::vector<Tensor>& grads, double clip_value) {
  MT_CHECK(std::isfinite(clip_value) && clip_value >= 0.0, "clip_grad_value: clip_value must be finite and >= 0, got ",
           clip_value);
  for (Tensor& g : grads)
    if (g.defined()) g = clamp(g, -clip_value, clip_value);
}

}  // namespace mixtape
