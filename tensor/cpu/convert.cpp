#include "tensor/cpu/convert.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "tensor/core/dtype.h"
#include "tensor/core/error.h"
#include "tensor/core/rng.h"
#include "tensor/core/rounding_census.h"
#include "tensor/cpu/target_region.h"
#include "tensor/cpu/vector_paths.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define MT_HAVE_X86_PATHS 1
#endif

namespace mixtape::cpu {

namespace {

// ---- the scalar reference: one element at a time through half.h ----------------------------

template <class T>
void load_scalar(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}

template <class T>
void store_scalar(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}

// words[i] = rounding_word(seed, index + i) for i < n (Note [Rounding words] in rng.h): one
// Philox block per four words.
void rounding_words_scalar(uint64_t seed, uint64_t index, uint32_t* words, int64_t n) {
  for (int64_t i = 0; i < n;) {
    const uint64_t j = index + uint64_t(i);
    const PhiloxBlock w = rounding_block(seed, j >> 2);
    for (uint64_t k = j & 3; k < 4 && i < n; ++k) words[i++] = w[k];
  }
}

void draw_rounding_words(uint64_t seed, uint64_t index, uint32_t* words, int64_t n);  // the active path's

// dst[i step] for i < n, element i rounded with the word index + i, drawn kWordChunk at a time.
constexpr int64_t kWordChunk = 512;

template <class T>
void store_stochastic_strided(const float* src, T* dst, int64_t n, uint64_t seed, uint64_t index, int64_t step) {
  uint32_t words[kWordChunk];
  for (int64_t c = 0; c < n; c += kWordChunk) {
    const int64_t m = std::min(kWordChunk, n - c);
    draw_rounding_words(seed, index + uint64_t(c), words, m);
    for (int64_t i = 0; i < m; ++i) {
      if constexpr (std::is_same_v<T, half>) dst[(c + i) * step] = round_to_half_stochastic(src[c + i], words[i]);
      else dst[(c + i) * step] = round_to_bf16_stochastic(src[c + i], words[i]);
    }
  }
}

template <class T>
void store_stochastic_scalar(const float* src, T* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_stochastic_strided(src, dst, n, seed, index, 1);
}

// One path: a function per conversion.
struct ConvertPath {
  const char* name;
  void (*load_half)(const half*, float*, int64_t);
  void (*load_bf16)(const bfloat16*, float*, int64_t);
  void (*store_half)(const float*, half*, int64_t);
  void (*store_bf16)(const float*, bfloat16*, int64_t);
  void (*store_half_sr)(const float*, half*, int64_t, uint64_t, uint64_t);
  void (*store_bf16_sr)(const float*, bfloat16*, int64_t, uint64_t, uint64_t);
  void (*rounding_words)(uint64_t, uint64_t, uint32_t*, int64_t);
};

constexpr ConvertPath kScalarPath{"scalar",
                                  load_scalar<half>,
                                  load_scalar<bfloat16>,
                                  store_scalar<half>,
                                  store_scalar<bfloat16>,
                                  store_stochastic_scalar<half>,
                                  store_stochastic_scalar<bfloat16>,
                                  rounding_words_scalar};

#if MT_HAVE_X86_PATHS

// ---- AVX2 + F16C: eight elements at a time --------------------------------------------------
//
// Note [Vector conversions]
// Each function below computes exactly what the scalar reference computes, lane by lane:
// - f16 -> f32: vcvtph2ps is exact for every finite value and infinity, but it quiets a
//   signalling NaN (sets the top mantissa bit) where half_to_float keeps the payload as it is,
//   so NaN lanes are rebuilt from the bits.
// - f32 -> f16: vcvtps2ph with round-to-nearest-even (immediate 0, not MXCSR) rounds finite
//   values, subnormal results and overflow exactly as float_to_half_rn; it does not consult
//   MXCSR.DAZ/FTZ. NaN lanes become the canonical 0x7FFF, as in the reference (vcvtps2ph would
//   keep sign and payload).
// - bf16 <-> f32 and stochastic rounding: the reference's integer formulas on eight lanes, with
//   the rounding words (Note [Rounding words] in rng.h) of a chunk drawn first, Philox4x32-10
//   for sixteen blocks at once (rounding_words64 below), and read back lane by lane.
// The tests compare every path with the scalar one on all 2^16 16-bit patterns and on about 12
// million floats (ties, subnormals, overflow, NaN), bit for bit (tests/tensor/test_convert.cpp).

// Everything up to cpu_has_avx2 is compiled for AVX2 + F16C + FMA (lambdas included); it runs
// only where cpu_has_avx2() said yes.
MT_TARGET_BEGIN("avx2,f16c,fma")

inline __m256i nan_lanes_f32(__m256i x) {
  return _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
}

// Eight 32-bit lanes holding values < 2^16, as eight uint16 in order.
inline __m128i pack_u16(__m256i v) {
  const __m256i p = _mm256_packus_epi32(v, v);                       // per 128-bit half: lanes 0-3, 0-3
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));  // halves' first quadwords
}

// Eight f16 -> eight f32.
inline void load_half8(const half* src, float* dst) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  __m256 f = _mm256_cvtph_ps(h);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);  // exactly the f16 NaN lanes
  if (!_mm256_testz_ps(nan, nan)) {                      // sign | exponent all ones | payload << 13
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i bits =
        _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16),
                                        _mm256_set1_epi32(0x7F800000)),
                        _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3FF)), 13));
    f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), nan);
  }
  _mm256_storeu_ps(dst, f);
}

// Eight bf16 -> eight f32.
inline void load_bf16_8(const bfloat16* src, float* dst) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}

// Eight f32 -> eight f16, nearest even.
inline void store_half8(const float* src, half* dst) {
  const __m256 f = _mm256_loadu_ps(src);
  __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                        _mm256_extracti128_si256(_mm256_castps_si256(nan), 1));
  h = _mm_blendv_epi8(h, _mm_set1_epi16(0x7FFF), nan16);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
}

// Runs block(src + i, dst + i) over [0, n) in blocks of B elements; the last partial block goes
// through a zero-padded copy, so the tail is converted by the same vector code. (A scalar tail
// here would run SSE instructions right after 256-bit ones, which costs more than the whole
// vector part on short rows.)
template <int B, class S, class D, class Block>
inline void blocks(const S* src, D* dst, int64_t n, Block&& block) {
  int64_t i = 0;
  for (; i + B <= n; i += B) block(src + i, dst + i, i);
  if (i < n) {
    S in[B] = {};
    D out[B];
    std::memcpy(in, src + i, size_t(n - i) * sizeof(S));
    block(in, out, i);
    std::memcpy(dst + i, out, size_t(n - i) * sizeof(D));
  }
}

void load_half_avx2(const half* src, float* dst, int64_t n) {
  blocks<8>(src, dst, n, [](const half* s, float* d, int64_t) { load_half8(s, d); });
}

void load_bf16_avx2(const bfloat16* src, float* dst, int64_t n) {
  blocks<8>(src, dst, n, [](const bfloat16* s, float* d, int64_t) { load_bf16_8(s, d); });
}

void store_half_avx2(const float* src, half* dst, int64_t n) {
  blocks<8>(src, dst, n, [](const float* s, half* d, int64_t) { store_half8(s, d); });
}

// float_to_bf16_rn on eight lanes: (x + 0x7FFF + lsb) >> 16, NaN -> 0x7FFF.
inline __m256i bf16_rn8(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FFF), nan_lanes_f32(x));
}

void store_bf16_avx2(const float* src, bfloat16* dst, int64_t n) {
  blocks<8>(src, dst, n, [](const float* s, bfloat16* d, int64_t) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), pack_u16(bf16_rn8(x)));
  });
}

// The high and low 32 bits of the 64-bit products a * m, lane by lane (m: the same 32-bit
// multiplier in every lane).
inline void mulhilo8(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                        // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, 5, 7
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

// The 64-bit block numbers block + offset[k], k = 0..7, as low and high words.
inline void counters8(uint64_t block, __m256i offset, __m256i& lo, __m256i& hi) {
  const __m256i base = _mm256_set1_epi32(int(uint32_t(block)));
  lo = _mm256_add_epi32(base, offset);
  // A lane whose low word wrapped past 2^32 carries into the high word.
  const __m256i bias = _mm256_set1_epi32(int(0x80000000u));
  const __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(base, bias), _mm256_xor_si256(lo, bias));
  hi = _mm256_sub_epi32(_mm256_set1_epi32(int(uint32_t(block >> 32))), wrapped);
}

// Four vectors of lanes, each lane one block's word 0, 1, 2, 3, as four vectors of the blocks'
// words in order. Within each 128-bit half, lane 4h + q of the input is the block that the
// output vector q takes (the in-lane 4x4 transpose of unpack), so the blocks are laid out in the
// lanes to make each output vector the words of consecutive blocks.
inline void transpose_words(__m256i (&w)[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(w[0], w[1]), t1 = _mm256_unpackhi_epi32(w[0], w[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(w[2], w[3]), t3 = _mm256_unpackhi_epi32(w[2], w[3]);
  w[0] = _mm256_unpacklo_epi64(t0, t2);
  w[1] = _mm256_unpackhi_epi64(t0, t2);
  w[2] = _mm256_unpacklo_epi64(t1, t3);
  w[3] = _mm256_unpackhi_epi64(t1, t3);
}

// words[k] = rounding_word(seed, 4 block + k) for k = 0..63: Philox4x32-10 (rng.h) for the
// sixteen blocks block .. block + 15, eight to a vector. Two independent vectors interleaved
// keep the multipliers busy while each round waits for the previous one. Lane 4h + q of a vector
// holds block 2q + h (transpose_words), so its four outputs are words 8q .. 8q + 7.
inline void rounding_words64(uint64_t seed, uint64_t block, uint32_t* words) {
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  __m256i a[4], b[4];
  counters8(block, order, a[0], a[1]);
  counters8(block + 8, order, b[0], b[1]);
  a[2] = b[2] = _mm256_set1_epi32(1);  // the counter's third word (Note [Rounding words])
  a[3] = b[3] = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32(int(0xD2511F53u)), m1 = _mm256_set1_epi32(int(0xCD9E8D57u));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m256i key0 = _mm256_set1_epi32(int(k0)), key1 = _mm256_set1_epi32(int(k1));
    for (__m256i* c : {a, b}) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(c[0], m0, hi0, lo0);
      mulhilo8(c[2], m1, hi1, lo1);
      c[0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[1]), key0);
      c[2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[3]), key1);
      c[1] = lo1;
      c[3] = lo0;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  transpose_words(a);
  transpose_words(b);
  for (int q = 0; q < 4; ++q) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 8 * q), a[q]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 32 + 8 * q), b[q]);
  }
}

// rounding_words_n on a vector path whose group(seed, block, words) draws the G = 64 or 128
// words of blocks block .. block + G/4 - 1: the words before the first block boundary come from
// the scalar draw, the last partial group is drawn whole into a buffer.
template <int G, class Group>
inline void draw_words(uint64_t seed, uint64_t index, uint32_t* words, int64_t n, Group&& group) {
  int64_t i = std::min(n, int64_t(-index & 3));  // words to the next multiple of 4
  rounding_words_scalar(seed, index, words, i);
  for (; i + G <= n; i += G) group(seed, (index + uint64_t(i)) >> 2, words + i);
  if (i < n) {
    uint32_t tail[G];
    group(seed, (index + uint64_t(i)) >> 2, tail);
    std::memcpy(words + i, tail, size_t(n - i) * sizeof(uint32_t));
  }
}

void rounding_words_avx2(uint64_t seed, uint64_t index, uint32_t* words, int64_t n) {
  draw_words<64>(seed, index, words, n, [](uint64_t s, uint64_t b, uint32_t* w) { rounding_words64(s, b, w); });
}

// store_*_sr on a vector path: the words of up to kWordChunk elements are drawn first (rounded
// up to whole vectors of L, so the zero-padded tail of blocks<L> has words too), then rounded
// L at a time by round(x, r, d).
template <int L, class D, class Round>
inline void store_sr_chunks(const float* src, D* dst, int64_t n, uint64_t seed, uint64_t index,
                            void (*draw)(uint64_t, uint64_t, uint32_t*, int64_t), Round&& round) {
  uint32_t words[kWordChunk];
  for (int64_t c = 0; c < n; c += kWordChunk) {
    const int64_t m = std::min(kWordChunk, n - c);
    draw(seed, index + uint64_t(c), words, (m + L - 1) / L * L);
    blocks<L>(src + c, dst + c, m, [&](const float* s, D* d, int64_t i) { round(s, words + i, d); });
  }
}

// Unsigned a < b on 32-bit lanes.
inline __m256i less_u32(__m256i a, __m256i b) {
  const __m256i bias = _mm256_set1_epi32(int(0x80000000u));
  return _mm256_cmpgt_epi32(_mm256_xor_si256(b, bias), _mm256_xor_si256(a, bias));
}

// float_to_bf16_sr on eight lanes: truncate, add one ulp when (r >> 16) < the dropped 16 bits;
// inf and NaN round to nearest.
inline __m256i bf16_sr8(__m256i x, __m256i r) {
  const __m256i low = _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF));
  const __m256i t = _mm256_srli_epi32(x, 16);
  const __m256i up = _mm256_cmpgt_epi32(low, _mm256_srli_epi32(r, 16));
  const __m256i sr = _mm256_sub_epi32(t, up);  // up is -1 where true
  const __m256i special =
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F7FFFFF));
  return _mm256_blendv_epi8(sr, bf16_rn8(x), special);
}

// float_to_half_sr on eight lanes. With t the magnitude truncated toward zero, the reference
// rounds up when r < frac * 2^32, frac = (|x| - t) / ulp in [0, 1); in integers that threshold is
//   normal half range (|x| >= 2^-14):  the 13 dropped mantissa bits << 19;
//   below it (ulp 2^-24), with e the float exponent and sig the 24-bit significand:
//     |x| 2^24 = sig 2^(e-126), t = sig >> (126-e), threshold = (sig mod 2^(126-e)) 2^(e-94),
//     which for e < 94 is sig >> (94-e) (floored, as the reference's conversion to an integer).
// Variable shifts by 32 or more give 0 (vpsrlvd/vpsllvd), which is what each formula needs.
inline __m256i half_sr8(__m256i x, __m256i r) {
  const __m256i ax = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000));
  const __m256i e = _mm256_srli_epi32(ax, 23);
  const __m256i mant = _mm256_and_si256(ax, _mm256_set1_epi32(0x7FFFFF));
  // normal half range
  const __m256i t_norm =
      _mm256_or_si256(_mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(112)), 10), _mm256_srli_epi32(mant, 13));
  const __m256i thr_norm = _mm256_slli_epi32(_mm256_and_si256(ax, _mm256_set1_epi32(0x1FFF)), 19);
  // subnormal half range
  const __m256i sig = _mm256_or_si256(mant, _mm256_set1_epi32(0x800000));
  const __m256i sh = _mm256_sub_epi32(_mm256_set1_epi32(126), e);
  const __m256i t_sub = _mm256_srlv_epi32(sig, sh);
  const __m256i rem = _mm256_sub_epi32(sig, _mm256_sllv_epi32(t_sub, sh));
  const __m256i e_ge94 = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(93));
  const __m256i thr_sub =
      _mm256_blendv_epi8(_mm256_srlv_epi32(sig, _mm256_sub_epi32(_mm256_set1_epi32(94), e)),
                         _mm256_sllv_epi32(rem, _mm256_sub_epi32(e, _mm256_set1_epi32(94))), e_ge94);
  const __m256i normal = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x387FFFFF));
  const __m256i t = _mm256_blendv_epi8(t_sub, t_norm, normal);
  const __m256i thr = _mm256_blendv_epi8(thr_sub, thr_norm, normal);
  const __m256i up = less_u32(r, thr);
  __m256i h = _mm256_or_si256(sign, _mm256_sub_epi32(t, up));
  // |x| >= 2^16: infinity; inf and NaN: round to nearest (sign | 0x7C00, or 0x7FFF).
  const __m256i big = _mm256_cmpgt_epi32(ax, _mm256_set1_epi32(0x477FFFFF));
  h = _mm256_blendv_epi8(h, _mm256_or_si256(sign, _mm256_set1_epi32(0x7C00)), big);
  return _mm256_blendv_epi8(h, _mm256_set1_epi32(0x7FFF), nan_lanes_f32(x));
}

// Eight f32 -> eight f16 or bf16 rounded stochastically with the words r[0..7].
template <class D>
inline void store_sr8(const float* src, const uint32_t* r, D* dst) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r));
  const __m256i y = std::is_same_v<D, half> ? half_sr8(x, w) : bf16_sr8(x, w);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), pack_u16(y));
}

void store_half_sr_avx2(const float* src, half* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_sr_chunks<8>(src, dst, n, seed, index, rounding_words_avx2,
                     [](const float* s, const uint32_t* r, half* d) { store_sr8(s, r, d); });
}

void store_bf16_sr_avx2(const float* src, bfloat16* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_sr_chunks<8>(src, dst, n, seed, index, rounding_words_avx2,
                     [](const float* s, const uint32_t* r, bfloat16* d) { store_sr8(s, r, d); });
}

constexpr ConvertPath kAvx2Path{"avx2",          load_half_avx2,     load_bf16_avx2,     store_half_avx2,
                                store_bf16_avx2, store_half_sr_avx2, store_bf16_sr_avx2, rounding_words_avx2};

MT_TARGET_END

bool cpu_has_avx2() {
  __builtin_cpu_init();
  // F16C is CPUID leaf 1, ECX bit 29, asked directly: clang before 16 has no "f16c" in
  // __builtin_cpu_supports. (Its "avx2" already checks that the OS saves the YMM registers.)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

// ---- AVX-512 (F, BW, VL): sixteen elements at a time ----------------------------------------
// The same formulas as the AVX2 path (Note [Vector conversions]) on sixteen lanes: the EVEX forms
// of vcvtph2ps and vcvtps2ph round as the VEX ones do, with the NaN lanes rebuilt from the bits.
// The rounding words (store_*_sr, rounding_words_n) are drawn sixteen blocks to a vector, two
// vectors at a time (rounding_words128), and rounded sixteen lanes at a time.
// The helpers blocks, draw_words and store_sr_chunks are compiled for AVX2 where they are defined,
// so they cannot inline the AVX-512 lambdas they are given; each function below is [[gnu::flatten]]
// to inline them, lambdas included, into its own AVX-512 body instead of a call per vector.
MT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx2,f16c,fma")

[[gnu::flatten]] void load_half_avx512(const half* src, float* dst, int64_t n) {
  blocks<16>(src, dst, n, [](const half* s, float* d, int64_t) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    __m512 f = _mm512_cvtph_ps(h);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);  // exactly the f16 NaN lanes
    if (nan) {                                                     // sign | exponent all ones | payload << 13
      const __m512i h32 = _mm512_cvtepu16_epi32(h);
      const __m512i sign = _mm512_maskz_slli_epi32(0xFFFF, _mm512_and_si512(h32, _mm512_set1_epi32(0x8000)), 16);
      const __m512i payload = _mm512_maskz_slli_epi32(0xFFFF, _mm512_and_si512(h32, _mm512_set1_epi32(0x3FF)), 13);
      const __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, _mm512_set1_epi32(0x7F800000)), payload);
      f = _mm512_mask_blend_ps(nan, f, _mm512_castsi512_ps(bits));
    }
    _mm512_storeu_ps(d, f);
  });
}

[[gnu::flatten]] void load_bf16_avx512(const bfloat16* src, float* dst, int64_t n) {
  blocks<16>(src, dst, n, [](const bfloat16* s, float* d, int64_t) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    _mm512_storeu_si512(d, _mm512_maskz_slli_epi32(0xFFFF, _mm512_cvtepu16_epi32(b), 16));
  });
}

[[gnu::flatten]] void store_half_avx512(const float* src, half* dst, int64_t n) {
  blocks<16>(src, dst, n, [](const float* s, half* d, int64_t) {
    const __m512 f = _mm512_loadu_ps(s);
    const __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_mask_blend_epi16(nan, h, _mm256_set1_epi16(0x7FFF)));
  });
}

// float_to_bf16_rn on sixteen lanes: (x + 0x7FFF + lsb) >> 16, NaN -> 0x7FFF.
[[gnu::flatten]] void store_bf16_avx512(const float* src, bfloat16* dst, int64_t n) {
  blocks<16>(src, dst, n, [](const float* s, bfloat16* d, int64_t) {
    const __m512i x = _mm512_loadu_si512(s);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_set1_epi32(0x7FFF));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm512_cvtepi32_epi16(r));
  });
}

// mulhilo8 on sixteen lanes: the high and low words of a * m, lane by lane.
inline void mulhilo16(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, m);                        // lanes 0, 2, ..., 14
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);  // lanes 1, 3, ..., 15
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// The 64-bit block numbers block + offset[k], k = 0..15, as low and high words.
inline void counters16(uint64_t block, __m512i offset, __m512i& lo, __m512i& hi) {
  const __m512i base = _mm512_set1_epi32(int(uint32_t(block)));
  lo = _mm512_add_epi32(base, offset);
  // A lane whose low word wrapped past 2^32 carries into the high word.
  const __mmask16 wrapped = _mm512_cmplt_epu32_mask(lo, base);
  hi = _mm512_set1_epi32(int(uint32_t(block >> 32)));
  hi = _mm512_mask_add_epi32(hi, wrapped, hi, _mm512_set1_epi32(1));
}

// transpose_words on sixteen lanes: lane 4h + q of the input is the block of output vector q.
inline void transpose_words(__m512i (&w)[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(w[0], w[1]), t1 = _mm512_unpackhi_epi32(w[0], w[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(w[2], w[3]), t3 = _mm512_unpackhi_epi32(w[2], w[3]);
  w[0] = _mm512_unpacklo_epi64(t0, t2);
  w[1] = _mm512_unpackhi_epi64(t0, t2);
  w[2] = _mm512_unpacklo_epi64(t1, t3);
  w[3] = _mm512_unpackhi_epi64(t1, t3);
}

// words[k] = rounding_word(seed, 4 block + k) for k = 0..127: rounding_words64 on sixteen lanes,
// blocks block .. block + 31. Lane 4h + q of a vector holds block 4q + h, so its four outputs are
// words 16q .. 16q + 15. The two xors of a round are one vpternlogd.
inline void rounding_words128(uint64_t seed, uint64_t block, uint32_t* words) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i a[4], b[4];
  counters16(block, order, a[0], a[1]);
  counters16(block + 16, order, b[0], b[1]);
  a[2] = b[2] = _mm512_set1_epi32(1);  // the counter's third word (Note [Rounding words])
  a[3] = b[3] = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi32(int(k0)), key1 = _mm512_set1_epi32(int(k1));
    for (__m512i* c : {a, b}) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo16(c[0], m0, hi0, lo0);
      mulhilo16(c[2], m1, hi1, lo1);
      c[0] = _mm512_ternarylogic_epi32(hi1, c[1], key0, 0x96);  // hi1 ^ c1 ^ key0
      c[2] = _mm512_ternarylogic_epi32(hi0, c[3], key1, 0x96);
      c[1] = lo1;
      c[3] = lo0;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  transpose_words(a);
  transpose_words(b);
  for (int q = 0; q < 4; ++q) {
    _mm512_storeu_si512(words + 16 * q, a[q]);
    _mm512_storeu_si512(words + 64 + 16 * q, b[q]);
  }
}

[[gnu::flatten]] void rounding_words_avx512(uint64_t seed, uint64_t index, uint32_t* words, int64_t n) {
  draw_words<128>(seed, index, words, n, [](uint64_t s, uint64_t b, uint32_t* w) { rounding_words128(s, b, w); });
}

// float_to_bf16_sr on sixteen lanes (bf16_sr8).
inline void store_bf16_sr16(const float* src, const uint32_t* r, bfloat16* dst) {
  const __m512i x = _mm512_loadu_si512(src);
  const __m512i low = _mm512_and_si512(x, _mm512_set1_epi32(0xFFFF));
  const __mmask16 up = _mm512_cmpgt_epu32_mask(low, _mm512_srli_epi32(_mm512_loadu_si512(r), 16));
  const __m512i t = _mm512_srli_epi32(x, 16);
  __m512i y = _mm512_mask_add_epi32(t, up, t, _mm512_set1_epi32(1));
  // inf and NaN round to nearest: sign | 0x7F80, or 0x7FFF
  const __m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
  y = _mm512_mask_mov_epi32(y, _mm512_cmpgt_epu32_mask(ax, _mm512_set1_epi32(0x7F7FFFFF)), t);
  y = _mm512_mask_mov_epi32(y, _mm512_cmpgt_epu32_mask(ax, _mm512_set1_epi32(0x7F800000)), _mm512_set1_epi32(0x7FFF));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(y));
}

// float_to_half_sr on sixteen lanes: half_sr8's formulas, with masks for its comparisons.
inline void store_half_sr16(const float* src, const uint32_t* r, half* dst) {
  const __m512i x = _mm512_loadu_si512(src);
  const __m512i ax = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x8000));
  const __m512i e = _mm512_srli_epi32(ax, 23);
  const __m512i mant = _mm512_and_si512(ax, _mm512_set1_epi32(0x7FFFFF));
  // normal half range
  const __m512i t_norm =
      _mm512_or_si512(_mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(112)), 10), _mm512_srli_epi32(mant, 13));
  const __m512i thr_norm = _mm512_slli_epi32(_mm512_and_si512(ax, _mm512_set1_epi32(0x1FFF)), 19);
  // subnormal half range
  const __m512i sig = _mm512_or_si512(mant, _mm512_set1_epi32(0x800000));
  const __m512i sh = _mm512_sub_epi32(_mm512_set1_epi32(126), e);
  const __m512i t_sub = _mm512_srlv_epi32(sig, sh);
  const __m512i rem = _mm512_sub_epi32(sig, _mm512_sllv_epi32(t_sub, sh));
  const __mmask16 e_ge94 = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(93));
  const __m512i thr_sub =
      _mm512_mask_blend_epi32(e_ge94, _mm512_srlv_epi32(sig, _mm512_sub_epi32(_mm512_set1_epi32(94), e)),
                              _mm512_sllv_epi32(rem, _mm512_sub_epi32(e, _mm512_set1_epi32(94))));
  const __mmask16 normal = _mm512_cmpgt_epi32_mask(ax, _mm512_set1_epi32(0x387FFFFF));
  __m512i t = _mm512_mask_blend_epi32(normal, t_sub, t_norm);
  const __m512i thr = _mm512_mask_blend_epi32(normal, thr_sub, thr_norm);
  const __mmask16 up = _mm512_cmplt_epu32_mask(_mm512_loadu_si512(r), thr);
  t = _mm512_mask_add_epi32(t, up, t, _mm512_set1_epi32(1));
  __m512i h = _mm512_or_si512(sign, t);
  // |x| >= 2^16: infinity; inf and NaN: round to nearest (sign | 0x7C00, or 0x7FFF).
  h = _mm512_mask_mov_epi32(h, _mm512_cmpgt_epi32_mask(ax, _mm512_set1_epi32(0x477FFFFF)),
                            _mm512_or_si512(sign, _mm512_set1_epi32(0x7C00)));
  h = _mm512_mask_mov_epi32(h, _mm512_cmpgt_epi32_mask(ax, _mm512_set1_epi32(0x7F800000)), _mm512_set1_epi32(0x7FFF));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(h));
}

[[gnu::flatten]] void store_half_sr_avx512(const float* src, half* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_sr_chunks<16>(src, dst, n, seed, index, rounding_words_avx512,
                      [](const float* s, const uint32_t* r, half* d) { store_half_sr16(s, r, d); });
}

[[gnu::flatten]] void store_bf16_sr_avx512(const float* src, bfloat16* dst, int64_t n, uint64_t seed, uint64_t index) {
  store_sr_chunks<16>(src, dst, n, seed, index, rounding_words_avx512,
                      [](const float* s, const uint32_t* r, bfloat16* d) { store_bf16_sr16(s, r, d); });
}

constexpr ConvertPath kAvx512Path{"avx512",          load_half_avx512,     load_bf16_avx512,     store_half_avx512,
                                  store_bf16_avx512, store_half_sr_avx512, store_bf16_sr_avx512, rounding_words_avx512};

MT_TARGET_END

bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

#endif  // MT_HAVE_X86_PATHS

// The paths this CPU can run, the reference first and the preferred one last.
VectorPaths<ConvertPath>& paths() {
  static VectorPaths<ConvertPath> table("conversion", [] {
    std::vector<const ConvertPath*> p{&kScalarPath};
#if MT_HAVE_X86_PATHS
    if (cpu_has_avx2()) p.push_back(&kAvx2Path);
    if (cpu_has_avx512()) p.push_back(&kAvx512Path);
#endif
    return p;
  }());
  return table;
}

const ConvertPath& path() { return paths().active(); }

void draw_rounding_words(uint64_t seed, uint64_t index, uint32_t* words, int64_t n) {
  path().rounding_words(seed, index, words, n);
}

}  // namespace

void load_n(const half* src, float* dst, int64_t n) { path().load_half(src, dst, n); }
void load_n(const bfloat16* src, float* dst, int64_t n) { path().load_bf16(src, dst, n); }

// While a RoundingCensus is open the scalar stores count what they round (store<T>).
void store_n(const float* src, half* dst, int64_t n) {
  if (RoundingCensus::is_open()) [[unlikely]]
    store_scalar(src, dst, n);
  else path().store_half(src, dst, n);
}
void store_n(const float* src, bfloat16* dst, int64_t n) {
  if (RoundingCensus::is_open()) [[unlikely]]
    store_scalar(src, dst, n);
  else path().store_bf16(src, dst, n);
}

void store_stochastic_n(const float* src, half* dst, int64_t n, uint64_t seed, uint64_t index) {
  path().store_half_sr(src, dst, n, seed, index);
}
void store_stochastic_n(const float* src, bfloat16* dst, int64_t n, uint64_t seed, uint64_t index) {
  path().store_bf16_sr(src, dst, n, seed, index);
}

void store_stochastic_row(const float* v, half* p, int64_t step, int64_t len, uint64_t seed, uint64_t index) {
  if (step == 1) store_stochastic_n(v, p, len, seed, index);
  else store_stochastic_strided(v, p, len, seed, index, step);
}
void store_stochastic_row(const float* v, bfloat16* p, int64_t step, int64_t len, uint64_t seed, uint64_t index) {
  if (step == 1) store_stochastic_n(v, p, len, seed, index);
  else store_stochastic_strided(v, p, len, seed, index, step);
}

void rounding_words_n(uint64_t seed, uint64_t index, uint32_t* words, int64_t n) {
  path().rounding_words(seed, index, words, n);
}

void load_n(const float* src, float* dst, int64_t n) {
  if (n > 0 && src != dst) std::memcpy(dst, src, size_t(n) * sizeof(float));
}
void store_n(const float* src, float* dst, int64_t n) { load_n(src, dst, n); }

const char* conversion_path() { return path().name; }

// Asked by the vector kernels of other files, some once per row chunk: a pointer comparison.
bool avx512_path_active() {
#if MT_HAVE_X86_PATHS
  return &path() == &kAvx512Path;
#else
  return false;
#endif
}

std::vector<std::string> conversion_paths() { return paths().names(); }

void set_conversion_path(std::string_view name) { paths().select(name, "set_conversion_path"); }

}  // namespace mixtape::cpu
