// Converting whole rows between f32 and the 16-bit formats: the vector form of load<T> and
// store<T> (tensor/core/dtype.h), used by kernels that compute a row in f32.
//
// Note [Row conversions]
// A 16-bit kernel reads a row of 16-bit values into an f32 buffer (load_n), computes in f32,
// and rounds the row back once (store_n, or store_stochastic_n). Each of these is bit-identical
// to calling load<T> / store<T> / round_to_*_stochastic on every element; the vector paths
// (chosen once at run time, conversion_path()) are tested against the scalar one on every
// 16-bit pattern and on every float. store_n counts what it rounds while a RoundingCensus is
// open, as store<T> does.
#pragma once

#include <cstdint>

#include "tensor/core/half.h"

namespace mixtape::cpu {

// dst[i] = load(src[i]) (exact).
void load_n(const half* src, float* dst, int64_t n);
void load_n(const bfloat16* src, float* dst, int64_t n);

// dst[i] = store<T>(src[i]): round to nearest even, NaN -> the canonical NaN.
void store_n(const float* src, half* dst, int64_t n);
void store_n(const float* src, bfloat16* dst, int64_t n);

// dst[i] rounded stochastically with the word philox_words(seed, index + i)[0]: element i of the
// row gets the random word of its position in the whole tensor (Note [Stochastic rounding]).
void store_stochastic_n(const float* src, half* dst, int64_t n, uint64_t seed, uint64_t index);
void store_stochastic_n(const float* src, bfloat16* dst, int64_t n, uint64_t seed, uint64_t index);

// For f32 both are a copy, so a kernel templated on T in {f32, f16, bf16} calls them alike.
void load_n(const float* src, float* dst, int64_t n);
void store_n(const float* src, float* dst, int64_t n);

// The vector path in use: "avx512", "avx2" or "scalar".
const char* conversion_path();

}  // namespace mixtape::cpu
