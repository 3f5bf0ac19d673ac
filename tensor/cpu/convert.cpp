#include "tensor/cpu/convert.h"

#include <cstring>
#include <type_traits>

#include "tensor/core/dtype.h"
#include "tensor/core/rng.h"

namespace mixtape::cpu {

namespace {

template <class T>
void load_scalar(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}

template <class T>
void store_scalar(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}

template <class T>
void store_stochastic_scalar(const float* src, T* dst, int64_t n, uint64_t seed, uint64_t index) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = philox_words(seed, index + uint64_t(i))[0];
    if constexpr (std::is_same_v<T, half>) dst[i] = round_to_half_stochastic(src[i], r);
    else dst[i] = round_to_bf16_stochastic(src[i], r);
  }
}

}  // namespace

void load_n(const half* src, float* dst, int64_t n) { load_scalar(src, dst, n); }
void load_n(const bfloat16* src, float* dst, int64_t n) { load_scalar(src, dst, n); }
void store_n(const float* src, half* dst, int64_t n) { store_scalar(src, dst, n); }
void store_n(const float* src, bfloat16* dst, int64_t n) { store_scalar(src, dst, n); }

void store_stochastic_n(const float* src, half* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_stochastic_scalar(src, dst, n, seed, index);
}
void store_stochastic_n(const float* src, bfloat16* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_stochastic_scalar(src, dst, n, seed, index);
}

void load_n(const float* src, float* dst, int64_t n) {
  if (n > 0 && src != dst) std::memcpy(dst, src, size_t(n) * sizeof(float));
}
void store_n(const float* src, float* dst, int64_t n) { load_n(src, dst, n); }

const char* conversion_path() { return "scalar"; }

}  // namespace mixtape::cpu
