// Scalar math shared by the CPU kernels.
#pragma once

#include <cmath>
#include <type_traits>

namespace mixtape::cpu {

// Note [Float tanh]
// glibc's tanhf (2.36) is built on expm1f: ~25 ns a call and up to 2 ulp off. The LSTM cell
// evaluates tanh twice per element forward and twice more in backward (Note [LSTM cell
// backward]), which made tanhf a quarter of the CPU time of a char-LSTM training step.
// tanh_f32 evaluates in double instead: tanh|x| = (1 - e) / (1 + e) with e = exp(-2|x|), where
// the cancellation in 1 - e costs at most ~1e-16 / (2|x|) relative error, far below float's
// 6e-8 for |x| >= 2^-10; below that, the odd series x - x^3/3 + 2x^5/15 (next term 17x^7/315)
// is exact to double precision. Rounded to float once, the result was correctly rounded for
// each of 22.7 M sampled floats in [-20, 20] (glibc's tanhf: 5% of them 1-2 ulp off), in ~6 ns.
// Signed zeros, infinities and NaN come out as from std::tanh.
inline float tanh_f32(float x) {
  const double d = x, a = std::fabs(d);
  if (a < 0x1p-10) {
    const double d2 = d * d;
    return float(d * (1.0 - d2 * (1.0 / 3.0 - d2 * (2.0 / 15.0))));
  }
  const double e = std::exp(-2.0 * a);
  return float(std::copysign((1.0 - e) / (1.0 + e), d));
}

// tanh in a kernel's compute type: float through tanh_f32, double through std::tanh.
template <class C>
inline C tanh_c(C x) {
  if constexpr (std::is_same_v<C, float>) return tanh_f32(x);
  else return std::tanh(x);
}

// Note [Branch-free leaky ReLU]
// `x > 0 ? x : x * a` compiles to a branch (with -ftrapping-math the compiler may not evaluate the
// multiply on both paths), which mispredicts on half the elements of zero-mean activations: about
// 7-10 ns per element against 1-1.5 ns for this form. Multiplying by the slope picked from a
// two-entry table gives the same bits in every case (x * 1 == x, including -0, inf and NaN).
template <class C>
inline C leaky_slope(C x, C a) {
  const C slope[2] = {a, C(1)};
  return slope[x > C(0)];
}

// The host's scalar math for the shared formulas (tensor/core/elementwise_formulas.h,
// tensor/core/loss_formulas.h).
struct HostMath {
  template <class C>
  static C exp(C x) {
    return std::exp(x);
  }
  template <class C>
  static C log(C x) {
    return std::log(x);
  }
  template <class C>
  static C sqrt(C x) {
    return std::sqrt(x);
  }
  template <class C>
  static C abs(C x) {
    return std::abs(x);
  }
  template <class C>
  static C pow(C x, C a) {
    return std::pow(x, a);
  }
  template <class C>
  static C erfc(C x) {
    return std::erfc(x);
  }
  template <class C>
  static C expm1(C x) {
    return std::expm1(x);
  }
  template <class C>
  static C log1p(C x) {
    return std::log1p(x);
  }
  template <class C>
  static C tanh(C x) {
    return tanh_c(x);
  }  // Note [Float tanh]
  template <class C>
  static C leaky_slope(C x, C a) {
    return cpu::leaky_slope(x, a);
  }
};

}  // namespace mixtape::cpu
