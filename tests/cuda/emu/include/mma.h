// nvcuda::wmma for the CUDA emulator (Note [CUDA emulation] in tests/cuda/emu/emu.h): the
// fragments, loads, stores and the tile product cuda/gemm.cu uses, with the layouts the CUDA
// Programming Guide gives them. A warp's fragment is held whole by its lane 0, which does the
// warp's work; the other lanes' calls do nothing (their fragments stay zero). The product sums
// over k in order in fp32; Tensor Cores may add in another order, so results match the CPU's
// fp32 GEMM within the tests' tolerance, not bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <cstdint>
#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
template <class T>
struct storage {
  using type = T;
};
template <>
struct storage<precision::tf32> {
  using type = float;
};

inline bool leader() { return (::mt_emu::current->linear & 31u) == 0; }
inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
}  // namespace detail

// rows x cols of the operand: matrix_a M x K, matrix_b K x N, accumulator M x N.
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  using element_type = typename detail::storage<T>::type;
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  element_type x[num_elements] = {};
};

// Round to the TF32 grid (10 explicit mantissa bits), to nearest with ties away from zero, as
// cvt.rna.tf32.f32 does.
inline float __float_to_tf32(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;  // inf and NaN stay
  u = (u + 0x1000u) & ~0x1fffu;
  return std::bit_cast<float>(u);
}

template <class Use, int M, int N, int K, class T, class Layout, class P>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm) {
  if (!detail::leader()) return;
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}

template <int M, int N, int K, class T>
void fill_fragment(fragment<accumulator, M, N, K, T>& f, T v) {
  for (auto& e : f.x) e = v;
}

template <int M, int N, int K, class T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  if (!detail::leader()) return;
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[r * N + c];
}

template <int M, int N, int K, class TA, class LA, class TB, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  if (!detail::leader()) return;
  float out[M * N];
  for (int r = 0; r < M; ++r)
    for (int n = 0; n < N; ++n) {
      float s = c.x[r * N + n];
      for (int k = 0; k < K; ++k) s += detail::to_float(a.x[r * K + k]) * detail::to_float(b.x[k * N + n]);
      out[r * N + n] = s;
    }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
