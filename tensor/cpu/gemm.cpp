// Note [Own GEMM]
// Every f32, f16 and bf16 GEMM of the CPU backend (matmul, and conv through im2col) runs here.
// Its arithmetic is defined element by element (GemmArith in gemm.h), not left to a library:
//   - fma_f32 (f32 and f16 operands): each c[i][j] is one chain of fp32 FMAs in k order. A 16-bit
//     operand is widened to f32 while its panel is packed (an f16 B with contiguous rows: as the
//     tile loads it), so no conversion pass precedes the call.
//   - dot_bf16 (bf16 operands): the chain of AVX512_BF16's vdpbf16ps, two products per step
//     (odd element first), fp32 accumulation, subnormal operands and results flushed to zero.
//     On a CPU with the instruction it runs at twice the rate of an f32 FMA; elsewhere the same
//     sequence is computed with FMAs. The flushes touch only values below 2^-126, where a bf16
//     gradient has long lost its meaning; they also mean that a loss scale commutes with a bf16
//     GEMM only above that range.
// Because each element's sequence is fixed, the scalar reference below, the AVX2 path and the
// AVX-512 paths compute the same bits, a NaN's payload aside (tests/tensor/test_gemm.cpp
// compares them on every shape class and on ties, subnormals, inf and NaN), and the blocks of gemm_blocks.h make the result
// independent of the thread count. The hardware's vdpbf16ps was checked against the reference's
// formula on 32 million random lanes (an AMD Zen 5 CPU): the same bits in every lane.
//
// The vector paths pack panels of A and B and run register tiles over them (gemm_tiles.inc);
// the reference is three loops.
//
// Note [8-bit GEMM operands]
// An 8-bit operand (dtype e4m3, e5m2, e3m2, e2m3 or e2m1: one code a byte, Note [Eight-bit
// formats] in fp8.h) stands for the matrix whose element (r, c) is to_float(code) * s, the fp32
// product of its code's value and the scale s of its block (GemmScales in gemm.h; s = 1 without
// scales). It enters either arithmetic: dot_bf16 against a bf16 or another 8-bit operand,
// fma_f32 against an f32 or f16 one.
//   - Widening is exact. A code's value has at most 4 significant bits (e4m3, e2m3: 1 + 3
//     mantissa bits), and so has its product with a power of two: a bf16 value (8 bits) as long
//     as it stays in the normal range. So the packed panels hold exactly the values a bf16 (or
//     f32) operand holding the scaled values would give, and the GEMM computes GemmArith's
//     formulas on them: the same bits as that GEMM, on every path (tests/tensor/test_gemm_8bit.cpp).
//     Past the range the product is what fp32 makes of it: inf above, and below 2^-126 a value
//     dot_bf16 reads as zero (its daz, as for a bf16 operand) or fma_f32 as an fp32 subnormal.
//   - Where the scales are applied: while the panels are packed, as a 16-bit operand is widened
//     there (no pass dequantizes the whole operand first). Each code is looked up in its format's
//     table of 256 values (code_table, built once from to_float), multiplied by its block's scale,
//     which the packing takes once per run of a block's elements (never a division per element),
//     and packed as bf16 pairs with daz (dot_bf16) or as f32 (fma_f32). Runs of contiguous codes
//     are widened by vectors (CodeWidener: AVX-512 looks the table up with vpermi2w, AVX2
//     computes the same bits from the code's fields, checked against the table as it is built);
//     strided codes one by one. The reference decodes element by element with to_float and the
//     scale formula into an f32 matrix, then runs its three loops: it is the definition the
//     vector paths are tested against.
//   - Block scales must have at most 4 significant bits: powers of two, or the E4M3 values of
//     two-level (NVFP4) scales (Note [Two-level scales] in scale_formulas.h, whose zero makes the
//     block zeros), or NaN, which makes the block NaN; MT_ASSERT checks each block's scale as the packing meets it. Times a code's
//     value (at most 4 bits) that is at most 8 bits, a bf16. Any other scale would round the
//     widened value, and where it rounds (bf16 or f32, before or after the product) would change
//     the result. A
//     scale that factors out of the whole dot product (per tensor, per row of A, per column of B)
//     need not be one: the caller applies it to the fp32 output instead (scaled_gemm_epilogue in
//     tensor/cpu/quantize.h), once per element of C rather than once per product.
#include "tensor/cpu/gemm.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/core/error.h"
#include "tensor/core/fp8.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm_blocks.h"
#include "tensor/cpu/target_region.h"
#include "tensor/cpu/vector_paths.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define MT_HAVE_X86_PATHS 1
#endif

namespace mixtape::cpu {

GemmArith gemm_arith_for(DType dtype) {
  return dtype == DType::bf16 || is_8bit(dtype) ? GemmArith::dot_bf16 : GemmArith::fma_f32;
}

GemmArith gemm_arith_for(DType a, DType b) {
  return gemm_arith_for(a) == GemmArith::dot_bf16 && gemm_arith_for(b) == GemmArith::dot_bf16 ? GemmArith::dot_bf16
                                                                                              : GemmArith::fma_f32;
}

namespace {

// Calls f.template operator()<T>() with the C++ type of a 16- or 32-bit GEMM operand's dtype (an
// 8-bit operand is widened before: Note [8-bit GEMM operands]).
template <class F>
void dispatch_gemm_operand(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f16: f.template operator()<half>(); return;
    case DType::bf16: f.template operator()<bfloat16>(); return;
    default: MT_CHECK(false, "gemm: operands must be f32, f16, bf16 or 8-bit, got ", dtype_name(dtype));
  }
}

// ---- 8-bit operands (Note [8-bit GEMM operands]) -----------------------------------------------

// Whether s is a block scale the widening keeps exact: a positive finite value of at most 4
// significant bits (a power of two, normal or subnormal, or an E4M3 value), +0 (a two-level
// block whose E4M3 scale rounded to zero: Note [Two-level scales]), or a NaN.
bool exact_block_scale(float s) {
  const uint32_t b = std::bit_cast<uint32_t>(s), e = b >> 23, m = b & 0x7FFFFFu;  // e holds the sign too
  if ((b & 0x7FFFFFFFu) > 0x7F800000u || b == 0) return true;
  if (e >= 255) return false;                       // negative, or inf
  const uint32_t sig = e == 0 ? m : m | 0x800000u;  // the significand's bits
  return std::bit_width(sig) - std::countr_zero(sig) <= 4;
}

// The scale of X's logical element (r, c): GemmScales's formula, 1 without scales.
float block_scale(const GemmScales& g, int64_t r, int64_t c) {
  return g.s ? g.s[((r + g.r0) / g.br) * g.srs + ((c + g.c0) / g.bc) * g.scs] : 1.0f;
}

// The values of an 8-bit format's 256 codes (to_float), as floats and as bf16 bits: exact, every
// value having at most 4 significant bits and lying in bf16's normal range. A NaN code is the
// quiet NaN 0x7FC00000 (bf16 0x7FC0). `narrow`: the format has at most 6 bits, so the table
// repeats every 64 codes (to_float ignores the bits above the format's width).
struct CodeTable {
  alignas(64) uint16_t bf16[256];
  alignas(64) float value[256];
  bool narrow;
  // The same bf16 bits from the code's fields, for vectors without a 256-entry lookup (AVX2;
  // bf16_from_fields is the formula): with m the code's magnitude,
  //   m < min_normal (a subnormal or zero): sub_hi[m] << 8 | sub_lo[m]; else, the exponent
  //   rebiased: (m << man_shift) + exp_offset; m == inf_mag: inf (0x7F80); | the sign, moved to
  //   bit 15 by code << sign_shift (the bits above the format's width go past it); m >= nan_from:
  //   0x7FC0. (inf_mag, nan_from: 0x100 when the format has none.)
  struct Fields {
    uint16_t mag_mask, man_shift, exp_offset, min_normal, inf_mag, nan_from, sign_shift;
    uint8_t sub_lo[16], sub_hi[16];
  } fields;
};

uint16_t bf16_from_fields(uint8_t code, const CodeTable::Fields& f) {
  const uint32_t m = code & f.mag_mask;
  uint32_t w = m < f.min_normal ? uint32_t(f.sub_hi[m]) << 8 | f.sub_lo[m] : (m << f.man_shift) + f.exp_offset;
  if (m == f.inf_mag) w = 0x7F80u;
  w |= (uint32_t(code) << f.sign_shift) & 0x8000u;
  return uint16_t(m >= f.nan_from ? 0x7FC0u : w);
}

CodeTable make_code_table(const bits8::Format& f) {
  CodeTable t{};
  for (int c = 0; c < 256; ++c) {
    const float v = bits8::to_float(uint8_t(c), f);
    t.value[c] = std::isnan(v) ? std::bit_cast<float>(0x7FC00000u) : v;
    t.bf16[c] = uint16_t(std::bit_cast<uint32_t>(t.value[c]) >> 16);
  }
  t.narrow = bits8::bit_width(f) <= 6;
  CodeTable::Fields& d = t.fields;
  d.mag_mask = uint16_t(bits8::magnitude_mask(f));
  d.man_shift = uint16_t(7 - f.man_bits);
  d.exp_offset = uint16_t((127 - f.bias) << 7);
  d.min_normal = uint16_t(1u << f.man_bits);
  const bool ieee = f.specials == bits8::Specials::ieee;  // after max: inf, then NaNs (else NaN, or nothing)
  d.inf_mag = ieee ? uint16_t(bits8::max_code(f) + 1u) : 0x100;
  d.nan_from = f.specials == bits8::Specials::none ? 0x100 : uint16_t(bits8::max_code(f) + (ieee ? 2u : 1u));
  d.sign_shift = uint16_t(16 - bits8::bit_width(f));  // the sign, bit width - 1, to bit 15
  for (uint32_t m = 0; m < d.min_normal; ++m) {
    d.sub_lo[m] = uint8_t(t.bf16[m]);
    d.sub_hi[m] = uint8_t(t.bf16[m] >> 8);
  }
  for (int c = 0; c < 256; ++c)
    MT_ASSERT(bf16_from_fields(uint8_t(c), d) == t.bf16[c], "gemm: the fields of ", f.name, " miss code ", c);
  MT_ASSERT(t.bf16[0] == 0, "gemm: code 0 of ", f.name, " is not +0");  // CodeWidener (AVX2) relies on it
  return t;
}

const CodeTable& code_table(DType dtype) {
  static const CodeTable e4m3 = make_code_table(bits8::kE4M3), e5m2 = make_code_table(bits8::kE5M2),
                         e3m2 = make_code_table(bits8::kE3M2), e2m3 = make_code_table(bits8::kE2M3),
                         e2m1 = make_code_table(bits8::kE2M1);
  switch (dtype) {
    case DType::e4m3: return e4m3;
    case DType::e5m2: return e5m2;
    case DType::e3m2: return e3m2;
    case DType::e2m3: return e2m3;
    case DType::e2m1: return e2m1;
    default: break;
  }
  MT_CHECK(false, "gemm: ", dtype_name(dtype), " is not an 8-bit dtype");
  return e4m3;
}

// Code c widened in a block of scale s, as the packing stores it: an f32 (fma_f32), or bf16 bits
// (dot_bf16), the f32 value's top half, read as a zero of its sign below 2^-126 (daz).
inline float widen_code(const CodeTable& t, uint8_t c, float s) { return t.value[c] * s; }
inline uint16_t widen_code_bf16(const CodeTable& t, uint8_t c, float s) {
  const uint32_t b = std::bit_cast<uint32_t>(widen_code(t, c, s));
  return uint16_t((b & 0x7F800000u) == 0 ? (b >> 16) & 0x8000u : b >> 16);
}

// ---- the scalar reference: GemmArith's formulas, one element at a time ------------------------

float flush_subnormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

template <class TA, class TB>
void reference_block(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B,
                     bool accumulate, float* C, int64_t ldc) {
  const TA* a = static_cast<const TA*>(A.p);
  const TB* b = static_cast<const TB*>(B.p);
  auto av = [&](int64_t i, int64_t k) { return float(load(a[i * A.rs + k * A.cs])); };
  auto bv = [&](int64_t k, int64_t j) { return float(load(b[k * B.rs + j * B.cs])); };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = accumulate ? C[i * ldc + j] : 0.0f;
      if (arith == GemmArith::fma_f32) {
        for (int64_t k = 0; k < K; ++k) acc = std::fma(av(i, k), bv(k, j), acc);
      } else {
        acc = flush_subnormal(acc);
        for (int64_t k = 0; k < K; k += 2) {
          const float a1 = k + 1 < K ? flush_subnormal(av(i, k + 1)) : 0.0f;
          const float b1 = k + 1 < K ? flush_subnormal(bv(k + 1, j)) : 0.0f;
          acc = flush_subnormal(std::fma(a1, b1, acc));
          acc = flush_subnormal(std::fma(flush_subnormal(av(i, k)), flush_subnormal(bv(k, j)), acc));
        }
      }
      C[i * ldc + j] = acc;
    }
}

// An 8-bit operand's [rows, cols] elements by their definition (Note [8-bit GEMM operands]),
// to_float(code) * scale one element at a time, as an f32 operand (in buf) holding those values;
// any other operand as it is.
GemmOperand decoded(const GemmOperand& x, int64_t rows, int64_t cols, std::vector<float>& buf) {
  if (!is_8bit(x.dtype)) return x;
  const bits8::Format& f = format_of(x.dtype);
  const auto* codes = static_cast<const uint8_t*>(x.p);
  buf.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      buf[size_t(r * cols + c)] = bits8::to_float(codes[r * x.rs + c * x.cs], f) * block_scale(x.scales, r, c);
  return {DType::f32, buf.data(), cols, 1};
}

void scalar_block(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A8, const GemmOperand& B8,
                  bool accumulate, float* C, int64_t ldc) {
  std::vector<float> a_values, b_values;
  const GemmOperand A = decoded(A8, M, K, a_values), B = decoded(B8, K, N, b_values);
  dispatch_gemm_operand(A.dtype, [&]<class TA>() {
    dispatch_gemm_operand(B.dtype,
                          [&]<class TB>() { reference_block<TA, TB>(arith, M, N, K, A, B, accumulate, C, ldc); });
  });
}

using BlockFn = void (*)(GemmArith, int64_t, int64_t, int64_t, const GemmOperand&, const GemmOperand&, bool, float*,
                         int64_t);
using PackBFn = void (*)(GemmArith, int64_t, int64_t, const GemmOperand&, std::vector<float>&, std::vector<uint32_t>&);
using BlockPackedFn = void (*)(GemmArith, int64_t, int64_t, int64_t, const GemmOperand&, const GemmOperand&,
                               const std::vector<float>&, const std::vector<uint32_t>&, bool, float*, int64_t);

struct GemmPath {
  const char* name;
  BlockFn block;
  PackBFn pack_b;              // PackedB's panels
  BlockPackedFn block_packed;  // block() over them
};

// The reference packs nothing: it reads B in place.
void scalar_pack_b(GemmArith, int64_t, int64_t, const GemmOperand&, std::vector<float>&, std::vector<uint32_t>&) {}

void scalar_block_packed(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B,
                         const std::vector<float>&, const std::vector<uint32_t>&, bool accumulate, float* C,
                         int64_t ldc) {
  scalar_block(arith, M, N, K, A, B, accumulate, C, ldc);
}

constexpr GemmPath kScalarPath{"scalar", scalar_block, scalar_pack_b, scalar_block_packed};

#if MT_HAVE_X86_PATHS

// ---- AVX2 + FMA: tiles of 8-lane vectors -------------------------------------------------------
// Everything in this region is compiled for AVX2 + F16C + FMA and runs only where the CPU has them.
MT_TARGET_BEGIN("avx2,f16c,fma")

namespace avx2 {

struct Ops {
  using V = __m256;
  using I = __m256i;
  static constexpr int W = 8;
  static constexpr int kMR = 6, kNV = 2;        // fma_f32: 12 accumulators
  static constexpr int kDotMR = 4, kDotNV = 2;  // dot_bf16 (emulated): 8 accumulators, 4 split B vectors
  static constexpr bool kNativeDot = false;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_half(const half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V ftz(V x) {
    const V sign = _mm256_set1_ps(-0.0f);
    const V tiny = _mm256_cmp_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_blendv_ps(x, _mm256_and_ps(x, sign), tiny);  // |x| < 2^-126: keep the sign only
  }
  static I load_i(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I bcast_i(const uint32_t* p) { return _mm256_set1_epi32(int(*p)); }
  static V pair_hi(I x) { return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(int(0xFFFF0000u)))); }
  static V pair_lo(I x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
  static V dot(V acc, I, I) { return acc; }  // not used: kNativeDot is false
  // Widens 8-bit codes 16 at a time, their bf16 bits computed from their fields (CodeTable::Fields:
  // the subnormals through a vpshufb of 16 entries).
  struct CodeWidener {
    I mag_mask, exp_offset, min_normal, inf_mag, nan_above, sub_lo, sub_hi;
    __m128i man_shift, sign_shift;
    explicit CodeWidener(const CodeTable& t) {
      const CodeTable::Fields& f = t.fields;
      mag_mask = _mm256_set1_epi16(int16_t(f.mag_mask));
      exp_offset = _mm256_set1_epi16(int16_t(f.exp_offset));
      min_normal = _mm256_set1_epi16(int16_t(f.min_normal));
      inf_mag = _mm256_set1_epi16(int16_t(f.inf_mag));
      nan_above = _mm256_set1_epi16(int16_t(f.nan_from - 1));
      sub_lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f.sub_lo)));
      sub_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(f.sub_hi)));
      man_shift = _mm_cvtsi32_si128(f.man_shift);
      sign_shift = _mm_cvtsi32_si128(f.sign_shift);
    }
    // bf16_from_fields on 16 codes (16-bit lanes).
    I bf16_of(__m128i codes) const {
      const I c = _mm256_cvtepu8_epi16(codes), m = _mm256_and_si256(c, mag_mask);
      const I normal = _mm256_add_epi16(_mm256_sll_epi16(m, man_shift), exp_offset);
      // vpshufb looks up each byte of m: the high byte (0) finds entry 0, +0, so a lane reads sub[m].
      const I sub =
          _mm256_or_si256(_mm256_shuffle_epi8(sub_lo, m), _mm256_slli_epi16(_mm256_shuffle_epi8(sub_hi, m), 8));
      I w = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi16(min_normal, m));
      w = _mm256_blendv_epi8(w, _mm256_set1_epi16(0x7F80), _mm256_cmpeq_epi16(m, inf_mag));
      w = _mm256_or_si256(w, _mm256_and_si256(_mm256_sll_epi16(c, sign_shift), _mm256_set1_epi16(int16_t(0x8000))));
      return _mm256_blendv_epi8(w, _mm256_set1_epi16(0x7FC0), _mm256_cmpgt_epi16(m, nan_above));
    }
    // Calls f(bits, i, k) for the codes [i, i + k) of p[0 .. n), 16 at a time (k < 16: the last).
    template <class F>
    void each16(const uint8_t* p, int64_t n, F&& f) const {
      for (int64_t i = 0; i < n; i += 16) {
        const int64_t k = std::min<int64_t>(16, n - i);
        alignas(16) uint8_t part[16] = {};
        if (k < 16) std::memcpy(part, p + i, size_t(k));
        f(bf16_of(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k < 16 ? part : p + i))), i, k);
      }
    }
    // widen_code for n codes: the values from their bf16 bits (exact), times s.
    void to_f32(const uint8_t* p, int64_t n, float s, float* out) const {
      const V sv = _mm256_set1_ps(s);
      each16(p, n, [&](I w, int64_t i, int64_t k) {
        alignas(32) float part[16];
        float* d = k < 16 ? part : out + i;
        for (int h = 0; h < 2; ++h) {
          const __m128i half_w = h ? _mm256_extracti128_si256(w, 1) : _mm256_castsi256_si128(w);
          const I bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(half_w), 16);
          _mm256_storeu_ps(d + 8 * h, _mm256_mul_ps(_mm256_castsi256_ps(bits), sv));
        }
        if (k < 16) std::memcpy(out + i, part, size_t(k) * sizeof(float));
      });
    }
    // widen_code_bf16 for n codes: each 32-bit lane holds two values (a bf16 pair), each multiplied
    // by s as an f32, flushed below 2^-126 and cut back to its top half.
    void to_bf16(const uint8_t* p, int64_t n, float s, uint16_t* out) const {
      const V sv = _mm256_set1_ps(s);
      const I top = _mm256_set1_epi32(int(0xFFFF0000u));
      each16(p, n, [&](I w, int64_t i, int64_t k) {
        if (s != 1.0f) {  // (the values are normal: times 1 they stay)
          const V hi = ftz(_mm256_mul_ps(pair_hi(w), sv)), lo = ftz(_mm256_mul_ps(pair_lo(w), sv));
          w = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(hi), top),
                              _mm256_srli_epi32(_mm256_castps_si256(lo), 16));
        }
        if (k == 16) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), w);
        } else {
          alignas(32) uint16_t part[16];
          _mm256_store_si256(reinterpret_cast<__m256i*>(part), w);
          std::memcpy(out + i, part, size_t(k) * sizeof(uint16_t));
        }
      });
    }
  };
};

#include "tensor/cpu/gemm_tiles.inc"

}  // namespace avx2

MT_TARGET_END

// ---- AVX-512: tiles of 16-lane vectors, with and without AVX512_BF16 ----------------------------
MT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512bf16,avx2,f16c,fma")

struct Avx512Ops {
  using V = __m512;
  using I = __m512i;
  static constexpr int W = 16;
  static constexpr int kMR = 8, kNV = 2;        // fma_f32: 16 accumulators of 32 registers
  static constexpr int kDotMR = 8, kDotNV = 2;  // dot_bf16
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_half(const half* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V bcast(const float* p) { return _mm512_set1_ps(*p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V ftz(V x) {
    const __mmask16 tiny =
        _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0x1p-126f), _CMP_LT_OQ);  // |x| < 2^-126: keep the sign
    const __m512i bits = _mm512_castps_si512(x);
    return _mm512_castsi512_ps(_mm512_mask_and_epi32(bits, tiny, bits, _mm512_set1_epi32(int(0x80000000u))));
  }
  static I load_i(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static I bcast_i(const uint32_t* p) { return _mm512_set1_epi32(int(*p)); }
  static V pair_hi(I x) { return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xFFFF0000u)))); }
  static V pair_lo(I x) {  // (maskz: GCC 12 warns about the undefined source of the plain form)
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xFFFF), x, 16));
  }

  // Widens 8-bit codes 32 at a time: their bf16 bits from the format's table (CodeTable::bf16 in
  // eight registers, loaded once per packing), each vpermi2w looking up 64 entries and bits 6 and 7
  // of the code choosing among the four (a narrow format's table repeats every 64: one lookup).
  struct CodeWidener {
    I tb[8];
    bool narrow;
    explicit CodeWidener(const CodeTable& t) : narrow(t.narrow) {
      for (int i = 0; i < 8; ++i) tb[i] = _mm512_load_si512(t.bf16 + 32 * i);
    }
    I bf16_of(__m256i codes) const {
      const I idx = _mm512_cvtepu8_epi16(codes);
      const I w0 = _mm512_permutex2var_epi16(tb[0], idx, tb[1]);
      if (narrow) return w0;
      const I w1 = _mm512_permutex2var_epi16(tb[2], idx, tb[3]), w2 = _mm512_permutex2var_epi16(tb[4], idx, tb[5]),
              w3 = _mm512_permutex2var_epi16(tb[6], idx, tb[7]);
      const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40)),
                      b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(int16_t(0x80)));
      return _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, w0, w1), _mm512_mask_blend_epi16(b6, w2, w3));
    }
    static __mmask32 first32(int64_t n) { return n >= 32 ? ~__mmask32(0) : __mmask32(first_lanes(n, 32)); }
    // widen_code for n codes: the values from their bf16 bits (exact), times s.
    void to_f32(const uint8_t* p, int64_t n, float s, float* out) const {
      const V sv = _mm512_set1_ps(s);
      for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 m = first32(n - i);
        const I w = bf16_of(_mm256_maskz_loadu_epi8(m, p + i));
        const __m256i halves[2] = {_mm512_extracti64x4_epi64(w, 0), _mm512_extracti64x4_epi64(w, 1)};
        for (int h = 0; h < 2; ++h) {
          const I bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(halves[h]), 16);
          _mm512_mask_storeu_ps(out + i + 16 * h, __mmask16(m >> (16 * h)),
                                _mm512_mul_ps(_mm512_castsi512_ps(bits), sv));
        }
      }
    }
    // widen_code_bf16 for n codes: each 32-bit lane of the looked-up bits holds two values (a bf16
    // pair), each multiplied by s as an f32, flushed below 2^-126 and cut back to its top half.
    void to_bf16(const uint8_t* p, int64_t n, float s, uint16_t* out) const {
      const V sv = _mm512_set1_ps(s);
      const I top = _mm512_set1_epi32(int(0xFFFF0000u));
      for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 m = first32(n - i);
        I w = bf16_of(_mm256_maskz_loadu_epi8(m, p + i));
        if (s != 1.0f) {  // (the table's values are normal: times 1 they stay)
          const V hi = ftz(_mm512_mul_ps(pair_hi(w), sv)), lo = ftz(_mm512_mul_ps(pair_lo(w), sv));
          w = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(hi), top),
                              _mm512_srli_epi32(_mm512_castps_si512(lo), 16));
        }
        _mm512_mask_storeu_epi16(out + i, m, w);
      }
    }
  };
};

namespace avx512 {
struct Ops : Avx512Ops {
  static constexpr bool kNativeDot = false;
  static V dot(V acc, I, I) { return acc; }  // not used: kNativeDot is false
};
#include "tensor/cpu/gemm_tiles.inc"
}  // namespace avx512

namespace avx512bf16 {
struct Ops : Avx512Ops {
  static constexpr bool kNativeDot = true;
  static V dot(V acc, I a, I b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
};
#include "tensor/cpu/gemm_tiles.inc"
}  // namespace avx512bf16

MT_TARGET_END

constexpr GemmPath kAvx2Path{"avx2", avx2::block, avx2::pack_b, avx2::block_packed};
constexpr GemmPath kAvx512Path{"avx512", avx512::block, avx512::pack_b, avx512::block_packed};
constexpr GemmPath kAvx512Bf16Path{"avx512bf16", avx512bf16::block, avx512bf16::pack_b, avx512bf16::block_packed};

// CPUID leaf 7: EBX bit 5 AVX2, bit 16 AVX512F, bit 17 AVX512DQ, bit 30 AVX512BW, bit 31
// AVX512VL; leaf 7 subleaf 1: EAX bit 5 AVX512_BF16. Leaf 1: ECX bit 12 FMA, 29 F16C, 27 OSXSAVE.
// XCR0 must show the OS saves the YMM (bits 1-2) and ZMM (bits 5-7) state.
struct CpuFeatures {
  bool avx2 = false, avx512 = false, avx512bf16 = false;
};

CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), f16c = c & (1u << 29), osxsave = c & (1u << 27);
  if (!osxsave) return f;
  uint32_t xlo, xhi;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool ymm_state = (xlo & 0x6) == 0x6, zmm_state = (xlo & 0xE6) == 0xE6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_state && fma && f16c && (b & (1u << 5));
  f.avx512 = f.avx2 && zmm_state && (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31));
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = a & (1u << 5);
  return f;
}

#endif  // MT_HAVE_X86_PATHS

// The paths this CPU can run, the reference first and the default last.
VectorPaths<GemmPath>& paths() {
  static VectorPaths<GemmPath> table("GEMM", [] {
    std::vector<const GemmPath*> p{&kScalarPath};
#if MT_HAVE_X86_PATHS
    const CpuFeatures f = cpu_features();
    if (f.avx2) p.push_back(&kAvx2Path);
    if (f.avx512) p.push_back(&kAvx512Path);
    if (f.avx512bf16) p.push_back(&kAvx512Bf16Path);
#endif
    return p;
  }());
  return table;
}

// The operand X shifted to start at its element (r0, c0), its scales with it.
GemmOperand at(const GemmOperand& x, int64_t r0, int64_t c0) {
  const auto* base = static_cast<const unsigned char*>(x.p);
  GemmScales s = x.scales;
  s.r0 += r0;
  s.c0 += c0;
  return {x.dtype, base + int64_t(dtype_size(x.dtype)) * (r0 * x.rs + c0 * x.cs), x.rs, x.cs, s};
}

// What every entry asks of an operand: dot_bf16 takes bf16 values (not f16), and scales belong
// to 8-bit operands, in blocks of at least one element, the operand starting inside them.
void check_operand(GemmArith arith, const GemmOperand& x, const char* who) {
  MT_ASSERT(arith != GemmArith::dot_bf16 || x.dtype != DType::f16, who, ": dot_bf16 takes bf16 values, not f16");
  const GemmScales& g = x.scales;
  MT_ASSERT(!g.s || (is_8bit(x.dtype) && g.br > 0 && g.bc > 0 && g.r0 >= 0 && g.c0 >= 0), who,
            ": block scales need an 8-bit operand, blocks of at least one element and r0, c0 >= 0");
}

// An empty C, or an empty sum (C = 0 unless accumulating): true when there is nothing to multiply.
bool no_products(int64_t M, int64_t N, int64_t K, bool accumulate, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return true;
  if (K > 0) return false;
  if (!accumulate)
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
  return true;
}

}  // namespace

void gemm(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, bool accumulate,
          float* C, int64_t ldc) {
  gemm(arith, M, N, K, A, B, accumulate, C, ldc, [](int64_t, int64_t, int64_t, int64_t) {});
}

void gemm(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, bool accumulate,
          float* C, int64_t ldc, const GemmBlockDone& done) {
  check_operand(arith, A, "gemm");
  check_operand(arith, B, "gemm");
  if (M <= 0 || N <= 0) return;
  if (no_products(M, N, K, accumulate, C, ldc)) return done(0, M, 0, N);  // C is final: zeros, or as it was
  const BlockFn block = paths().active().block;
  gemm_blocked(
      M, N, K, accumulate, C, ldc,
      [&](int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t k0, int64_t k, bool acc, float* c, int64_t ldc_c) {
    block(arith, m, n, k, at(A, i0, k0), at(B, k0, j0), acc, c, ldc_c);
      },
      done);
}

PackedB::PackedB(GemmArith arith, int64_t N, int64_t K, const GemmOperand& B)
    : arith_(arith), n_(N), k_(K), b_(B), path_(&paths().active()) {
  check_operand(arith, B, "PackedB");
  if (N > 0 && K > 0) paths().active().pack_b(arith, N, K, B, f32_panels_, pair_panels_);
}

void gemm_on_thread(int64_t M, const GemmOperand& A, const PackedB& B, bool accumulate, float* C, int64_t ldc) {
  check_operand(B.arith_, A, "gemm_on_thread");
  const int64_t N = B.n_, K = B.k_;
  if (no_products(M, N, K, accumulate, C, ldc)) return;
  const GemmPath& path = paths().active();
  if (&path == B.path_)
    path.block_packed(B.arith_, M, N, K, A, B.b_, B.f32_panels_, B.pair_panels_, accumulate, C, ldc);
  else path.block(B.arith_, M, N, K, A, B.b_, accumulate, C, ldc);  // packed for another path: B in place
}

void gemm_on_thread(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B,
                    bool accumulate, float* C, int64_t ldc) {
  check_operand(arith, A, "gemm_on_thread");
  check_operand(arith, B, "gemm_on_thread");
  if (no_products(M, N, K, accumulate, C, ldc)) return;
  paths().active().block(arith, M, N, K, A, B, accumulate, C, ldc);
}

const char* gemm_path() { return paths().active().name; }

std::vector<std::string> gemm_paths() { return paths().names(); }

void set_gemm_path(std::string_view name) { paths().select(name, "set_gemm_path"); }

}  // namespace mixtape::cpu
