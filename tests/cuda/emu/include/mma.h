// nvcuda::wmma for the CUDA emulator (Note [CUDA emulation] in tests/cuda/emu/emu.h): the
// fragments, loads, stores and the tile product cuda/gemm.cu uses.
//
// Note [WMMA fragments in the emulator]
// CUDA leaves unspecified which lane holds which element of a fragment (only that every lane
// holds num_elements of them), so code that reads or writes fragment elements by position (other
// than the same operation on every element) is wrong on some GPU. The emulator spreads each
// fragment over the 32 lanes as a GPU does, so that such code fails here too:
//   - in the first schedule, as the PTX ISA documents the mma instructions WMMA compiles to on
//     sm_80+ ("Matrix Fragments for mma.m16n8k16" and "mma.m16n8k8" with .tf32; a 16x16 tile is
//     two n8 tiles side by side). With g = lane / 4 and t = lane % 4:
//       A 16x16 (f16, bf16), slot i < 8: row g + 8 * ((i / 2) % 2), col 2t + i % 2 + 8 * (i / 4)
//       A 16x8 (tf32),       slot i < 4: row g + 8 * (i % 2),       col t + 4 * (i / 2)
//       B 16x16,             slot i < 8: k 2t + i % 2 + 8 * ((i / 2) % 2), n g + 8 * (i / 4)
//       B 8x16 (tf32),       slot i < 4: k t + 4 * (i % 2),           n g + 8 * (i / 2)
//       C 16x16 (f32),       slot i < 8: row g + 8 * ((i / 2) % 2), col 2t + i % 2 + 8 * (i / 4)
//     The f16 A and B fragments have 16 slots, as in CUDA's headers: slots 8..15 of lane l repeat
//     slots 0..7 of lane l ^ 16 (each element is held twice);
//   - in the second schedule (MIXTAPE_EMU_SCHEDULE=reverse), scrambled: lane l slot i holds what
//     the PTX layout gives lane 31 - l slot n - 1 - i, so code that hard-codes the PTX layout,
//     which WMMA does not promise, fails as well.
// load_matrix_sync and store_matrix_sync move each lane's own elements. mma_sync is collective:
// every lane writes its A and B elements to the warp's scratch, the warp meets at a barrier (a
// lane that skips the call deadlocks the launch, as a divergent mma would hang), and each lane
// computes its own accumulator elements, summing over k in order in fp32. Tensor Cores may add in
// another order, so results match the CPU's fp32 GEMM within the tests' tolerance, not bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
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

inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

inline int lane() { return int(::mt_emu::current->linear & 31u); }

struct Pos {
  int r, c;
};

// Slot i of lane l in the PTX ISA layout (the Note); `slots` is the fragment's num_elements.
template <class Use, int K>
Pos ptx_position(int l, int i, int slots) {
  if (slots == 16 && i >= 8) return ptx_position<Use, K>(l ^ 16, i - 8, 8);  // f16's second copy
  const int g = l / 4, t = l % 4;
  if constexpr (std::is_same_v<Use, matrix_a>) {
    if (K == 8) return {g + 8 * (i % 2), t + 4 * (i / 2)};
    return {g + 8 * ((i / 2) % 2), 2 * t + i % 2 + 8 * (i / 4)};
  } else if constexpr (std::is_same_v<Use, matrix_b>) {
    if (K == 8) return {t + 4 * (i % 2), g + 8 * (i / 2)};
    return {2 * t + i % 2 + 8 * ((i / 2) % 2), g + 8 * (i / 4)};
  } else {
    return {g + 8 * ((i / 2) % 2), 2 * t + i % 2 + 8 * (i / 4)};
  }
}

// The (row, col) of each slot of the calling lane: rows x cols of the operand (A M x K, B K x N,
// C M x N), from a table made once per fragment kind and schedule.
template <class Use, int K, int Slots>
const Pos* positions() {
  static const std::array<Pos, 2 * 32 * Slots> table = [] {
    std::array<Pos, 2 * 32 * Slots> t{};
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < Slots; ++i) {
        t[size_t(l * Slots + i)] = ptx_position<Use, K>(l, i, Slots);
        t[size_t((32 + l) * Slots + i)] = ptx_position<Use, K>(31 - l, Slots - 1 - i, Slots);  // scrambled
      }
    return t;
  }();
  return table.data() + ((::mt_emu::reverse_schedule() ? 32 : 0) + lane()) * Slots;
}

// Slots per lane, as CUDA's headers give them.
template <class Use, int K, class T>
constexpr int slots() {
  if constexpr (std::is_same_v<Use, accumulator>) return 8;
  else if constexpr (std::is_same_v<T, __half>) return 16;
  else if constexpr (std::is_same_v<T, precision::tf32>) return 4;
  else return 8;
}
}  // namespace detail

// rows x cols of the operand: matrix_a M x K, matrix_b K x N, accumulator M x N; each lane holds
// num_elements of them (Note [WMMA fragments in the emulator]).
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && (K == 16 || K == 8), "the emulator has the m16n16k16 and m16n16k8 shapes");
  using element_type = typename detail::storage<T>::type;
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = detail::slots<Use, K, T>();
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
  using F = fragment<Use, M, N, K, T, Layout>;
  const detail::Pos* pos = detail::positions<Use, K, F::num_elements>();
  for (int i = 0; i < F::num_elements; ++i) {
    const detail::Pos q = pos[i];
    f.x[i] = std::is_same_v<Layout, row_major> ? p[size_t(q.r) * ldm + q.c] : p[size_t(q.c) * ldm + q.r];
  }
}

template <int M, int N, int K, class T>
void fill_fragment(fragment<accumulator, M, N, K, T>& f, T v) {
  for (auto& e : f.x) e = v;
}

template <int M, int N, int K, class T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  using F = fragment<accumulator, M, N, K, T>;
  const detail::Pos* pos = detail::positions<accumulator, K, F::num_elements>();
  for (int i = 0; i < F::num_elements; ++i) {
    const detail::Pos q = pos[i];
    (layout == mem_row_major ? p[size_t(q.r) * ldm + q.c] : p[size_t(q.c) * ldm + q.r]) = f.x[i];
  }
}

// Touches only fragments and the warp's scratch (host memory), so it is not instrumented
// (Note [Device memory checks] in runtime.cpp): it is the emulator's inner loop.
template <int M, int N, int K, class TA, class LA, class TB, class LB>
__attribute__((no_sanitize_address)) void mma_sync(fragment<accumulator, M, N, K, float>& d,
                                                   const fragment<matrix_a, M, N, K, TA, LA>& a,
                                                   const fragment<matrix_b, M, N, K, TB, LB>& b,
                                                   const fragment<accumulator, M, N, K, float>& c) {
  using FA = fragment<matrix_a, M, N, K, TA, LA>;
  using FB = fragment<matrix_b, M, N, K, TB, LB>;
  using FC = fragment<accumulator, M, N, K, float>;
  // A [M][K], then B [K][N]; successive calls alternate between two buffers, so one barrier per
  // call suffices: a lane can be at most one call ahead of the slowest.
  float* as = ::mt_emu::warp_scratch(M * K + K * N);
  float* bs = as + M * K;
  const detail::Pos* pa = detail::positions<matrix_a, K, FA::num_elements>();
  const detail::Pos* pb = detail::positions<matrix_b, K, FB::num_elements>();
  const detail::Pos* pc = detail::positions<accumulator, K, FC::num_elements>();
  for (int i = 0; i < FA::num_elements; ++i) as[pa[i].r * K + pa[i].c] = detail::to_float(a.x[i]);
  for (int i = 0; i < FB::num_elements; ++i) bs[pb[i].r * N + pb[i].c] = detail::to_float(b.x[i]);
  ::mt_emu::warp_barrier();  // every lane's elements are in the scratch
  float out[FC::num_elements];
  for (int i = 0; i < FC::num_elements; ++i) {
    float s = c.x[i];
    for (int k = 0; k < K; ++k) s += as[pc[i].r * K + k] * bs[k * N + pc[i].c];
    out[i] = s;
  }
  for (int i = 0; i < FC::num_elements; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
