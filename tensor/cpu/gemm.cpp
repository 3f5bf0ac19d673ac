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
#include "tensor/cpu/gemm.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/core/error.h"
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

GemmArith gemm_arith_for(DType dtype) { return dtype == DType::bf16 ? GemmArith::dot_bf16 : GemmArith::fma_f32; }

namespace {

// Calls f.template operator()<T>() with the C++ type of a GEMM operand's dtype.
template <class F>
void dispatch_gemm_operand(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f16: f.template operator()<half>(); return;
    case DType::bf16: f.template operator()<bfloat16>(); return;
    default: MT_CHECK(false, "gemm: operands must be f32, f16 or bf16, got ", dtype_name(dtype));
  }
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

void scalar_block(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B,
                  bool accumulate, float* C, int64_t ldc) {
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

// The operand X shifted to start at its element (r0, c0).
GemmOperand at(const GemmOperand& x, int64_t r0, int64_t c0) {
  const auto* base = static_cast<const unsigned char*>(x.p);
  return {x.dtype, base + int64_t(dtype_size(x.dtype)) * (r0 * x.rs + c0 * x.cs), x.rs, x.cs};
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
  MT_ASSERT(arith != GemmArith::dot_bf16 || (A.dtype != DType::f16 && B.dtype != DType::f16),
            "gemm: dot_bf16 takes bf16 values, not f16");
  if (no_products(M, N, K, accumulate, C, ldc)) return;
  const BlockFn block = paths().active().block;
  gemm_blocked(M, N, K, accumulate, C, ldc,
               [&](int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t k0, int64_t k, bool acc, float* c,
                   int64_t ldc_c) { block(arith, m, n, k, at(A, i0, k0), at(B, k0, j0), acc, c, ldc_c); });
}

PackedB::PackedB(GemmArith arith, int64_t N, int64_t K, const GemmOperand& B)
    : arith_(arith), n_(N), k_(K), b_(B), path_(&paths().active()) {
  MT_ASSERT(arith != GemmArith::dot_bf16 || B.dtype != DType::f16, "PackedB: dot_bf16 takes bf16 values, not f16");
  if (N > 0 && K > 0) paths().active().pack_b(arith, N, K, B, f32_panels_, pair_panels_);
}

void gemm_on_thread(int64_t M, const GemmOperand& A, const PackedB& B, bool accumulate, float* C, int64_t ldc) {
  MT_ASSERT(B.arith_ != GemmArith::dot_bf16 || A.dtype != DType::f16, "gemm: dot_bf16 takes bf16 values, not f16");
  const int64_t N = B.n_, K = B.k_;
  if (no_products(M, N, K, accumulate, C, ldc)) return;
  const GemmPath& path = paths().active();
  if (&path == B.path_)
    path.block_packed(B.arith_, M, N, K, A, B.b_, B.f32_panels_, B.pair_panels_, accumulate, C, ldc);
  else path.block(B.arith_, M, N, K, A, B.b_, accumulate, C, ldc);  // packed for another path: B in place
}

void gemm_on_thread(GemmArith arith, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B,
                    bool accumulate, float* C, int64_t ldc) {
  MT_ASSERT(arith != GemmArith::dot_bf16 || (A.dtype != DType::f16 && B.dtype != DType::f16),
            "gemm: dot_bf16 takes bf16 values, not f16");
  if (no_products(M, N, K, accumulate, C, ldc)) return;
  paths().active().block(arith, M, N, K, A, B, accumulate, C, ldc);
}

const char* gemm_path() { return paths().active().name; }

std::vector<std::string> gemm_paths() { return paths().names(); }

void set_gemm_path(std::string_view name) { paths().select(name, "set_gemm_path"); }

}  // namespace mixtape::cpu
