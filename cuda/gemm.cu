// The GEMM kernels behind cuda::gemm (cuda/gemm.h): a Tensor Core kernel (WMMA) for f16, bf16,
// 8-bit operands widened to bf16 and, when opted in, TF32; an exact-fp32 SIMT kernel; a split-K
// finishing pass. No cuBLAS.
//
// Note [GEMM tiles]
// Each block computes a BM x BN tile of C for one batch entry (and one K range, see split-K),
// walking K in steps of BK. The A tile (BM x BK) and B tile (BK x BN) are staged through shared
// memory in the orientation of their global layout: an operand whose contiguous dim is K (A
// row-major, B column-major) is stored with K innermost, otherwise M (or N) innermost; the WMMA
// fragments are then loaded as row_major or col_major to match. So every global load is
// coalesced along the operand's contiguous dim whichever of the four transpose combinations is
// asked for, and the shared stores are 16-byte vectors. Each thread moves 16-byte chunks of a
// row. A chunk that lies wholly inside the operand is read with the widest loads the operand's
// alignment allows (Args::a_vec / b_vec, chosen by the host: one 16-byte load when the base, the
// row stride and the batch stride are multiples of 16 bytes, else two 8-byte or four 4-byte loads,
// so a conv's 14x14 = 196-column rows still load as vectors); only a chunk that straddles the
// ragged edge of M, N or the K range takes the guarded element-by-element path, which reads zeros
// outside (a zero contributes nothing to the sum). gemm() stages an operand that would load
// element by element (no unit-stride dim, or misaligned rows) into a row-padded copy first (Note
// [Staged operands]), so the guarded path is left to the edges. Shared rows are padded (16
// bytes) against bank conflicts; WMMA needs 32-byte aligned fragment pointers and ldm a multiple
// of 16 bytes, which the static_asserts check.
//
// Pipeline: the tile for step t+1 is read from global memory into registers while step t's tile
// is multiplied out of shared memory, then written to the other shared buffer; one __syncthreads
// per step separates the last read of a buffer (step t-1) from its next write (step t).
//
// Epilogue: each warp stores one 16x16 accumulator fragment at a time to its own slice of shared
// memory (reusing the operand buffers after the last barrier) and its 32 lanes write the 256
// elements: out = act(alpha * acc (+ beta * C) + bias), rounded once with store.
//
// Note [Staged operands]
// An operand whose full chunks the tiles would read element by element (vector_bytes 0: no
// unit-stride dim, or rows that start off the 4-byte words of 16-bit data) is first copied by
// one kernel (stage_rows_kernel) into a workspace whose rows are padded to 16 bytes, as im2col
// pads its columns (Note [Padded column rows] in conv.cu), and the tiles read the copy with
// 16-byte loads. In the examples that is a transposed convolution reading its input plane in
// place (the cnn decoder's 7 x 7 = 49-element rows, odd in length), the input gradient of a conv
// whose output plane is 7 x 7 (the resnet's second stage reads dy's 49-element rows), and the
// first conv's weight (rows of 3 x 3 = 9 elements). Why a copy rather than a load that handles
// a misaligned row start: the only vector loads that could read such a row are aligned ones that
// cover a few elements before and after it, and at the ends of the operand those lie outside its
// allocation (compute-sanitizer and the emulator's checks would rightly refuse them); a scalar
// head and tail per row is a second guarded path in every kernel instance, for registers the
// main loop needs. The copy is exact and leaves M, N, K, the batch, the contiguous dim and so the
// kernel instance, tiles, K steps and split-K as they were: the products and their order of
// summation are those of the unstaged call, bit for bit; only the loads differ. It costs one
// launch and a workspace from the caching allocator (nothing is allocated after warm-up).
// Two kinds of operand are not copied. A dim of extent 1 has a free stride (canonical): DCGAN's
// noise z_n [nz, 1] with strides (1, 1) is read as a K-contiguous column of nz elements, which
// its 200-byte batch stride lets load 8 bytes at a time, not as nz rows of one element. And an
// operand whose contiguous dim is shorter than one 16-byte vector (the 1 x 1 dy of DCGAN's last
// discriminator conv, per image) has no full chunk at all: every chunk is a ragged edge, loaded
// element by element in any layout, so a copy would buy nothing (gemm_load_plan reports
// kGemmNoFullChunk).
//
// Note [Split-K]
// A GEMM with few output tiles but a long K (a conv weight gradient: M = out channels, N = C*KH*KW,
// K = batch * OH * OW) would run on a handful of SMs. It is split into S contiguous K ranges, each
// a separate blockIdx.z entry writing fp32 partial sums to a workspace [batch][S][M][N]; a second
// kernel sums the S partials in a fixed order (deterministic) and applies the epilogue. The output
// is still rounded once, from fp32.
//
// Note [8-bit operands]
// An 8-bit operand (GemmCodes in gemm.h: codes of e4m3, e5m2, e3m2, e2m3 or e2m1, element (r, c)
// standing for to_float(code) * the scale of its block: a power of two, or an E4M3 value under the
// nvfp4 rule, Note [Two-level scales] in scale_formulas.h) runs on the bf16 Tensor Core
// kernel; only the step from global to shared memory differs (CodeTileLoader). A chunk is 8
// codes, read as one 8-byte load (or two 4-byte ones), which the thread widens in registers to 8
// bf16 values and stores as the 16-byte vector a bf16 operand's chunk is: the shared tiles, the
// fragments, the K steps and split-K are the bf16 kernel's, and no pass writes a widened copy of
// the operand to global memory (which would cost 2 bytes written and read per code where the
// tiles read 1). The widening is exact: a code's value has at most 4 significant bits, and its
// product with a block scale (at most 4 too) at most 8, a bf16 value taken as the top half of its
// fp32 bits; a product
// below 2^-126 is read as a zero of its sign and one past fp32's range is inf, as the CPU's packing
// does (Note [8-bit GEMM operands] in tensor/cpu/gemm.cpp), so both devices multiply the same bf16
// values. Each block first writes the value of every code of both formats (bits8::to_float, 2 x
// 256 floats) to shared memory; a code is then one shared load and one fp32 multiply by its
// block's scale, read once per chunk when the scale blocks along K are multiples of 8 codes (MX's
// 32, DeepSeek's 128), else per code (the checked path). Elements outside the operand are 0, not
// 0 x scale (a NaN block's scale would make them NaN), and a scale is never read for them.
// Scales constant along K (per tensor, rowwise) factor out of each dot product and need not be
// powers of two: they are GemmFactors, applied by the epilogue to the fp32 sum with the bias,
// which may have any floating dtype, before C is rounded once. Only the layout of quantize()'s
// codes [rows, K] has a kernel instance (A and B K-contiguous), one per output dtype and tile
// configuration; codes in another layout, or whose rows do not start on 4-byte words (K not a
// multiple of 4), are copied first into rows padded to 16 bytes (Note [Staged operands]), still
// as codes.
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/gemm.h"
#include "tensor/core/fp8.h"

namespace mixtape::cuda {

namespace {

namespace wmma = nvcuda::wmma;

// bf16 and TF32 WMMA need sm_80; f16 WMMA sm_70. The host checks the device before launching;
// this keeps a build for an older architecture compiling.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr bool kHasSm80Mma = false;
#else
constexpr bool kHasSm80Mma = true;
#endif

// The block scales of an 8-bit operand as its tiles meet them: the code at outer index o (the
// codes' row) and inner index i (k) has scale[(o / ob) * os + (i / ib) * is] (Note [8-bit operands]).
struct CodeScales {
  const float* scale;  // nullptr: 1
  uint32_t ob, ib;     // M, N, K and the blocks fit in 32 bits (gemm() checks)
  int64_t os, is;
  bool per_element;  // ib is not a multiple of a chunk's 8 codes: a scale per code
};

// What the 8-bit instances (Src = uint8_t) read besides the common arguments.
struct CodeArgs {
  bits8::Format a_format, b_format;
  CodeScales a_scales, b_scales;
  GemmFactor row_factor, col_factor;  // the scales constant along K, applied to the fp32 sums
  ChanVec bias8;                      // the bias in its own dtype (p = nullptr: none)
};
struct NoCodeArgs {};

// Typed kernel arguments. blockIdx.z = batch_entry * splits + split; blockIdx.x = tile_m * tiles_n
// + tile_n. Strides in elements. bias has the input type. Src: the operands' element type, In
// itself, or uint8_t for 8-bit codes widened to In = bf16 (Note [8-bit operands]).
template <class In, class Out, class Src = In>
struct Args : std::conditional_t<std::is_same_v<Src, In>, NoCodeArgs, CodeArgs> {
  const Src* a;
  int64_t a_rs, a_cs, a_bs;
  const Src* b;
  int64_t b_rs, b_cs, b_bs;
  Out* c;
  int64_t c_rs, c_cs, c_bs;  // c_bs steps blockIdx.z (so a split-K workspace gets one slice per split)
  const In* bias;
  int64_t bias_stride;
  BiasAlong bias_along;
  float alpha, beta;
  bool relu;
  int64_t M, N, K;
  int64_t k_chunk;  // K range of one split (a multiple of BK); K when splits == 1
  int splits;
  int64_t tiles_n;
  int a_vec, b_vec;  // widest aligned load along the operand's contiguous dim, in bytes: 16, 8, 4, or 0 (none)
};

// out = act(alpha * acc (+ beta * C) + bias), rounded once (Note [Rounding on the device]). With
// 8-bit operands: act(alpha * acc * (row factor * column factor) (+ beta * C) + bias), the CPU's
// scaled_matmul_nt epilogue (tensor/cpu/quantize.cpp: sum * (sa[i] * sb[j]) + bias[j]).
template <class In, class Out, class Src>
__device__ __forceinline__ void store_output(const Args<In, Out, Src>& p, Out* c, int64_t m, int64_t n, float acc) {
  Out* dst = c + m * p.c_rs + n * p.c_cs;
  if constexpr (std::is_same_v<Src, In>) {
    float v = p.alpha * acc;
    if (p.beta != 0.0f) v += p.beta * load(*dst);
    if (p.bias_along == BiasAlong::cols) v += load(p.bias[n * p.bias_stride]);
    else if (p.bias_along == BiasAlong::rows) v += load(p.bias[m * p.bias_stride]);
    if (p.relu) v = v < 0.0f ? 0.0f : v;  // NaN passes through
    *dst = store<Out>(v);
  } else {
    const GemmFactor &fr = p.row_factor, &fc = p.col_factor;
    const float f =
        mul_rn(fr.s ? fr.s[(m / fr.block) * fr.stride] : 1.0f, fc.s ? fc.s[(n / fc.block) * fc.stride] : 1.0f);
    float v = mul_rn(mul_rn(p.alpha, acc), f);
    if (p.beta != 0.0f) v = add_rn(v, mul_rn(p.beta, load(*dst)));
    float bias = 0.0f;  // read exactly as float (f32, f16 or bf16)
    if (p.bias_along == BiasAlong::cols) bias = float(chan_read(p.bias8, n));
    else if (p.bias_along == BiasAlong::rows) bias = float(chan_read(p.bias8, m));
    v = add_rn(v, bias);
    if (p.relu) v = v < 0.0f ? 0.0f : v;
    *dst = store<Out>(v);
  }
}

// The slow path of TileLoader: kVec elements (o, i + e) one by one, 0 outside [0, o_end) x
// [0, i_end). Out of line: it runs only at ragged edges and for unaligned or strided operands, and
// inlined it would hold registers across the whole main loop.
template <class In>
__device__ __noinline__ uint4 load_vector_checked(const In* base, int64_t os, int64_t is, int64_t o, int64_t i,
                                                  int64_t o_end, int64_t i_end) {
  constexpr int kVec = int(16 / sizeof(In));
  In tmp[kVec];
  for (int e = 0; e < kVec; ++e) {
    tmp[e] = store<In>(0.0f);
    if (o < o_end && i + e < i_end) tmp[e] = base[o * os + (i + e) * is];
  }
  uint4 out;
  memcpy(&out, tmp, sizeof(uint4));
  return out;
}

// Loads a ROWS x COLS tile of an operand into registers and stores it to shared memory as
// [ROWS][ld]. Tile element (r, c) is operand element (outer o0 + r, inner i0 + c) at
// base[o * os + i * is]; "inner" is the operand's contiguous dim when it has one. Elements with
// o >= o_end or i >= i_end read as 0. Each of THREADS threads moves PER_THREAD vectors of 16
// bytes; consecutive threads take consecutive vectors along a row (coalesced when is == 1).
template <class In, int ROWS, int COLS, int THREADS>
struct TileLoader {
  static constexpr int kVec = int(16 / sizeof(In));
  static constexpr int kVecPerRow = COLS / kVec;
  static constexpr int kPerThread = ROWS * kVecPerRow / THREADS;
  static_assert(COLS % kVec == 0 && (ROWS * kVecPerRow) % THREADS == 0, "tile does not split into 16-byte vectors");

  uint4 regs[kPerThread];

  // vec (bytes): is == 1 and the base, os and the batch stride are multiples of vec bytes
  // (checked by the host), so a chunk whose elements are all in range is 16 / vec aligned loads.
  // vec is the same for every thread: the branch does not diverge.
  __device__ __forceinline__ void load(const In* base, int64_t os, int64_t is, int64_t o0, int64_t i0, int64_t o_end,
                                       int64_t i_end, int vec) {
#pragma unroll
    for (int v = 0; v < kPerThread; ++v) {
      const int idx = int(threadIdx.x) + v * THREADS;
      const int64_t o = o0 + idx / kVecPerRow, i = i0 + (idx % kVecPerRow) * kVec;
      const In* src = base + o * os + i;
      if (vec == 0 || o >= o_end || i + kVec > i_end) {
        regs[v] = load_vector_checked(base, os, is, o, i, o_end, i_end);  // ragged edge, or no unit stride
      } else if (vec == 16) {
        regs[v] = __ldg(reinterpret_cast<const uint4*>(src));
      } else if (vec == 8) {
        const uint2 lo = __ldg(reinterpret_cast<const uint2*>(src)),
                    hi = __ldg(reinterpret_cast<const uint2*>(src) + 1);
        regs[v] = make_uint4(lo.x, lo.y, hi.x, hi.y);
      } else {
        const unsigned* w = reinterpret_cast<const unsigned*>(src);
        regs[v] = make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
      }
    }
  }

  __device__ __forceinline__ void store(In* smem, int ld) const {
#pragma unroll
    for (int v = 0; v < kPerThread; ++v) {
      const int idx = int(threadIdx.x) + v * THREADS;
      *reinterpret_cast<uint4*>(smem + (idx / kVecPerRow) * ld + (idx % kVecPerRow) * kVec) = regs[v];
    }
  }
};

// ---- 8-bit operands (Note [8-bit operands]) -----------------------------------------------------

// Chunk of an 8-bit operand: 8 codes, widened to 8 bf16 (the 16 bytes a bf16 chunk is).
constexpr int kCodeChunkBytes = 8;

// The bf16 bits of v, an fp32 product of a code's value and a power of two (a bf16 value): its
// top half, or a zero of its sign below 2^-126, as the CPU's widen_code_bf16.
__device__ __forceinline__ uint32_t bf16_bits_daz(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x7F800000u) == 0 ? (b >> 16) & 0x8000u : b >> 16;
}

__device__ __forceinline__ float code_scale(const float* scale, uint32_t ob, uint32_t ib, int64_t os, int64_t is,
                                            int64_t o, int64_t i) {
  return scale ? __ldg(scale + int64_t(uint32_t(o) / ob) * os + int64_t(uint32_t(i) / ib) * is) : 1.0f;
}
__device__ __forceinline__ float code_scale(const CodeScales& w, int64_t o, int64_t i) {
  return code_scale(w.scale, w.ob, w.ib, w.os, w.is, o, i);
}

// Codes `lo` and `hi` (byte `shift` / 8 and the next of `word`) widened with scale s, as one
// 32-bit word of two bf16 (the first in the low half). table: the 256 code values.
__device__ __forceinline__ uint32_t widen_pair(uint32_t word, int shift, float s, const float* table) {
  const uint32_t lo = (word >> shift) & 0xFFu, hi = (word >> (shift + 8)) & 0xFFu;
  return bf16_bits_daz(mul_rn(table[lo], s)) | bf16_bits_daz(mul_rn(table[hi], s)) << 16;
}

// The slow path of CodeTileLoader: codes (o, i + e) one by one, each with its own scale (the
// scale arguments are CodeScales's, one by one: a struct argument would go through the stack), 0
// outside [0, o_end) x [0, i_end). Out of line, as load_vector_checked.
__device__ __noinline__ uint4 widen_codes_checked(const uint8_t* base, int64_t os, int64_t is, int64_t o, int64_t i,
                                                  int64_t o_end, int64_t i_end, const float* scale, uint32_t s_ob,
                                                  uint32_t s_ib, int64_t s_os, int64_t s_is, const float* table) {
  uint32_t h[kCodeChunkBytes];
#pragma unroll
  for (int e = 0; e < kCodeChunkBytes; ++e) {
    h[e] = 0u;
    if (o < o_end && i + e < i_end)
      h[e] = bf16_bits_daz(
          mul_rn(table[base[o * os + (i + e) * is]], code_scale(scale, s_ob, s_ib, s_os, s_is, o, i + e)));
  }
  return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
}

// TileLoader for 8-bit codes: the same tile of bf16 chunks (ROWS x COLS, stored by TileLoader's
// store), each loaded as 8 codes and widened in registers. vec (bytes): 8 or 4 when the codes'
// rows allow those loads (the host checks), 0 for the checked path.
template <int ROWS, int COLS, int THREADS>
struct CodeTileLoader : TileLoader<__nv_bfloat16, ROWS, COLS, THREADS> {
  using Base = TileLoader<__nv_bfloat16, ROWS, COLS, THREADS>;
  static_assert(Base::kVec == kCodeChunkBytes, "a chunk of codes widens to one 16-byte bf16 chunk");

  __device__ __forceinline__ void load(const uint8_t* base, int64_t os, int64_t is, int64_t o0, int64_t i0,
                                       int64_t o_end, int64_t i_end, int vec, const CodeScales& w, const float* table) {
#pragma unroll
    for (int v = 0; v < Base::kPerThread; ++v) {
      const int idx = int(threadIdx.x) + v * THREADS;
      const int64_t o = o0 + idx / Base::kVecPerRow, i = i0 + (idx % Base::kVecPerRow) * Base::kVec;
      if (vec == 0 || w.per_element || o >= o_end || i + Base::kVec > i_end) {
        this->regs[v] = widen_codes_checked(base, os, is, o, i, o_end, i_end, w.scale, w.ob, w.ib, w.os, w.is, table);
        continue;
      }
      const uint8_t* src = base + o * os + i;
      uint2 raw;
      if (vec == 8) {
        raw = __ldg(reinterpret_cast<const uint2*>(src));
      } else {
        const unsigned* q = reinterpret_cast<const unsigned*>(src);
        raw = make_uint2(__ldg(q), __ldg(q + 1));
      }
      const float s = code_scale(w, o, i);  // one block along the chunk (not per_element)
      this->regs[v] = make_uint4(widen_pair(raw.x, 0, s, table), widen_pair(raw.x, 16, s, table),
                                 widen_pair(raw.y, 0, s, table), widen_pair(raw.y, 16, s, table));
    }
  }
};

// SmemTiles::load for 8-bit operands: A rows m, B rows n, both with k inner (K-contiguous).
// tables: [2][256] code values, A's then B's.
template <class LA, class LB, class P>
__device__ __forceinline__ void load_code_tiles(LA& la, LB& lb, const uint8_t* a, const uint8_t* b, const P& p,
                                                int64_t m0, int64_t n0, int64_t k0, int64_t k_end,
                                                const float* tables) {
  la.load(a, p.a_rs, p.a_cs, m0, k0, p.M, k_end, p.a_vec, p.a_scales, tables);
  lb.load(b, p.b_cs, p.b_rs, n0, k0, p.N, k_end, p.b_vec, p.b_scales, tables + 256);
}

// Shared-memory geometry of the A and B tiles (Note [GEMM tiles]) for element type In.
template <class In, int BM, int BN, int BK, int PAD, bool A_K_CONTIG, bool B_N_CONTIG>
struct SmemTiles {
  static constexpr int kARows = A_K_CONTIG ? BM : BK, kACols = A_K_CONTIG ? BK : BM, kLda = kACols + PAD;
  static constexpr int kBRows = B_N_CONTIG ? BK : BN, kBCols = B_N_CONTIG ? BN : BK, kLdb = kBCols + PAD;
  static constexpr int kAElems = kARows * kLda, kBElems = kBRows * kLdb;
  static constexpr size_t kBytes = 2 * size_t(kAElems + kBElems) * sizeof(In);  // two stages
  // 16-byte vector stores need 16-byte rows; WMMA needs 32-byte aligned fragment pointers, which
  // holds when the rows are 16-byte multiples and each buffer is a 32-byte multiple.
  static_assert((kLda * sizeof(In)) % 16 == 0 && (kLdb * sizeof(In)) % 16 == 0,
                "shared rows must be 16-byte multiples");
  static_assert((kAElems * sizeof(In)) % 32 == 0 && (kBElems * sizeof(In)) % 32 == 0,
                "buffers must be 32-byte multiples");

  // A element (m, k) and B element (k, n) of the tile, as shared-memory indices.
  __device__ static constexpr int a_index(int m, int k) { return A_K_CONTIG ? m * kLda + k : k * kLda + m; }
  __device__ static constexpr int b_index(int k, int n) { return B_N_CONTIG ? k * kLdb + n : n * kLdb + k; }

  // Global -> registers for the K step starting at k0 (absolute); M, N and k_end bound the loads.
  template <class LA, class LB, class P>
  __device__ static void load(LA& la, LB& lb, const In* a, const In* b, const P& p, int64_t m0, int64_t n0, int64_t k0,
                              int64_t k_end) {
    if constexpr (A_K_CONTIG) la.load(a, p.a_rs, p.a_cs, m0, k0, p.M, k_end, p.a_vec);  // rows m, inner k
    else la.load(a, p.a_cs, p.a_rs, k0, m0, k_end, p.M, p.a_vec);                       // rows k, inner m
    if constexpr (B_N_CONTIG) lb.load(b, p.b_rs, p.b_cs, k0, n0, k_end, p.N, p.b_vec);  // rows k, inner n
    else lb.load(b, p.b_cs, p.b_rs, n0, k0, p.N, k_end, p.b_vec);                       // rows n, inner k
  }
};

// ---- Tensor Core kernel ----------------------------------------------------------------------

// WMMA shape per input type: 16-bit inputs m16n16k16 with BK = 32; TF32 m16n16k8 with BK = 16
// (the same 64 bytes of K per row, so shared memory stays under the 48 KiB static limit).
template <class In>
struct Mma;
template <>
struct Mma<__half> {
  using Elem = __half;
  static constexpr int kK = 16, kBK = 32, kPad = 8;
};
template <>
struct Mma<__nv_bfloat16> {
  using Elem = __nv_bfloat16;
  static constexpr int kK = 16, kBK = 32, kPad = 8;
};
template <>
struct Mma<float> {
  using Elem = wmma::precision::tf32;
  static constexpr int kK = 8, kBK = 16, kPad = 4;
};

// Block tile BM x BN with WARPS_M x WARPS_N warps, each owning a (BM/WARPS_M) x (BN/WARPS_N) warp
// tile of 16x16 accumulator fragments.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_>
struct TcConfig {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kWarpM = BM / WARPS_M, kWarpN = BN / WARPS_N;
  static constexpr int kFragM = kWarpM / 16, kFragN = kWarpN / 16;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tiles are made of 16x16 fragments");
};
using TcBig = TcConfig<128, 128, 2, 4>;  // 8 warps, warp tile 64x32 (4x2 fragments)
using TcSmall = TcConfig<64, 64, 2, 2>;  // 4 warps, warp tile 32x32 (2x2 fragments)

constexpr int kStageLd = 16 + 4;  // epilogue staging row (floats): a 16-byte multiple

// C tile = A tile x B tile on Tensor Cores (Note [GEMM tiles]). Tile sizes are compile-time
// (Cfg, Mma<In>); M, N, K, strides and batch are runtime, any values >= 0. Src = uint8_t: 8-bit
// operands widened to In = bf16 as the tiles are loaded (Note [8-bit operands]).
template <class In, class Out, class Cfg, bool A_K_CONTIG, bool B_N_CONTIG, class Src = In>
__global__ void __launch_bounds__(Cfg::kThreads) wmma_gemm_kernel(const Args<In, Out, Src> p) {
  if constexpr (std::is_same_v<In, __half> || kHasSm80Mma) {
    constexpr bool kCodes = !std::is_same_v<Src, In>;
    static_assert(!kCodes || (std::is_same_v<In, __nv_bfloat16> && A_K_CONTIG && !B_N_CONTIG),
                  "8-bit operands: bf16 tiles, A and B K-contiguous");
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Mma<In>::kBK, KS = Mma<In>::kK;
    using Tiles = SmemTiles<In, BM, BN, BK, Mma<In>::kPad, A_K_CONTIG, B_N_CONTIG>;
    constexpr size_t kStageBytes = size_t(Cfg::kThreads / 32) * 16 * kStageLd * sizeof(float);
    constexpr size_t kSmemBytes = Tiles::kBytes > kStageBytes ? Tiles::kBytes : kStageBytes;
    constexpr size_t kTableBytes = kCodes ? 2 * 256 * sizeof(float) : 0;  // the code values, after the tiles
    __shared__ __align__(128) unsigned char smem[kSmemBytes + kTableBytes];
    In* const a_s = reinterpret_cast<In*>(smem);  // [2][kAElems]
    In* const b_s = a_s + 2 * Tiles::kAElems;     // [2][kBElems]

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int wm = (warp / Cfg::WARPS_N) * Cfg::kWarpM, wn = (warp % Cfg::WARPS_N) * Cfg::kWarpN;
    const int64_t m0 = int64_t(blockIdx.x / p.tiles_n) * BM, n0 = int64_t(blockIdx.x % p.tiles_n) * BN;
    const int64_t z = blockIdx.z, entry = z / p.splits, split = z % p.splits;
    const int64_t k_begin = split * p.k_chunk, k_end = min(p.K, k_begin + p.k_chunk);
    const Src* a = p.a + entry * p.a_bs;
    const Src* b = p.b + entry * p.b_bs;
    Out* c = p.c + z * p.c_bs;

    using ALayout = std::conditional_t<A_K_CONTIG, wmma::row_major, wmma::col_major>;
    using BLayout = std::conditional_t<B_N_CONTIG, wmma::row_major, wmma::col_major>;
    using Elem = typename Mma<In>::Elem;
    wmma::fragment<wmma::accumulator, 16, 16, KS, float> acc[Cfg::kFragM][Cfg::kFragN];
#pragma unroll
    for (int i = 0; i < Cfg::kFragM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    using LA = std::conditional_t<kCodes, CodeTileLoader<Tiles::kARows, Tiles::kACols, Cfg::kThreads>,
                                  TileLoader<In, Tiles::kARows, Tiles::kACols, Cfg::kThreads>>;
    using LB = std::conditional_t<kCodes, CodeTileLoader<Tiles::kBRows, Tiles::kBCols, Cfg::kThreads>,
                                  TileLoader<In, Tiles::kBRows, Tiles::kBCols, Cfg::kThreads>>;
    LA la;
    LB lb;
    [[maybe_unused]] float* const tables = reinterpret_cast<float*>(smem + kSmemBytes);  // [2][256], kCodes only
    if constexpr (kCodes) {
      const bits8::Format fa = p.a_format, fb = p.b_format;  // by value: nvcc refuses references to kE4M3 & co
      for (int t = int(threadIdx.x); t < 256; t += Cfg::kThreads) {
        tables[t] = bits8::to_float(uint8_t(t), fa);
        tables[256 + t] = bits8::to_float(uint8_t(t), fb);
      }
      __syncthreads();  // the tables are read from the first load on
    }
    const int64_t steps = k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0;
    if (steps > 0) {
      if constexpr (kCodes) load_code_tiles(la, lb, a, b, p, m0, n0, k_begin, k_end, tables);
      else Tiles::load(la, lb, a, b, p, m0, n0, k_begin, k_end);
      la.store(a_s, Tiles::kLda);
      lb.store(b_s, Tiles::kLdb);
      __syncthreads();
    }
    for (int64_t t = 0; t < steps; ++t) {
      const int cur = int(t & 1);
      const bool more = t + 1 < steps;
      if (more) {  // in flight during the MMAs
        if constexpr (kCodes) load_code_tiles(la, lb, a, b, p, m0, n0, k_begin + (t + 1) * BK, k_end, tables);
        else Tiles::load(la, lb, a, b, p, m0, n0, k_begin + (t + 1) * BK, k_end);
      }
      const In* as = a_s + cur * Tiles::kAElems;
      const In* bs = b_s + cur * Tiles::kBElems;
#pragma unroll
      for (int kk = 0; kk < BK; kk += KS) {
        wmma::fragment<wmma::matrix_a, 16, 16, KS, Elem, ALayout> af[Cfg::kFragM];
        wmma::fragment<wmma::matrix_b, 16, 16, KS, Elem, BLayout> bf[Cfg::kFragN];
#pragma unroll
        for (int i = 0; i < Cfg::kFragM; ++i) {
          wmma::load_matrix_sync(af[i], as + Tiles::a_index(wm + i * 16, kk), Tiles::kLda);
          if constexpr (std::is_same_v<In, float>)
            for (int e = 0; e < af[i].num_elements; ++e) af[i].x[e] = wmma::__float_to_tf32(af[i].x[e]);
        }
#pragma unroll
        for (int j = 0; j < Cfg::kFragN; ++j) {
          wmma::load_matrix_sync(bf[j], bs + Tiles::b_index(kk, wn + j * 16), Tiles::kLdb);
          if constexpr (std::is_same_v<In, float>)
            for (int e = 0; e < bf[j].num_elements; ++e) bf[j].x[e] = wmma::__float_to_tf32(bf[j].x[e]);
        }
#pragma unroll
        for (int i = 0; i < Cfg::kFragM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kFragN; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
      }
      if (more) {
        la.store(a_s + (cur ^ 1) * Tiles::kAElems, Tiles::kLda);
        lb.store(b_s + (cur ^ 1) * Tiles::kBElems, Tiles::kLdb);
      }
      __syncthreads();  // step t's reads of `cur` are done before step t+1 overwrites it
    }

    // Epilogue: the operand buffers are free (the loop ended with a barrier, or never ran).
    float* stage = reinterpret_cast<float*>(smem) + warp * 16 * kStageLd;
#pragma unroll
    for (int i = 0; i < Cfg::kFragM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kFragN; ++j) {
        const int64_t rb = m0 + wm + i * 16, cb = n0 + wn + j * 16;
        if (rb >= p.M || cb >= p.N) continue;  // warp-uniform: the whole fragment is outside C
        wmma::store_matrix_sync(stage, acc[i][j], kStageLd, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {  // lanes 0-15 and 16-31 write two 16-wide rows
          const int r = e / 16, cc = e % 16;
          if (rb + r < p.M && cb + cc < p.N) store_output(p, c, rb + r, cb + cc, stage[r * kStageLd + cc]);
        }
        __syncwarp();  // the next fragment overwrites `stage`
      }
  } else {
    __trap();  // the host never launches this on a device below sm_80
  }
}

// ---- exact fp32 SIMT kernel ------------------------------------------------------------------

// Block tile BM x BN, 256 threads as 16 x 16, each thread a (BM/16) x (BN/16) register tile at
// rows ty + 16 i and columns tx + 16 j (strided, so a warp's shared reads are broadcasts or
// consecutive); BK = 16. Products and sums are fp32 FMAs, in K order within each split.
template <int BM_, int BN_>
struct SimtConfig {
  static constexpr int BM = BM_, BN = BN_, kThreads = 256, kTM = BM / 16, kTN = BN / 16;
};
using SimtBig = SimtConfig<128, 128>;
using SimtSmall = SimtConfig<64, 64>;

template <class Cfg, bool A_K_CONTIG, bool B_N_CONTIG>
__global__ void __launch_bounds__(256) simt_gemm_kernel(const Args<float, float> p) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = 16;
  using Tiles = SmemTiles<float, BM, BN, BK, 4, A_K_CONTIG, B_N_CONTIG>;
  __shared__ __align__(128) unsigned char smem[Tiles::kBytes];
  float* const a_s = reinterpret_cast<float*>(smem);
  float* const b_s = a_s + 2 * Tiles::kAElems;

  const int tx = int(threadIdx.x) % 16, ty = int(threadIdx.x) / 16;
  const int64_t m0 = int64_t(blockIdx.x / p.tiles_n) * BM, n0 = int64_t(blockIdx.x % p.tiles_n) * BN;
  const int64_t z = blockIdx.z, entry = z / p.splits, split = z % p.splits;
  const int64_t k_begin = split * p.k_chunk, k_end = min(p.K, k_begin + p.k_chunk);
  const float* a = p.a + entry * p.a_bs;
  const float* b = p.b + entry * p.b_bs;
  float* c = p.c + z * p.c_bs;

  float acc[Cfg::kTM][Cfg::kTN];
#pragma unroll
  for (int i = 0; i < Cfg::kTM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kTN; ++j) acc[i][j] = 0.0f;

  TileLoader<float, Tiles::kARows, Tiles::kACols, Cfg::kThreads> la;
  TileLoader<float, Tiles::kBRows, Tiles::kBCols, Cfg::kThreads> lb;
  const int64_t steps = k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0;
  if (steps > 0) {
    Tiles::load(la, lb, a, b, p, m0, n0, k_begin, k_end);
    la.store(a_s, Tiles::kLda);
    lb.store(b_s, Tiles::kLdb);
    __syncthreads();
  }
  for (int64_t t = 0; t < steps; ++t) {
    const int cur = int(t & 1);
    const bool more = t + 1 < steps;
    if (more) Tiles::load(la, lb, a, b, p, m0, n0, k_begin + (t + 1) * BK, k_end);
    const float* as = a_s + cur * Tiles::kAElems;
    const float* bs = b_s + cur * Tiles::kBElems;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float av[Cfg::kTM], bv[Cfg::kTN];
#pragma unroll
      for (int i = 0; i < Cfg::kTM; ++i) av[i] = as[Tiles::a_index(ty + 16 * i, kk)];
#pragma unroll
      for (int j = 0; j < Cfg::kTN; ++j) bv[j] = bs[Tiles::b_index(kk, tx + 16 * j)];
#pragma unroll
      for (int i = 0; i < Cfg::kTM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    if (more) {
      la.store(a_s + (cur ^ 1) * Tiles::kAElems, Tiles::kLda);
      lb.store(b_s + (cur ^ 1) * Tiles::kBElems, Tiles::kLdb);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < Cfg::kTM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kTN; ++j) {
      const int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < p.M && n < p.N) store_output(p, c, m, n, acc[i][j]);
    }
}

// ---- split-K finish (Note [Split-K]) -----------------------------------------------------------

// C[e][m, n] = epilogue(sum over s of ws[(e * splits + s) * M * N + m * N + n]) for `entries`
// batch entries; p is the caller's epilogue (C, strides, bias, activation).
template <class In, class Out, class Src>
__global__ void splitk_finish_kernel(const float* ws, const Args<In, Out, Src> p, int64_t entries) {
  const int64_t mn = p.M * p.N, total = entries * mn;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = idx / mn, r = idx % mn, m = r / p.N, n = r % p.N;
    const float* src = ws + e * p.splits * mn + r;
    float sum = 0.0f;
    for (int s = 0; s < p.splits; ++s) sum += src[s * mn];
    store_output(p, p.c + e * p.c_bs, m, n, sum);
  }
}

// ---- staging (Note [Staged operands]) ----------------------------------------------------------

// dst[(e * outer + o) * ld + i] = src[e * bs + o * os + i * is] for e < entries, o < outer,
// i < inner: an exact copy of an operand's elements (W: a word of the element's size) into rows
// ld elements apart. One thread per element, i fastest (coalesced writes).
template <class W>
__global__ void stage_rows_kernel(const W* src, int64_t os, int64_t is, int64_t bs, int64_t entries, int64_t outer,
                                  int64_t inner, W* dst, int64_t ld) {
  const int64_t total = entries * outer * inner;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % inner, q = idx / inner, o = q % outer, e = q / outer;
    dst[q * ld + i] = src[e * bs + o * os + i * is];
  }
}

// ---- host side ----------------------------------------------------------------------------------

std::atomic<uint64_t> loads_vec16{0}, loads_vec8{0}, loads_vec4{0}, loads_elementwise{0}, loads_edge_only{0},
    loads_staged{0};

void record_load_path(int bytes, bool staged) {
  std::atomic<uint64_t>& c = bytes == 16                 ? loads_vec16
                             : bytes == 8                ? loads_vec8
                             : bytes == 4                ? loads_vec4
                             : bytes == kGemmNoFullChunk ? loads_edge_only
                                                         : loads_elementwise;
  c.fetch_add(1, std::memory_order_relaxed);
  if (staged) loads_staged.fetch_add(1, std::memory_order_relaxed);
}

int device_attribute(cudaDeviceAttr attr, int device) {
  int v = 0;
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Which dim of each operand is contiguous picks the kernel (Note [GEMM tiles]); a general strided
// operand takes the K-contiguous (A) or N-contiguous (B) path with element-by-element loads.
bool a_k_contiguous(const GemmOperand& a) { return a.col_stride == 1 || a.row_stride != 1; }
bool b_n_contiguous(const GemmOperand& b) { return b.col_stride == 1 || b.row_stride != 1; }

// 8-bit operands (Note [8-bit operands]) are read K-contiguous whatever their strides: A with k
// along its columns, B along its rows.
bool is_codes(const GemmOperand& op) { return is_8bit(op.codes.format); }
bool a_k_layout(const GemmOperand& a) { return is_codes(a) || a_k_contiguous(a); }
bool b_n_layout(const GemmOperand& b) { return !is_codes(b) && b_n_contiguous(b); }

// The widest aligned load along an operand's contiguous dim (Note [GEMM tiles]), in bytes: 16, 8
// or 4 (at most `chunk`, the bytes of one chunk: 16, or 8 codes) when the inner stride is 1 and
// the base, every row start and every batch entry are multiples of it; 0 (element by element)
// otherwise. 4-byte loads of 2-byte elements need an even row stride; f32 elements are always
// 4-byte aligned. inner_is_cols: the contiguous dim is the column dim (A K-contiguous, B
// N-contiguous).
int vector_bytes(const GemmOperand& op, bool inner_is_cols, int elem, int chunk = 16) {
  const int64_t inner = inner_is_cols ? op.col_stride : op.row_stride;
  const int64_t outer = inner_is_cols ? op.row_stride : op.col_stride;
  if (inner != 1) return 0;
  for (int bytes : {16, 8, 4})
    if (bytes <= chunk && bytes >= elem && (outer * elem) % bytes == 0 && (op.batch_stride * elem) % bytes == 0 &&
        reinterpret_cast<uintptr_t>(op.ptr) % bytes == 0)
      return bytes;
  return 0;
}

// A dim of extent 1 is never stepped along, so its stride is free, and so is the batch stride of
// a single entry: set them to 0, and when the other dim has unit stride make it the contiguous
// one. So DCGAN's noise z_n [nz, 1] (strides 1 and 1) is a K-contiguous column read with vectors,
// not nz rows of one element (Note [Staged operands]).
GemmOperand canonical(GemmOperand op, int64_t rows, int64_t cols, int64_t batch) {
  if (batch == 1) op.batch_stride = 0;
  if (rows == 1 && op.col_stride == 1) op.row_stride = 0;
  else if (cols == 1 && op.row_stride == 1) op.col_stride = 0;
  return op;
}

// How gemm() loads one operand, logical [rows, cols] (A: [M, K], B: [K, N]), already canonical.
struct OperandLoad {
  int bytes = 0;        // the widest load of its full chunks (16, 8, 4), or kGemmNoFullChunk
  bool staged = false;  // copied first into a row-padded workspace (Note [Staged operands])
};
// chunk: the bytes of one chunk (16; 8 codes for an 8-bit operand).
OperandLoad operand_load(const GemmOperand& op, bool inner_is_cols, int64_t rows, int64_t cols, int elem,
                         int chunk = 16) {
  const int64_t inner = inner_is_cols ? cols : rows;
  if (inner * elem < chunk) return {.bytes = kGemmNoFullChunk};  // every chunk straddles the ragged edge
  const int bytes = vector_bytes(op, inner_is_cols, elem, chunk);
  if (bytes > 0) return {.bytes = bytes};
  return {.bytes = chunk, .staged = true};
}

// Copies `op` (logical [rows, cols], its contiguous dim the columns when inner_is_cols, `batch`
// entries) into `ws` with that dim's rows padded to 16 bytes, and returns the copy as an operand
// of the same orientation (Note [Staged operands]). A broadcast operand (batch stride 0) is
// copied once.
GemmOperand stage_operand(const GemmOperand& op, bool inner_is_cols, int64_t rows, int64_t cols, int64_t batch,
                          DType dtype, int device, Stream stream, Workspace& ws) {
  const int64_t elem = int64_t(dtype_size(dtype)), per_vec = 16 / elem;
  const int64_t inner = inner_is_cols ? cols : rows, outer = inner_is_cols ? rows : cols;
  const int64_t is = inner_is_cols ? op.col_stride : op.row_stride, os = inner_is_cols ? op.row_stride : op.col_stride;
  const int64_t entries = op.batch_stride == 0 ? 1 : batch, ld = (inner + per_vec - 1) / per_vec * per_vec;
  ws = Workspace({entries * outer * ld}, dtype, Device::cuda(device));
  const int64_t total = entries * outer * inner;
  if (elem == 1) {  // 8-bit codes (Note [8-bit operands])
    stage_rows_kernel<uint8_t><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const uint8_t*>(op.ptr), os, is,
                                                                       op.batch_stride, entries, outer, inner,
                                                                       static_cast<uint8_t*>(ws.raw_data()), ld);
  } else if (elem == 2) {
    stage_rows_kernel<uint16_t><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const uint16_t*>(op.ptr), os, is,
                                                                        op.batch_stride, entries, outer, inner,
                                                                        static_cast<uint16_t*>(ws.raw_data()), ld);
  } else {
    stage_rows_kernel<uint32_t><<<grid_for(total), kBlock, 0, stream>>>(static_cast<const uint32_t*>(op.ptr), os, is,
                                                                        op.batch_stride, entries, outer, inner,
                                                                        static_cast<uint32_t*>(ws.raw_data()), ld);
  }
  MT_CUDA_CHECK_LAUNCH("stage_rows_kernel");
  const int64_t staged_bs = entries == 1 ? 0 : outer * ld;
  if (inner_is_cols) return {ws.raw_data(), ld, 1, staged_bs, op.codes};
  return {ws.raw_data(), 1, ld, staged_bs, op.codes};
}

// The kernel instance for one layout combination: A K-contiguous (row-major) or M-contiguous,
// B N-contiguous (row-major) or K-contiguous.
template <template <bool, bool> class Kernel, class A>
void launch_layout(bool a_k, bool b_n, dim3 grid, int threads, const A& args, Stream stream, const char* name) {
  if (a_k && b_n) Kernel<true, true>::fn<<<grid, threads, 0, stream>>>(args);
  else if (a_k) Kernel<true, false>::fn<<<grid, threads, 0, stream>>>(args);
  else if (b_n) Kernel<false, true>::fn<<<grid, threads, 0, stream>>>(args);
  else Kernel<false, false>::fn<<<grid, threads, 0, stream>>>(args);
  MT_CUDA_CHECK_LAUNCH(name);
}

template <class In, class Out, class Cfg>
struct Wmma {
  template <bool AK, bool BN>
  struct K {
    static constexpr auto fn = wmma_gemm_kernel<In, Out, Cfg, AK, BN>;
  };
};
template <class Cfg>
struct Simt {
  template <bool AK, bool BN>
  struct K {
    static constexpr auto fn = simt_gemm_kernel<Cfg, AK, BN>;
  };
};

// The 8-bit arguments (Note [8-bit operands]) of p, whose operands are codes.
CodeScales code_scales(const GemmCodes& g, bool k_along_cols) {  // A: k along the columns; B: along the rows
  CodeScales w{};
  w.scale = g.scale;
  w.ob = uint32_t(k_along_cols ? g.br : g.bc), w.ib = uint32_t(k_along_cols ? g.bc : g.br);
  w.os = k_along_cols ? g.srs : g.scs, w.is = k_along_cols ? g.scs : g.srs;
  w.per_element = g.scale != nullptr && w.ib % kCodeChunkBytes != 0;
  return w;
}

CodeArgs code_args(const GemmParams& p) {
  CodeArgs c{};
  c.a_format = format_of(p.a.codes.format), c.b_format = format_of(p.b.codes.format);
  c.a_scales = code_scales(p.a.codes, true), c.b_scales = code_scales(p.b.codes, false);
  c.row_factor = p.row_factor, c.col_factor = p.col_factor;
  if (p.bias != nullptr) {
    c.bias8.p = const_cast<void*>(p.bias);
    c.bias8.stride = p.bias_stride;
    c.bias8.kind = p.bias_dtype == DType::f32 ? 0 : p.bias_dtype == DType::f16 ? 2 : 3;  // ChanVec's kinds
  }
  return c;
}

// Runs the GEMM with tile configuration Cfg (BM, BN, kThreads) and K step bk; `kernel_of<Out2>`
// launches the main kernel for an output type (Out, or float for split-K partials). Src: the
// operands' element type (In, or uint8_t for 8-bit codes).
template <class In, class Out, class Cfg, int BK, class Src = In, class Launch>
void run_tiles(const GemmParams& p, bool a_k, bool b_n, Stream stream, int sms, Launch&& launch) {
  constexpr bool kCodes = !std::is_same_v<Src, In>;
  Args<In, Out, Src> args{};
  args.a = static_cast<const Src*>(p.a.ptr);
  args.a_rs = p.a.row_stride, args.a_cs = p.a.col_stride, args.a_bs = p.a.batch_stride;
  args.b = static_cast<const Src*>(p.b.ptr);
  args.b_rs = p.b.row_stride, args.b_cs = p.b.col_stride, args.b_bs = p.b.batch_stride;
  args.c = static_cast<Out*>(p.c);
  args.c_rs = p.c_row_stride, args.c_cs = p.c_col_stride, args.c_bs = p.c_batch_stride;
  args.bias = static_cast<const In*>(p.bias);
  args.bias_stride = p.bias_stride;
  args.bias_along = p.bias ? p.bias_along : BiasAlong::none;
  args.alpha = p.alpha, args.beta = p.beta;
  args.relu = p.activation == Activation::relu;
  args.M = p.M, args.N = p.N, args.K = p.K;
  args.k_chunk = std::max<int64_t>(p.K, 1);
  args.splits = 1;
  args.tiles_n = ceil_div(p.N, Cfg::BN);
  if constexpr (kCodes) {
    static_cast<CodeArgs&>(args) = code_args(p);
    args.a_vec = vector_bytes(p.a, a_k, 1, kCodeChunkBytes);
    args.b_vec = vector_bytes(p.b, b_n, 1, kCodeChunkBytes);
  } else {
    args.a_vec = vector_bytes(p.a, a_k, int(sizeof(In)));
    args.b_vec = vector_bytes(p.b, b_n, int(sizeof(In)));
  }
  const int64_t tiles = ceil_div(p.M, Cfg::BM) * args.tiles_n;
  MT_CHECK(tiles <= int64_t(INT32_MAX), "gemm: ", p.M, " x ", p.N, " output needs too many tiles");

  // Split-K (Note [Split-K]) when the tiles cannot fill the GPU and K is long: aim for two waves,
  // at least 4 K steps per split, at most 256 splits.
  const int64_t k_steps = ceil_div(p.K, BK);
  int64_t splits = 1;
  if (tiles * p.batch < sms && k_steps >= 8)
    splits = std::min<int64_t>({ceil_div(2 * sms, tiles * p.batch), k_steps / 4, 256});
  if (splits > 1) {
    args.k_chunk = ceil_div(k_steps, splits) * BK;
    splits = ceil_div(p.K, args.k_chunk);
  }
  args.splits = int(splits);

  // gridDim.z <= 65535: batch entries in chunks.
  const int64_t per_launch = std::max<int64_t>(1, 65535 / splits);
  for (int64_t e0 = 0; e0 < p.batch; e0 += per_launch) {
    const int64_t entries = std::min(per_launch, p.batch - e0);
    Args<In, Out, Src> part = args;
    part.a += e0 * args.a_bs;
    part.b += e0 * args.b_bs;
    part.c += e0 * args.c_bs;
    const dim3 grid(unsigned(tiles), 1, unsigned(entries * splits));
    if (splits == 1) {
      launch(grid, part);
      continue;
    }
    Workspace ws({entries * splits * p.M * p.N}, DType::f32, Device::cuda(p.device));
    Args<In, float, Src> partial{};
    if constexpr (kCodes) {  // the operands' widening; the factors and the bias wait for the finishing pass
      static_cast<CodeArgs&>(partial) = static_cast<const CodeArgs&>(args);
      partial.row_factor = {}, partial.col_factor = {}, partial.bias8 = {};
    }
    partial.a = part.a, partial.a_rs = args.a_rs, partial.a_cs = args.a_cs, partial.a_bs = args.a_bs;
    partial.b = part.b, partial.b_rs = args.b_rs, partial.b_cs = args.b_cs, partial.b_bs = args.b_bs;
    partial.c = static_cast<float*>(ws.raw_data());
    partial.c_rs = p.N, partial.c_cs = 1, partial.c_bs = p.M * p.N;  // slice per (entry, split)
    partial.bias = nullptr, partial.bias_stride = 0, partial.bias_along = BiasAlong::none;
    partial.alpha = 1.0f, partial.beta = 0.0f, partial.relu = false;
    partial.M = p.M, partial.N = p.N, partial.K = p.K;
    partial.k_chunk = args.k_chunk, partial.splits = args.splits, partial.tiles_n = args.tiles_n;
    partial.a_vec = args.a_vec, partial.b_vec = args.b_vec;
    launch(grid, partial);
    const int64_t total = entries * p.M * p.N;
    splitk_finish_kernel<In, Out, Src><<<grid_for(total), kBlock, 0, stream>>>(partial.c, part, entries);
    MT_CUDA_CHECK_LAUNCH("splitk_finish_kernel");
  }
}

template <class In, class Out>
void run_gemm(const GemmParams& p, bool tf32, Stream stream) {
  const bool a_k = a_k_contiguous(p.a), b_n = b_n_contiguous(p.b);
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, p.device);
  const int64_t big_tiles = ceil_div(p.M, 128) * ceil_div(p.N, 128) * p.batch;
  const bool big = big_tiles >= sms;  // 128x128 tiles once they fill one wave, else 64x64

  if constexpr (std::is_same_v<In, float>) {
    if (!tf32) {
      auto go = [&]<class Cfg>(Cfg) {
        run_tiles<float, float, Cfg, 16>(p, a_k, b_n, stream, sms, [&](dim3 grid, const auto& args) {
          launch_layout<Simt<Cfg>::template K>(a_k, b_n, grid, Cfg::kThreads, args, stream, "simt_gemm_kernel");
        });
      };
      if (big) go(SimtBig{});
      else go(SimtSmall{});
      return;
    }
  }
  auto go = [&]<class Cfg>(Cfg) {
    run_tiles<In, Out, Cfg, Mma<In>::kBK>(p, a_k, b_n, stream, sms, [&]<class A>(dim3 grid, const A& args) {
      using O = std::remove_pointer_t<decltype(args.c)>;
      launch_layout<Wmma<In, O, Cfg>::template K>(a_k, b_n, grid, Cfg::kThreads, args, stream, "wmma_gemm_kernel");
    });
  };
  if (big) go(TcBig{});
  else go(TcSmall{});
}

// 8-bit operands (Note [8-bit operands]): bf16 tiles, one layout (A and B K-contiguous), C of
// type Out.
template <class Out>
void run_code_gemm(const GemmParams& p, Stream stream) {
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, p.device);
  const bool big = ceil_div(p.M, 128) * ceil_div(p.N, 128) * p.batch >= sms;  // as run_gemm
  auto go = [&]<class Cfg>(Cfg) {
    run_tiles<__nv_bfloat16, Out, Cfg, Mma<__nv_bfloat16>::kBK, uint8_t>(p, true, false, stream, sms,
                                                                         [&](dim3 grid, const auto& args) {
      using O = std::remove_pointer_t<decltype(args.c)>;
      wmma_gemm_kernel<__nv_bfloat16, O, Cfg, true, false, uint8_t><<<grid, Cfg::kThreads, 0, stream>>>(args);
      MT_CUDA_CHECK_LAUNCH("wmma_gemm_kernel (8-bit operands)");
    });
  };
  if (big) go(TcBig{});
  else go(TcSmall{});
}

// What gemm() asks of a GEMM with 8-bit operands (GemmParams, Note [8-bit operands]).
void check_code_gemm(const GemmParams& p) {
  MT_CHECK(is_codes(p.a) && is_codes(p.b), "gemm: 8-bit operands come in pairs, got A ",
           dtype_name(is_codes(p.a) ? p.a.codes.format : p.in_dtype), " and B ",
           dtype_name(is_codes(p.b) ? p.b.codes.format : p.in_dtype));
  MT_CHECK(p.in_dtype == DType::bf16, "gemm: 8-bit operands are widened to bf16 (in_dtype), not ",
           dtype_name(p.in_dtype));
  MT_CHECK(p.batch == 1, "gemm: 8-bit operands take one batch entry, got ", p.batch);
  for (DType d : {p.out_dtype, p.bias != nullptr ? p.bias_dtype : DType::f32})
    MT_CHECK(d == DType::f32 || d == DType::f16 || d == DType::bf16,
             "gemm: with 8-bit operands C and the bias are f32, f16 or bf16, got ", dtype_name(d));
  constexpr int64_t kMax = INT32_MAX;
  MT_CHECK(p.M <= kMax && p.N <= kMax && p.K <= kMax, "gemm: 8-bit operands need M, N and K below 2^31, got ", p.M,
           " x ", p.N, " x ", p.K);
  for (const GemmCodes* g : {&p.a.codes, &p.b.codes})
    MT_CHECK(g->scale == nullptr || (g->br >= 1 && g->bc >= 1 && g->br <= kMax && g->bc <= kMax),
             "gemm: scale blocks of ", g->br, " x ", g->bc, " (each from 1 to 2^31 - 1)");
  for (const GemmFactor* f : {&p.row_factor, &p.col_factor})
    MT_CHECK(f->s == nullptr || f->block >= 1, "gemm: a factor's block must be >= 1, got ", f->block);
}

}  // namespace

GemmLoadPlan gemm_load_plan(const GemmParams& p) {
  const bool codes = is_codes(p.a) || is_codes(p.b);
  const int elem = codes ? 1 : int(dtype_size(p.in_dtype)), chunk = codes ? kCodeChunkBytes : 16;
  const GemmOperand a = canonical(p.a, p.M, p.K, p.batch), b = canonical(p.b, p.K, p.N, p.batch);
  const OperandLoad la = operand_load(a, a_k_layout(a), p.M, p.K, elem, chunk);
  const OperandLoad lb = operand_load(b, b_n_layout(b), p.K, p.N, elem, chunk);
  return {.a_bytes = la.bytes, .b_bytes = lb.bytes, .a_staged = la.staged, .b_staged = lb.staged};
}

GemmLoadCounts gemm_load_counts() {
  return {.vec16 = loads_vec16.load(),
          .vec8 = loads_vec8.load(),
          .vec4 = loads_vec4.load(),
          .elementwise = loads_elementwise.load(),
          .edge_only = loads_edge_only.load(),
          .staged = loads_staged.load()};
}

void gemm(const GemmParams& p, Stream stream) {
  MT_CHECK(p.M >= 0 && p.N >= 0 && p.K >= 0 && p.batch >= 0, "gemm: negative size (M=", p.M, ", N=", p.N, ", K=", p.K,
           ", batch=", p.batch, ")");
  const bool codes = is_codes(p.a) || is_codes(p.b);
  if (codes) check_code_gemm(p);
  MT_CHECK(codes || p.out_dtype == p.in_dtype || p.out_dtype == DType::f32, "gemm: ", dtype_name(p.in_dtype),
           " inputs can write ", dtype_name(p.in_dtype), " or f32, not ", dtype_name(p.out_dtype));
  MT_CHECK(p.bias_along == BiasAlong::none || p.bias != nullptr, "gemm: bias_along set without a bias pointer");
  if (p.M == 0 || p.N == 0 || p.batch == 0) return;
  DeviceGuard guard(p.device);
  const bool tf32 = p.in_dtype == DType::f32 &&
                    (p.fp32_math == Fp32Math::tf32 || (p.fp32_math == Fp32Math::global && tf32_enabled()));
  const int major = device_attribute(cudaDevAttrComputeCapabilityMajor, p.device);
  MT_CHECK(major >= 8 || p.in_dtype == DType::f16 || (p.in_dtype == DType::f32 && !tf32),
           "gemm: ", tf32 ? "TF32" : dtype_name(p.in_dtype),
           " Tensor Core kernels need sm_80 or newer (cuda:", p.device, " is sm_", major, "x)");
  MT_CHECK(p.in_dtype == DType::f32 || p.in_dtype == DType::f16 || p.in_dtype == DType::bf16,
           "gemm: the CUDA GEMM takes f32, f16 or bf16 inputs, not ", dtype_name(p.in_dtype));

  // The operands as the tiles read them: canonical strides, misaligned ones staged (Note [Staged
  // operands]); the workspaces live until the kernels are queued, which is all stream order needs.
  const GemmLoadPlan plan = gemm_load_plan(p);
  record_load_path(plan.a_bytes, plan.a_staged);
  record_load_path(plan.b_bytes, plan.b_staged);
  GemmRecorder::record({.M = p.M,
                        .N = p.N,
                        .K = p.K,
                        .batch = p.batch,
                        .a_bytes = plan.a_bytes,
                        .b_bytes = plan.b_bytes,
                        .a_staged = plan.a_staged,
                        .b_staged = plan.b_staged,
                        .caller = p.caller});
  GemmParams q = p;
  q.a = canonical(p.a, p.M, p.K, p.batch);
  q.b = canonical(p.b, p.K, p.N, p.batch);
  Workspace a_copy, b_copy;
  if (plan.a_staged)
    q.a = stage_operand(q.a, a_k_layout(q.a), p.M, p.K, p.batch, codes ? p.a.codes.format : p.in_dtype, p.device,
                        stream, a_copy);
  if (plan.b_staged)
    q.b = stage_operand(q.b, b_n_layout(q.b), p.K, p.N, p.batch, codes ? p.b.codes.format : p.in_dtype, p.device,
                        stream, b_copy);
  if (codes) {
    switch (p.out_dtype) {
      case DType::f32: run_code_gemm<float>(q, stream); return;
      case DType::f16: run_code_gemm<__half>(q, stream); return;
      default: run_code_gemm<__nv_bfloat16>(q, stream); return;  // check_code_gemm allowed only these
    }
  }
  switch (p.in_dtype) {
    case DType::f16:
      if (p.out_dtype == DType::f16) run_gemm<__half, __half>(q, false, stream);
      else run_gemm<__half, float>(q, false, stream);
      return;
    case DType::bf16:
      if (p.out_dtype == DType::bf16) run_gemm<__nv_bfloat16, __nv_bfloat16>(q, false, stream);
      else run_gemm<__nv_bfloat16, float>(q, false, stream);
      return;
    case DType::f32: run_gemm<float, float>(q, tf32, stream); return;
    default: break;  // refused above, before any staging
  }
}

}  // namespace mixtape::cuda
