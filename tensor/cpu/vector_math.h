// The CPU kernels' sigmoid and tanh over rows of floats, on the conversion path's vector unit
// (Note [Vector exp] in vector_math.cpp), with the scalar formulas' bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/cpu/math.h"

namespace mixtape::cpu {

// The scalar sigmoid of the kernels: 1 / (1 + exp(-x)) in the compute type (expf for float).
template <class C>
inline C sigmoid(C x) {
  return C(1) / (C(1) + std::exp(-x));
}

// y[j] = sigmoid(x[j]) and y[j] = tanh_f32(x[j]) (Note [Float tanh]) for j < n, the same bits as
// the scalar functions, sixteen at a time on the AVX-512 conversion path. y may be x.
void sigmoid_row(const float* x, float* y, int64_t n);
void tanh_row(const float* x, float* y, int64_t n);

}  // namespace mixtape::cpu
