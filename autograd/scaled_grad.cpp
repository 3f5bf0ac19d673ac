#include "autograd/scaled_grad.h"

#include <cmath>

#include "tensor/ops/elementwise.h"

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

}  // namespace mixtape
