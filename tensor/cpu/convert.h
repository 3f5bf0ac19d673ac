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

#include <algorithm>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tensor/core/dtype.h"
#include "tensor/core/half.h"

namespace mixtape::cpu {

// dst[i] = load(src[i]) (exact).
void load_n(const half* src, float* dst, int64_t n);
void load_n(const bfloat16* src, float* dst, int64_t n);

// dst[i] = store<T>(src[i]): round to nearest even, NaN -> the canonical NaN.
void store_n(const float* src, half* dst, int64_t n);
void store_n(const float* src, bfloat16* dst, int64_t n);

// dst[i] rounded stochastically with the word rounding_word(seed, index + i): element i of the
// row gets the random word of its position in the whole tensor (Note [Stochastic rounding] in
// half.h, Note [Rounding words] in rng.h).
void store_stochastic_n(const float* src, half* dst, int64_t n, uint64_t seed, uint64_t index);
void store_stochastic_n(const float* src, bfloat16* dst, int64_t n, uint64_t seed, uint64_t index);

// The same for a strided row: p[i step] from v[i] with the word of index + i.
void store_stochastic_row(const float* v, half* p, int64_t step, int64_t len, uint64_t seed, uint64_t index);
void store_stochastic_row(const float* v, bfloat16* p, int64_t step, int64_t len, uint64_t seed, uint64_t index);

// words[i] = rounding_word(seed, index + i) for i < n: the random words that store_stochastic_n
// rounds with, for kernels that round element by element in their own loop (the 16-bit
// optimizer updates, tensor/cpu/optim.cpp). Drawn on the conversion path in use.
void rounding_words_n(uint64_t seed, uint64_t index, uint32_t* words, int64_t n);

// For f32 both are a copy, so a kernel templated on T in {f32, f16, bf16} calls them alike.
void load_n(const float* src, float* dst, int64_t n);
void store_n(const float* src, float* dst, int64_t n);

// The vector path in use: "avx512" (AVX-512 F + BW + VL), "avx2" (AVX2 + F16C + FMA), or
// "scalar" (the reference, and the path of every other CPU). conversion_paths() lists the paths
// this CPU can run, the reference first and the default last; set_conversion_path selects one
// for the whole process (tests and benchmarks compare them) and throws for a path the CPU lacks.
const char* conversion_path();
std::vector<std::string> conversion_paths();
void set_conversion_path(std::string_view name);
// Whether the path in use is "avx512". The AVX-512 forms of other memory-bound kernels follow it
// (Note [Max-pool segments] in pool.cpp, Note [Batch norm vectors] in batch_norm.cpp), so that
// one switch selects, and the tests compare, every vector form.
bool avx512_path_active();

// ---- strided rows, for kernels templated on the stored type T (compute type C) ----------------

// Rows are computed in pieces of at most this many elements, in stack buffers.
inline constexpr int64_t kRowChunk = 256;

// Calls f(j, n) for the chunks [j, j + n) of a row of `len` elements.
template <class F>
void for_chunks(int64_t len, F&& f) {
  for (int64_t j = 0; j < len; j += kRowChunk) f(j, std::min(kRowChunk, len - j));
}

// The values p[0], p[step], ... p[(len - 1) step] as C: p itself when T is C and the row is
// contiguous, else buf (room for len values) filled with them.
template <class T, class C = compute_t<T>>
const C* load_row(const T* p, int64_t step, int64_t len, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (step == 1) return p;
    for (int64_t i = 0; i < len; ++i) buf[i] = p[i * step];
  } else if (step == 1) {
    load_n(p, buf, len);
  } else if (step == 0) {
    std::fill(buf, buf + len, load(p[0]));
  } else {
    for (int64_t i = 0; i < len; ++i) buf[i] = load(p[i * step]);
  }
  return buf;
}

// dst[i] = load(p[i step]) for i < len (dst does not overlap p).
template <class T, class C = compute_t<T>>
void load_row_to(const T* p, int64_t step, int64_t len, C* dst) {
  if constexpr (!std::is_same_v<T, C>) {
    if (step == 1) {
      load_n(p, dst, len);
      return;
    }
  }
  for (int64_t i = 0; i < len; ++i) dst[i] = load(p[i * step]);
}

// Where to compute a row that store_row then writes to p: p itself when T is C and the row is
// contiguous, else buf.
template <class T, class C = compute_t<T>>
C* out_row(T* p, int64_t step, C* buf) {
  if constexpr (std::is_same_v<T, C>)
    if (step == 1) return p;
  return buf;
}

// p[i step] = store<T>(v[i]) for i < len; nothing to do when v is p (out_row returned it).
template <class T, class C = compute_t<T>>
void store_row(const C* v, T* p, int64_t step, int64_t len) {
  if constexpr (std::is_same_v<T, C>) {
    if (v == p) return;
    for (int64_t i = 0; i < len; ++i) p[i * step] = v[i];
  } else if (step == 1) {
    store_n(v, p, len);
  } else {
    for (int64_t i = 0; i < len; ++i) p[i * step] = store<T>(v[i]);
  }
}

}  // namespace mixtape::cpu
