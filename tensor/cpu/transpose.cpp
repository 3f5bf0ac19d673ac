// Note [Transposed tiles] (transpose.h).
#include "tensor/cpu/transpose.h"

#include "tensor/cpu/convert.h"
#include "tensor/cpu/target_region.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixtape::cpu {

namespace {

// The values outside the whole blocks: rows [r0, rows) of every column, and columns [c0, cols)
// of rows [0, r0).
template <class T>
void transpose_edges(const T* src, int64_t ss, T* dst, int64_t ds, int64_t rows, int64_t cols, int64_t r0, int64_t c0) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = r0; r < rows; ++r) dst[c * ds + r] = src[r * ss + c];
  for (int64_t c = c0; c < cols; ++c)
    for (int64_t r = 0; r < r0; ++r) dst[c * ds + r] = src[r * ss + c];
}

#if defined(__x86_64__)
// 16 x 16 bytes (SSE2, every x86-64 CPU): four rounds of interleaving two registers, by bytes,
// then pairs, quads and eights of bytes, each round doubling the rows a unit holds, leave column
// c's 16 bytes in v[c].
void block16_bytes(const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds) {
  __m128i v[16], t[16];
  for (int r = 0; r < 16; ++r) v[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + r * ss));
  for (int r = 0; r < 8; ++r) {
    t[r] = _mm_unpacklo_epi8(v[2 * r], v[2 * r + 1]);
    t[r + 8] = _mm_unpackhi_epi8(v[2 * r], v[2 * r + 1]);
  }
  for (int h = 0; h < 16; h += 8)
    for (int r = 0; r < 4; ++r) {
      v[h + r] = _mm_unpacklo_epi16(t[h + 2 * r], t[h + 2 * r + 1]);
      v[h + r + 4] = _mm_unpackhi_epi16(t[h + 2 * r], t[h + 2 * r + 1]);
    }
  for (int q = 0; q < 16; q += 4)
    for (int r = 0; r < 2; ++r) {
      t[q + r] = _mm_unpacklo_epi32(v[q + 2 * r], v[q + 2 * r + 1]);
      t[q + r + 2] = _mm_unpackhi_epi32(v[q + 2 * r], v[q + 2 * r + 1]);
    }
  for (int e = 0; e < 16; e += 2) {
    v[e] = _mm_unpacklo_epi64(t[e], t[e + 1]);
    v[e + 1] = _mm_unpackhi_epi64(t[e], t[e + 1]);
  }
  for (int c = 0; c < 16; ++c) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c * ds), v[c]);  // column c
}

// 4 x 4 floats (SSE).
void block4_floats(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + ss), r2 = _mm_loadu_ps(src + 2 * ss),
         r3 = _mm_loadu_ps(src + 3 * ss);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + ds, r1);
  _mm_storeu_ps(dst + 2 * ds, r2);
  _mm_storeu_ps(dst + 3 * ds, r3);
}

MT_TARGET_BEGIN("avx2,fma")
// 8 x 8 floats (AVX).
void block8_floats(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 v[8], t[8], u[8];
  for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(src + r * ss);
  for (int r = 0; r < 8; r += 2) {
    t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
    t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
  }
  for (int r = 0; r < 8; r += 4) {
    u[r] = _mm256_shuffle_ps(t[r], t[r + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[r + 1] = _mm256_shuffle_ps(t[r], t[r + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[r + 2] = _mm256_shuffle_ps(t[r + 1], t[r + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[r + 3] = _mm256_shuffle_ps(t[r + 1], t[r + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

MT_TARGET_END
#endif

// The tile's whole kB x kB blocks, each by block(src, ss, dst, ds): sets r0, c0 to the rows and
// columns they cover.
template <int kB, class T, class Block>
void whole_blocks(const T* src, int64_t ss, T* dst, int64_t ds, int64_t rows, int64_t cols, Block block, int64_t& r0,
                  int64_t& c0) {
  r0 = rows / kB * kB;
  c0 = cols / kB * kB;
  for (int64_t r = 0; r < r0; r += kB)
    for (int64_t c = 0; c < c0; c += kB) block(src + r * ss + c, ss, dst + c * ds + r, ds);
}

}  // namespace

void transpose_tile(const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds, int64_t rows, int64_t cols) {
  int64_t r0 = 0, c0 = 0;
#if defined(__x86_64__)
  whole_blocks<16>(src, ss, dst, ds, rows, cols, block16_bytes, r0, c0);
#endif
  transpose_edges(src, ss, dst, ds, rows, cols, r0, c0);
}

void transpose_tile(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) {
  int64_t r0 = 0, c0 = 0;
#if defined(__x86_64__)
  if (avx512_path_active()) whole_blocks<8>(src, ss, dst, ds, rows, cols, block8_floats, r0, c0);
  else whole_blocks<4>(src, ss, dst, ds, rows, cols, block4_floats, r0, c0);
#endif
  transpose_edges(src, ss, dst, ds, rows, cols, r0, c0);
}

}  // namespace mixtape::cpu
