#include "tensor/cpu/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/core/dtype.h"
#include "tensor/cpu/convert.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_blocks.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/target_region.h"
#include "tensor/cpu/transpose.h"
#include "tensor/cpu/workspace.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mixtape::cpu {

namespace {

// The maximum of |values| with NaN winning over everything.
inline float nan_max(float m, float a) { return (a > m || a != a) && m == m ? a : m; }

// The maximum of |v[i]| over i < n and m, NaN when any v[i] is NaN.
float amax_row_scalar(const float* v, int64_t n, float m) {
  for (int64_t i = 0; i < n; ++i) m = nan_max(m, std::fabs(v[i]));
  return m;
}

#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
float amax_row_avx512(const float* v, int64_t n, float m) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  __m512 acc = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = __mmask16(first_lanes(n - i, 16));
    const __m512 a =
        _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(lanes, v + i)), abs_mask));
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    acc = _mm512_max_ps(acc, a);  // a NaN lane is recorded above; its max is never read
  }
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  return nan_max(m, _mm512_reduce_max_ps(acc));
}
// The same maximum over n contiguous bf16 values, read as their bits: |x| of a bf16 is its bits
// without the sign, and those order as integers exactly as the values do (+inf 0x7F80 the
// largest, a NaN above it), so the maximum needs no widening, 32 values a step.
float amax_row_bf16_avx512(const bfloat16* v, int64_t n, float m) {
  const __m512i abs_mask = _mm512_set1_epi16(0x7FFF), inf = _mm512_set1_epi16(0x7F80);
  __m512i acc = _mm512_setzero_si512();
  __mmask32 nan = 0;
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 lanes = __mmask32(first_lanes(n - i, 32));
    const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi16(lanes, v + i), abs_mask);
    nan |= _mm512_cmpgt_epu16_mask(a, inf);
    acc = _mm512_max_epu16(acc, a);
  }
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  // The largest of the 32 lanes in registers (a block of MX's 32 or NVFP4's 16 values is one call,
  // where a store and a scalar loop cost more than the loads): halves, then the complement's
  // minimum position of the last eight.
  const __m256i m256 = _mm256_max_epu16(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
  const __m128i m128 = _mm_max_epu16(_mm256_castsi256_si128(m256), _mm256_extracti128_si256(m256, 1));
  const __m128i low = _mm_minpos_epu16(_mm_xor_si128(m128, _mm_set1_epi16(-1)));  // ~max in lane 0
  const uint16_t top = uint16_t(~_mm_cvtsi128_si32(low));
  return nan_max(m, std::bit_cast<float>(uint32_t(top) << 16));
}
MT_TARGET_END
#endif

float amax_row(const float* v, int64_t n, float m) {
#if defined(__x86_64__)
  if (avx512_path_active()) return amax_row_avx512(v, n, m);
#endif
  return amax_row_scalar(v, n, m);
}

// Note [One run per tensor]
// A per-tensor operand stored contiguously (rows C apart, C one apart) is one run of R*C values
// in row order, so its amax pass and its quantize pass take it in pieces of kFlatRun values
// instead of row by row: the column matrix of a 3 x 3 kernel over one channel has rows of 9,
// which cost a call, a vector's setup and a reduction each. A maximum and the counts are the
// same in any grouping (the first NaN in row order stays first), and each element is rounded
// with the same scale, so the codes, the scale and the stats are those of the rows.
constexpr int64_t kFlatRun = int64_t(1) << 14;
// Pieces of the one run a thread takes at least: a smaller tensor (a layer's weight, one step's
// operand) is quantized on one thread, which takes less time than waking another.
constexpr int64_t kFlatRunsPerThread = 4;

bool one_run(const Strided& x, int64_t br, int64_t bc) {
  const int64_t R = x.shape()[0], C = x.shape()[1];
  return br >= R && bc >= C && x.strides()[1] == 1 && (R == 1 || x.strides()[0] == C);
}

// The runs of a quantization: each row's column blocks, or pieces of the one run (Note [One run
// per tensor]).
struct Runs {
  bool flat;
  int64_t count, grain;
};
Runs runs_of(const Strided& x, int64_t br, int64_t bc) {
  const int64_t R = x.shape()[0], C = x.shape()[1];
  const bool flat = one_run(x, br, bc);
  return {flat, flat ? scales::blocks_of(R * C, kFlatRun) : R * scales::blocks_of(C, bc),
          flat ? kFlatRunsPerThread : grain_for(std::min(C, bc))};
}

// runmax[u] for the runs u of [u0, u1): the maximum of |x| over the run (NaN wins). A maximum is
// the same in any order, so the split over the threads and the vector path change nothing.
template <class T>
void run_amax(const Strided& x, const Runs& runs, int64_t bc, int64_t u0, int64_t u1, std::vector<float>& runmax) {
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbc = scales::blocks_of(C, bc);
  const T* p = static_cast<const T*>(x.raw_data());
  float buf[kRowChunk];
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t r = runs.flat ? 0 : u / nbc, c0 = runs.flat ? u * kFlatRun : u % nbc * bc;
    const int64_t len = runs.flat ? std::min(R * C, c0 + kFlatRun) - c0 : std::min(C, c0 + bc) - c0;
    float m = 0.0f;
    for_chunks(len, [&](int64_t j, int64_t k) {
      const T* row = p + r * rs + (c0 + j) * cs;
      if constexpr (std::is_same_v<T, double>) {
        for (int64_t i = 0; i < k; ++i) m = nan_max(m, float(std::fabs(row[i * cs])));
#if defined(__x86_64__)
      } else if (std::is_same_v<T, bfloat16> && cs == 1 && avx512_path_active()) {
        m = amax_row_bf16_avx512(reinterpret_cast<const bfloat16*>(row), k, m);
#endif
      } else {
        m = amax_row(load_row(row, cs, k, buf), k, m);
      }
    });
    runmax[size_t(u)] = m;
  }
}

// amax[rb][cb] over the blocks of x from the runs' maxima: each block the maximum over its rows'
// runs (the one run: one block).
std::vector<float> block_amax(const Runs& runs, const std::vector<float>& runmax, int64_t R, int64_t C, int64_t br,
                              int64_t bc) {
  const int64_t nbr = scales::blocks_of(R, br), nbc = scales::blocks_of(C, bc);
  std::vector<float> amax(size_t(nbr * nbc), 0.0f);
  for (int64_t u = 0; u < runs.count; ++u) {
    float& m = amax[runs.flat ? 0 : size_t((u / nbc / br) * nbc + u % nbc)];
    m = nan_max(m, runmax[size_t(u)]);
  }
  return amax;
}

// Calls f.template operator()<F>() with the Format constant of an 8-bit dtype.
template <class Fn>
void dispatch_8bit(DType t, Fn&& fn) {
  switch (t) {
    case DType::e4m3: return fn.template operator()<bits8::kE4M3>();
    case DType::e5m2: return fn.template operator()<bits8::kE5M2>();
    case DType::e3m2: return fn.template operator()<bits8::kE3M2>();
    case DType::e2m3: return fn.template operator()<bits8::kE2M3>();
    case DType::e2m1: return fn.template operator()<bits8::kE2M1>();
    default: MT_ASSERT(false, "quantize: ", dtype_name(t), " is not an 8-bit dtype");
  }
}

using Counts = RowCounts;  // (tensor/cpu/quantize.h)

// out[i] = from_float_rn(v[i] * s) for i < n, with the counts of quantize's stats: the element
// loop every path computes (the reference).
template <const bits8::Format& F>
void quantize_row_scalar(const float* v, int64_t n, float s, bits8::Overflow o, uint8_t* out, Counts& c) {
  constexpr uint32_t exp_mask = ((1u << F.exp_bits) - 1u) << F.man_bits, mag_mask = bits8::magnitude_mask(F);
  for (int64_t i = 0; i < n; ++i) {
    const bits8::Rounded q8 = bits8::from_float_rn_checked(v[i] * s, F, o);
    out[i] = q8.code;
    if (!std::isfinite(v[i])) {
      ++c.nonfinite;
      continue;
    }
    c.amax = std::max(c.amax, std::fabs(v[i]));
    c.saturated += q8.past_max;  // an inf product too
    const uint32_t mag = q8.code & mag_mask;
    c.flushed += mag == 0 && v[i] != 0.0f;
    c.subnormal += mag != 0 && (q8.code & exp_mask) == 0;
  }
}

#if defined(__x86_64__)
MT_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")

// quantize_row_scalar sixteen lanes at a time: the same float product and the same two roundings
// of fp8.h's rne_magnitude_code (the float addition below min normal, the integer rounding above),
// so the same codes and counts (a maximum and counts do not depend on the order). The values are
// floats, or contiguous bf16 widened as they are loaded (exactly: the conversion path's
// load_bf16), which spares a bf16 operand the pass through a float buffer.
template <const bits8::Format& F, class In>
void quantize_row_avx512(const In* v, int64_t n, float s, bits8::Overflow o, uint8_t* out, Counts& c) {
  constexpr int M = F.man_bits, emin = 1 - F.bias, drop = 23 - M;
  constexpr uint32_t exp_mask = ((1u << F.exp_bits) - 1u) << M, mag_mask = bits8::magnitude_mask(F);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf_bits = _mm512_set1_epi32(0x7F800000);
  const __m512i min_normal = _mm512_set1_epi32(int((emin + 127) << 23));
  const __m512 magic = _mm512_castsi512_ps(_mm512_set1_epi32(int(uint32_t(emin - M + 23 + 127) << 23)));
  const __m512i round_half = _mm512_set1_epi32(int((1u << (drop - 1)) - 1u)), one = _mm512_set1_epi32(1);
  const __m512i rebias = _mm512_set1_epi32(int(uint32_t(127 - F.bias) << M));
  const __m512i max_code = _mm512_set1_epi32(bits8::max_code(F));
  const __m512i ceiling = _mm512_set1_epi32(int(bits8::ceiling_code(F, o)));
  const __m512i nan_code = _mm512_set1_epi32(bits8::nan_code(F)), zero = _mm512_setzero_si512();
  const __m512 sv = _mm512_set1_ps(s);
  __m512 amax = _mm512_setzero_ps();
  // The counts: the bits of each step's masks (no reduction after the loop, which would cost more
  // than the loop itself for a block of MX's 32 or NVFP4's 16 values).
  int64_t nonfinite = 0, saturated = 0, flushed = 0, subnormal = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = __mmask16(first_lanes(n - i, 16));
    __m512 x;
    if constexpr (std::is_same_v<In, bfloat16>)
      x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, v + i)), 16));
    else x = _mm512_maskz_loadu_ps(lanes, v + i);
    const __m512i b = _mm512_castps_si512(_mm512_mul_ps(x, sv));
    const __m512i ax = _mm512_and_si512(b, abs_mask);
    const __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(b, 31), F.exp_bits + M);
    const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(ax), magic)),
                                         _mm512_castps_si512(magic));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(ax, drop), one);
    const __m512i nrm =
        _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(ax, round_half), lsb), drop), rebias);
    __m512i code = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(ax, min_normal), nrm, sub);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(ax, inf_bits);
    const __mmask16 past = _mm512_cmpgt_epu32_mask(code, max_code) & ~nan;
    code = _mm512_or_si512(_mm512_min_epu32(code, ceiling), sign);
    code = _mm512_mask_blend_epi32(nan, code, nan_code);
    _mm512_mask_cvtepi32_storeu_epi8(out + i, lanes, code);
    // The counts over the finite x of the row.
    const __m512i xb = _mm512_and_si512(_mm512_castps_si512(x), abs_mask);
    const __mmask16 finite = _mm512_cmplt_epu32_mask(xb, inf_bits) & lanes;
    nonfinite += std::popcount(unsigned(lanes & ~finite));
    amax = _mm512_mask_max_ps(amax, finite, amax, _mm512_castsi512_ps(xb));
    saturated += std::popcount(unsigned(past & finite));
    const __m512i mag = _mm512_and_si512(code, _mm512_set1_epi32(int(mag_mask)));
    const __mmask16 mag_zero = _mm512_cmpeq_epi32_mask(mag, zero);
    flushed += std::popcount(unsigned(mag_zero & _mm512_cmpneq_epi32_mask(xb, zero) & finite));
    const __mmask16 tiny =
        ~mag_zero & _mm512_cmpeq_epi32_mask(_mm512_and_si512(code, _mm512_set1_epi32(int(exp_mask))), zero) & finite;
    subnormal += std::popcount(unsigned(tiny));
  }
  c.nonfinite += nonfinite;
  c.saturated += saturated;
  c.flushed += flushed;
  c.subnormal += subnormal;
  c.amax = std::max(c.amax, _mm512_reduce_max_ps(amax));
}

MT_TARGET_END
#endif

template <const bits8::Format& F>
void quantize_row(const float* v, int64_t n, float s, bits8::Overflow o, uint8_t* out, Counts& c) {
#if defined(__x86_64__)
  if (avx512_path_active()) return quantize_row_avx512<F, float>(v, n, s, o, out, c);
#endif
  quantize_row_scalar<F>(v, n, s, o, out, c);
}

}  // namespace

void quantize(const Strided& x, const BlockQuant& q, const Strided& codes, const Strided& scale_inv,
              const Strided& tensor_scale_inv, const Strided& stats) {
  MT_ASSERT(x.dim() == 2 && q.block_rows > 0 && q.block_cols > 0);
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbc = scales::blocks_of(C, q.block_cols), br = q.block_rows, bc = q.block_cols;
  const int64_t blocks = scales::blocks_of(R, br) * nbc;
  const bits8::Format& f = format_of(q.format);
  const bool given = q.given_scale > 0.0f;  // delayed scaling: no amax pass
  const bool two_level = q.rule == ScaleRule::nvfp4 && !given;
  float tensor_inv = 1.0f;  // 1 / S of a two-level operand
  std::vector<float> s, runmax;
  float* inv = static_cast<float*>(scale_inv.raw_data());
  uint8_t* out = static_cast<uint8_t*>(codes.raw_data());
  // Two passes over the same runs in one parallel region: each run's amax, then each block's s
  // and 1 / s (exact for a power of two), then the codes. Each run (a row's column block, or a
  // piece of the one run: Note [One run per tensor]) in chunks of floats (load_row widens 16-bit
  // values and gathers strided ones), each chunk within one block; the element loop is compiled
  // once per format, so that the rounding's shifts and masks are constants.
  const Runs runs = runs_of(x, br, bc);
  if (!given) runmax.resize(size_t(runs.count));
  std::vector<Counts> per_run(static_cast<size_t>(runs.count));
  dispatch_8bit(q.format, [&]<const bits8::Format & F>() {
    dispatch_floating(x.dtype(), "quantize", [&]<class T>() {
      const T* p = static_cast<const T*>(x.raw_data());
      const auto amax_pass = [&](int64_t u0, int64_t u1) {
        if (!given) run_amax<T>(x, runs, bc, u0, u1, runmax);
      };
      const auto choose_scales = [&] {
        s = given ? std::vector<float>(size_t(blocks), q.given_scale) : block_amax(runs, runmax, R, C, br, bc);
        if (two_level) {  // Note [Two-level scales]: S from the tensor's amax, then each block's d_b
          float amax = 0.0f;
          for (float v : s) amax = nan_max(amax, v);
          const float S = scales::nvfp4_tensor_scale(amax, f);
          for (size_t i = 0; i < s.size(); ++i) {
            inv[i] = scales::nvfp4_block_decode(s[i], S, f);
            s[i] = scales::nvfp4_block_scale(inv[i], S);
          }
          tensor_inv = 1.0f / S;
          return;
        }
        for (float& v : s) v = scales::block_scale(q, f, v);  // amax -> s in place
        for (size_t i = 0; i < s.size(); ++i) inv[i] = 1.0f / s[i];
      };
      const auto codes_pass = [&](int64_t u0, int64_t u1) {
        float buf[kRowChunk];
        for (int64_t u = u0; u < u1; ++u) {
          Counts n;
          const int64_t r = runs.flat ? 0 : u / nbc, c0 = runs.flat ? u * kFlatRun : u % nbc * bc;
          const int64_t len = runs.flat ? std::min(R * C, c0 + kFlatRun) - c0 : std::min(C, c0 + bc) - c0;
          const float scale = s[size_t(runs.flat ? 0 : (r / br) * nbc + u % nbc)];
          for_chunks(len, [&](int64_t j, int64_t m) {
            const T* row = p + r * rs + (c0 + j) * cs;
            uint8_t* dst = out + r * C + c0 + j;
            const float* v = buf;
#if defined(__x86_64__)
            if constexpr (std::is_same_v<T, bfloat16>)
              if (cs == 1 && avx512_path_active())
                return quantize_row_avx512<F, bfloat16>(row, m, scale, q.overflow, dst, n);
#endif
            if constexpr (std::is_same_v<T, double>)  // rounded to odd (Note [Rounding f64 and i64 to 16 bits])
              for (int64_t k = 0; k < m; ++k) buf[k] = bits16::f64_to_f32_round_odd(row[k * cs]);
            else v = load_row(row, cs, m, buf);
            quantize_row<F>(v, m, scale, q.overflow, dst, n);
          });
          per_run[size_t(u)] = n;
        }
      };
      parallel_two_passes(runs.count, runs.grain, amax_pass, choose_scales, codes_pass);
    });
  });
  if (two_level) *static_cast<float*>(tensor_scale_inv.raw_data()) = tensor_inv;
  Counts t;
  for (const Counts& n : per_run) t += n;
  int64_t* st = static_cast<int64_t*>(stats.raw_data());
  st[kStatCount] = R * C;
  st[kStatSaturated] = t.saturated;
  st[kStatFlushed] = t.flushed;
  st[kStatSubnormal] = t.subnormal;
  st[kStatNonfinite] = t.nonfinite;
  st[kStatAmaxBits] = std::bit_cast<uint32_t>(t.amax);
  const auto [lo, hi] = std::minmax_element(inv, inv + s.size());
  // Two-level: the range of d_b / S (multiplying by 1 / S > 0 keeps the order and the NaNs).
  const auto range_end = [&](float v) { return std::bit_cast<uint32_t>(two_level ? v * tensor_inv : v); };
  st[kStatScaleInvMinBits] = s.empty() ? 0 : range_end(*lo);
  st[kStatScaleInvMaxBits] = s.empty() ? 0 : range_end(*hi);
}

namespace {

// One operand of the 8-bit GEMM (codes [R, K], any strides) as GEMM operand A (as_b false: element (i, k)) or
// B = codes^T (element (k, j)): scales that change along K go into the operand's block scales,
// scales constant along K into `outer` (one factor per row of the codes). A two-level operand
// (tensor_inv defined: Note [Two-level scales] in scale_formulas.h) has its d_b go with the codes
// at any block size and its 1 / S into `outer`.
GemmOperand gemm_operand(const Strided& codes, const Strided& scale_inv, int64_t br, int64_t bc,
                         const Strided& tensor_inv, bool as_b, std::vector<float>& outer) {
  const int64_t R = codes.shape()[0], K = codes.shape()[1], nbc = scale_inv.shape()[1];
  const float* inv = static_cast<const float*>(scale_inv.raw_data());
  // A: element (i, k) at codes[i][k]; B: element (k, j) at codes[j][k].
  const int64_t rs = codes.strides()[0], cs = codes.strides()[1];
  GemmOperand op = as_b ? GemmOperand{codes.dtype(), codes.raw_data(), cs, rs}
                        : GemmOperand{codes.dtype(), codes.raw_data(), rs, cs};
  outer.clear();
  if (K == 0) return op;  // no products: y is the bias, no factor is read
  if (tensor_inv.defined()) outer.assign(size_t(R), *static_cast<const float*>(tensor_inv.raw_data()));
  if (bc >= K && !tensor_inv.defined()) {
    outer.resize(size_t(R));
    for (int64_t r0 = 0; r0 < R; r0 += br)  // block by block: no division a row
      std::fill(outer.begin() + r0, outer.begin() + std::min(R, r0 + br), inv[r0 / br]);
  } else {
    op.scales = as_b ? GemmScales{inv, bc, br, 1, nbc, 0, 0} : GemmScales{inv, br, bc, nbc, 1, 0, 0};
  }
  return op;
}

// Note [Reused 8-bit B operands]
// An unrolled LSTM multiplies the same recurrent weight codes at every step (forward as B, and
// their transpose as B of dgrad): 64 rows of A against a [256, 1024] B, whose packing cost as
// much as the products at every call. So an operand keeps an entry per orientation
// (PreparedOperand in tensor/ops/quantize.h, shared by its copies and by the Fp8Context's cache),
// and from its second GEMM as B on, B stays packed in it (PackedB) and the GEMM runs over it,
// split over the threads by rows of A. gemm_on_thread over a PackedB sums every element over all
// of K in one chain, which is gemm()'s result for every shape gemm_splits_k does not cut along K
// (those keep calling gemm()), so the bits are the same. Only operands without block scales are
// kept (their scales are factors of the output; the panels then depend on the codes alone, which
// no one changes after quantize); the first use packs as usual, so an operand multiplied once
// (most weights: once per orientation per step) costs nothing more. done(i0, m, j0, n) runs the
// epilogue of a block of C once it is summed, on the thread that summed it (one parallel region
// for the product and its epilogue: the unrolled LSTM's steps are small, and a region costs a
// thread's wake-up under OMP_WAIT_POLICY=passive); over a PackedB the blocks are whole rows.
template <class Done>
void gemm_reusing(ReusedB& r, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, float* c,
                  Done&& done) {
  if (r.packed && (r.codes != B.p || r.rs != B.rs || r.cs != B.cs || r.n != N || r.k != K)) {
    r.packed.reset();  // packed from other codes: start over
    r.uses = 0;
  }
  if (!r.packed && ++r.uses < 2) return gemm(GemmArith::dot_bf16, M, N, K, A, B, false, c, N, done);
  if (!r.packed) {
    r.packed = std::make_unique<PackedB>(GemmArith::dot_bf16, N, K, B);
    r.codes = B.p;
    r.rs = B.rs;
    r.cs = B.cs;
    r.n = N;
    r.k = K;
  }
  if (M * N * K < kGemmSerialFlops) {
    gemm_on_thread(M, A, *r.packed, false, c, N);
    return done(int64_t(0), M, int64_t(0), N);
  }
  constexpr int64_t kRows = 8;  // rows of C per piece (a tile's)
  parallel_for((M + kRows - 1) / kRows, 1, [&](int64_t p0, int64_t p1) {
    const int64_t i0 = p0 * kRows, i1 = std::min(M, p1 * kRows);
    GemmOperand part = A;  // rows [i0, i1) of A, its scales with them
    part.p = static_cast<const uint8_t*>(A.p) + i0 * A.rs;
    part.scales.r0 += i0;
    gemm_on_thread(i1 - i0, part, *r.packed, false, c + i0 * N, N);
    done(i0, i1 - i0, int64_t(0), N);  // the thread's own rows
  });
}

}  // namespace

void scaled_matmul_nt(const Strided& a, const Strided& a_scale_inv, int64_t a_br, int64_t a_bc,
                      const Strided& a_tensor_inv, const Strided& b, const Strided& b_scale_inv, int64_t b_br,
                      int64_t b_bc, const Strided& b_tensor_inv, const Strided& bias, const Strided& y, ReusedB* reuse,
                      int64_t images) {
  const int64_t M = a.shape()[0], N = b.shape()[0], K = a.shape()[1];
  std::vector<float> oa, ob;
  const GemmOperand A = gemm_operand(a, a_scale_inv, a_br, a_bc, a_tensor_inv, false, oa);
  const GemmOperand B = gemm_operand(b, b_scale_inv, b_br, b_bc, b_tensor_inv, true, ob);
  // The fp32 sums: in y itself when it is f32 in their layout (the epilogue then runs in place),
  // else in the thread's workspace (Note [Workspaces]); the GEMM writes every element before it
  // is read.
  const bool in_y = y.dtype() == DType::f32 && images == 0;
  float* const c = in_y ? static_cast<float*>(y.raw_data()) : workspace<float>(Workspace::matmul_output, M * N);
  std::vector<float> bv(size_t(N), 0.0f);
  if (bias.defined())
    dispatch_floating(bias.dtype(), "scaled_matmul_nt (bias)", [&]<class B>() {
      const B* bp = static_cast<const B*>(bias.raw_data());
      for (int64_t j = 0; j < N; ++j) bv[size_t(j)] = float(load(bp[j * bias.strides()[0]]));
    });
  // The epilogue in place in c: columns [j0, j0 + n) of row i.
  const auto epilogue = [&](int64_t i, int64_t j0, int64_t n) {
    float* row = c + i * N;
    const float fa = oa.empty() ? 1.0f : oa[size_t(i)];
    for (int64_t j = j0; j < j0 + n; ++j)
      row[j] = scaled_sum(row[j], fa, ob.empty() ? 1.0f : ob[size_t(j)], bv[size_t(j)]);
  };
  dispatch_floating(y.dtype(), "scaled_matmul_nt", [&]<class T>() {
    T* out = static_cast<T*>(y.raw_data());
    // n values of c's floats into out, each rounded once (store_n: the conversion path's rows).
    const auto store = [](const float* v, T* dst, int64_t n) {
      if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) std::copy(v, v + n, dst);
      else store_n(v, dst, n);
    };
    // A block of C, once summed, through the epilogue and out, on the thread that summed it.
    const auto block_out = [&](int64_t i0, int64_t m, int64_t j0, int64_t n) {
      for (int64_t i = i0; i < i0 + m; ++i) {
        epilogue(i, j0, n);
        if constexpr (!std::is_same_v<T, float>) store(c + i * N + j0, out + i * N + j0, n);  // f32: in y already
      }
    };
    // Rows of images (Note [Image rows]): tiles of kTile rows, each column of a tile's piece of
    // one image stored as a run of that image's channel-j plane.
    constexpr int64_t kTile = 32;
    constexpr int64_t kCols = 16;  // columns transposed at a time (Note [Transposed tiles])
    const int64_t HW = images > 0 ? M / images : 0;
    const auto block_to_images = [&](int64_t i0, int64_t m, int64_t j0, int64_t n) {
      float cols[kCols * kTile];  // w columns of len rows, one after another
      T rounded[kCols * kTile];   // the same, rounded (one conversion call a piece)
      for (int64_t t0 = i0; t0 < i0 + m; t0 += kTile) {
        const int64_t t1 = std::min(i0 + m, t0 + kTile);
        for (int64_t i = t0; i < t1; ++i) epilogue(i, j0, n);
        for (int64_t i = t0; i < t1;) {
          const int64_t img = i / HW, hw = i % HW, len = std::min(t1 - i, HW - hw);
          for (int64_t jc = j0; jc < j0 + n; jc += kCols) {
            const int64_t w = std::min(kCols, j0 + n - jc);
            transpose_tile(c + i * N + jc, N, cols, len, len, w);
            store(cols, rounded, w * len);
            for (int64_t j = 0; j < w; ++j)
              std::copy(rounded + j * len, rounded + (j + 1) * len, out + (img * N + jc + j) * HW + hw);
          }
          i += len;
        }
      }
    };
    const GemmBlockDone done = images > 0 ? GemmBlockDone(block_to_images) : GemmBlockDone(block_out);
    const bool reusing = reuse && !B.scales.s && M > 0 && N > 0 && K > 0 && !gemm_splits_k(M, N, K);
    if (reusing) return gemm_reusing(*reuse, M, N, K, A, B, c, done);  // blocks done as summed
    gemm(GemmArith::dot_bf16, M, N, K, A, B, false, c, N, done);
  });
}

float scaled_sums_nt(const Strided& a, const Strided& a_scale_inv, const Strided& b, const Strided& b_scale_inv,
                     const Strided& y) {
  const int64_t M = a.shape()[0], N = b.shape()[0], K = a.shape()[1];
  MT_ASSERT(y.dtype() == DType::f32 && y.is_contiguous() && a_scale_inv.numel() == 1 && b_scale_inv.numel() == 1);
  std::vector<float> oa, ob;  // each operand's one factor, for every row
  const GemmOperand A = gemm_operand(a, a_scale_inv, std::max<int64_t>(M, 1), std::max<int64_t>(K, 1), {}, false, oa);
  const GemmOperand B = gemm_operand(b, b_scale_inv, std::max<int64_t>(N, 1), std::max<int64_t>(K, 1), {}, true, ob);
  gemm(GemmArith::dot_bf16, M, N, K, A, B, false, static_cast<float*>(y.raw_data()), N);
  return (oa.empty() ? 1.0f : oa[0]) * (ob.empty() ? 1.0f : ob[0]);  // the epilogue's fa * fb
}

float amax_join(float m, float a) { return nan_max(m, a); }

namespace {

template <class T>
float row_amax_of(const T* v, int64_t n, float m) {
  float buf[kRowChunk];
  for_chunks(n, [&](int64_t j, int64_t k) {
#if defined(__x86_64__)
    if constexpr (std::is_same_v<T, bfloat16>)
      if (avx512_path_active()) {
        m = amax_row_bf16_avx512(v + j, k, m);
        return;
      }
#endif
    m = amax_row(load_row(v + j, 1, k, buf), k, m);
  });
  return m;
}

template <class T>
void quantize_row_of(const BlockQuant& q, const T* v, int64_t n, float s, uint8_t* out, RowCounts& c) {
  dispatch_8bit(q.format, [&]<const bits8::Format & F>() {
    float buf[kRowChunk];
    for_chunks(n, [&](int64_t j, int64_t m) {
#if defined(__x86_64__)
      if constexpr (std::is_same_v<T, bfloat16>)
        if (avx512_path_active()) return quantize_row_avx512<F, bfloat16>(v + j, m, s, q.overflow, out + j, c);
#endif
      quantize_row<F>(load_row(v + j, 1, m, buf), m, s, q.overflow, out + j, c);
    });
  });
}

}  // namespace

float row_amax(const bfloat16* v, int64_t n, float m) { return row_amax_of(v, n, m); }
float row_amax(const half* v, int64_t n, float m) { return row_amax_of(v, n, m); }
float row_amax(const float* v, int64_t n, float m) { return row_amax_of(v, n, m); }
void quantize_row(const BlockQuant& q, const bfloat16* v, int64_t n, float s, uint8_t* out, RowCounts& c) {
  quantize_row_of(q, v, n, s, out, c);
}
void quantize_row(const BlockQuant& q, const half* v, int64_t n, float s, uint8_t* out, RowCounts& c) {
  quantize_row_of(q, v, n, s, out, c);
}
void quantize_row(const BlockQuant& q, const float* v, int64_t n, float s, uint8_t* out, RowCounts& c) {
  quantize_row_of(q, v, n, s, out, c);
}

}  // namespace mixtape::cpu
