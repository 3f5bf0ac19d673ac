// The formulas of the pointwise losses on probabilities and distances, written once for both
// devices: tensor/cpu/loss.cpp and cuda/loss.cu instantiate them with their own log and log1p (`M`),
// so the arithmetic around it is the same code in the same order on the CPU and the GPU (Note
// [No contracted multiply-adds] in CMakeLists.txt keeps it unfused on both). C is the compute
// type: float for f32/f16/bf16, double for f64 (CPU only). Each gradient is the incoming g times
// a factor that does not depend on g, multiplied last, so a power-of-two gradient scale passes
// through exactly.
#pragma once

#include "tensor/core/host_device.h"

namespace mixtape::formulas {

// ---- binary cross entropy on probabilities (torch.nn.BCELoss) -----------------------------
// loss = -(t log(x) + (1 - t) log(1 - x)), each log clamped to >= -100 as PyTorch does, so that
// x = 0 or 1 gives a finite loss (100 per element at most) instead of inf. An x outside [0, 1] is
// refused before (tensor/cpu/loss.cpp, cuda/loss.cu); a NaN x is not clamped: the comparison is
// false for NaN and it passes on, for a loss scaler to see.
inline constexpr double kBceLogFloor = -100.0;
// PyTorch's floor of x (1 - x) in the gradient, so that x = 0 or 1 gives a finite gradient. A
// float, as PyTorch's (`constexpr float EPSILON` in ATen's Loss.cpp): f64 gradients floor at
// double(1e-12f), not at 1e-12, which would differ from PyTorch's by 4e-9 relative there.
inline constexpr float kBceGradEps = 1e-12f;

template <class C>
MT_HOST_DEVICE inline C bce_floor(C l) {
  return l < C(kBceLogFloor) ? C(kBceLogFloor) : l;
}
// log(x) and log(1 - x) (as log1p(-x): exact for small x), each clamped.
template <class M, class C>
MT_HOST_DEVICE inline C bce_log_x(C x) {
  return bce_floor(M::log(x));
}
template <class M, class C>
MT_HOST_DEVICE inline C bce_log_1mx(C x) {
  return bce_floor(M::log1p(-x));
}

template <class M, class C>
MT_HOST_DEVICE inline C bce_forward(C x, C t) {
  return -(t * bce_log_x<M>(x) + (C(1) - t) * bce_log_1mx<M>(x));
}
// d/dx = (x - t) / max(x (1 - x), 1e-12) * g
template <class C>
MT_HOST_DEVICE inline C bce_grad_input(C x, C t, C g) {
  const C d = x * (C(1) - x);
  return (x - t) / (d < C(kBceGradEps) ? C(kBceGradEps) : d) * g;  // NaN in d passes on
}
// d/dt = (log(1 - x) - log(x)) * g, with the clamped logs of the forward: the derivative of the
// loss as computed, so +-100 g at x = 0 or 1. PyTorch returns -logit(x) g there, +-inf
// (docs/coming-from-pytorch.md).
template <class M, class C>
MT_HOST_DEVICE inline C bce_grad_target(C x, C g) {
  return (bce_log_1mx<M>(x) - bce_log_x<M>(x)) * g;
}

// ---- L1 and smooth L1 (torch.nn.L1Loss, SmoothL1Loss) ---------------------------------------
// sign(d): -1, 0 or 1, and NaN for NaN (a comparison that is false for NaN must not turn it into
// a number: Note [NaN in the formulas] in elementwise_formulas.h).
template <class C>
MT_HOST_DEVICE inline C sign_of(C d) {
  return d > C(0) ? C(1) : (d < C(0) ? C(-1) : d * C(0));  // d * 0: 0 for +-0, NaN for NaN
}
template <class C>
MT_HOST_DEVICE inline C abs_of(C d) {
  return d < C(0) ? -d : d;
}

// |a - b|; d/da = sign(a - b) g (0 where a == b, as PyTorch), d/db = -d/da.
template <class C>
MT_HOST_DEVICE inline C l1_forward(C a, C b) {
  return abs_of(a - b);
}
template <class C>
MT_HOST_DEVICE inline C l1_grad(C a, C b, C g) {
  return sign_of(a - b) * g;
}

// d = a - b: 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta = 0: L1).
// d/da = d / beta where |d| < beta, sign(d) elsewhere, times g; d/db = -d/da.
template <class C>
MT_HOST_DEVICE inline C smooth_l1_forward(C a, C b, C beta) {
  const C d = a - b, ad = abs_of(d);
  return ad < beta ? C(0.5) * d * d / beta : ad - C(0.5) * beta;
}
template <class C>
MT_HOST_DEVICE inline C smooth_l1_grad(C a, C b, C beta, C g) {
  const C d = a - b;
  return (abs_of(d) < beta ? d / beta : sign_of(d)) * g;
}

}  // namespace mixtape::formulas
