// 8-bit operands on the GPU (tensor/ops/quantize.h): quantize, a matrix block by block, and
// scaled_matmul_nt, the GEMM of two quantized operands. The CPU kernels of the same names
// (tensor/cpu/quantize.cpp) are the reference: quantize gives their bits (codes, scale_inv and
// the statistics), scaled_matmul_nt their result up to the order of the fp32 sums.
//
// Note [Quantizing on the device]
// quantize is four launches and no host synchronization (the front-end reads the statistics when
// it wants them); a given scale needs no amax and skips the first kernel:
//   1. block_amax_kernel: each block's amax, the maximum of |x| with NaN winning, by atomicMax on
//      the bits of |x| in a zeroed workspace (one memset, the launch before). The bits of
//      non-negative floats order like their values and a NaN's lie above inf's, so NaN wins as on
//      the CPU, and a maximum does not depend on the order: the bits are the CPU's (a NaN's
//      payload aside, which block_scale never reads).
//   2. quantize_kernel: s = scales::block_scale(q, format, amax), the formula the CPU calls,
//      compiled for the device; codes = from_float_rn(x * s) (from_float_rn_checked, which also
//      says whether x * s rounded past max, as on the CPU); the thread that meets a block's
//      first element writes its scale_inv = 1 / s. Under the nvfp4 rule (Note [Two-level
//      scales] in scale_formulas.h) the first kernel also takes the tensor's amax (one more
//      atomicMax per block flush, into a word of its own), every thread derives S from it, a
//      block's scale_inv is its d_b, and the first thread writes 1 / S. The statistics are counted per thread, summed
//      per block in shared memory and added to the workspace with integer atomics (exact); the
//      largest finite |x| by atomicMax.
//   3. quantize_stats_kernel (one block): the i64 statistics, the range of scale_inv as the CPU's
//      std::minmax_element finds it (Note [The range of the scales]).
// Both passes walk x in chunks of up to 8 consecutive elements of a row, grid-stride, through
// x's strides (any layout, f32, f16 or bf16). A thread keeps the block it is in, so it calls
// atomicMax once per block it meets rather than once per element, and a CUDA block whose threads
// all end in one quantization block (per tensor, long rows) reduces first and calls it once.
//
// Note [The range of the scales]
// The statistics' scale_inv_min / _max are what std::minmax_element (libstdc++, which the CPU
// build uses) returns over scale_inv in order, and with NaN scales (the power-of-two rules' blocks
// holding inf or NaN) that depends on where the NaNs are: it compares x[0] with x[1], then
// takes the elements in pairs (x[2p], x[2p+1]), the smaller of each pair as a candidate for the
// minimum (min = c if c < min) and the larger for the maximum (max = c unless c < max), and a
// last unpaired element for the minimum if it is smaller, else for the maximum; a comparison with
// a NaN is false. So the minimum is x[0] when x[0] is NaN, else the smallest non-NaN candidate;
// the maximum is the last NaN candidate if no candidate follows it, else the largest candidate
// after the last NaN. quantize_stats_kernel forms the candidates of the pairs in parallel and
// combines the maximum's in order (MaxRun: "no NaN, largest v" or "v whatever came before"),
// which gives the same element as the sequential loop. Without NaNs both are the plain min and max.
#include <algorithm>
#include <cstdint>

#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/gemm.h"
#include "tensor/core/fp8.h"
#include "tensor/core/scale_formulas.h"

namespace mixtape::cuda {

namespace {

constexpr int kChunk = 8;  // consecutive elements of a row per step of a thread
// The workspace: the four counts (saturated, flushed, subnormal, nonfinite), the bits of the
// largest finite |x| and the bits of the tensor's amax (nvfp4: NaN wins), as u64; then the block
// amaxes' bits, u32 [blocks] (when the rule needs them).
constexpr int kCounters = 6;
constexpr int kAmaxCounter = 4;
constexpr int kTensorAmaxCounter = 5;

// Blocks for a pass over `chunks` chunks: a grid-stride loop, at most 1024 blocks (enough to fill
// a GPU; fewer blocks, fewer atomics per quantization block).
unsigned chunk_blocks(int64_t chunks) { return std::min(grid_for(chunks), 1024u); }

__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

// ---- 1. block amax ----------------------------------------------------------------------------------

// amax[b] = max over block b of the bits of |x| (amax starts at zero), and into *tensor (when not
// null) the maximum over all blocks. Blocks of br x bc elements, nbc per row of blocks; chunk q
// is row q / per_row, columns 8 (q % per_row) ...
template <class T>
__global__ void block_amax_kernel(const T* __restrict__ x, int64_t rs, int64_t cs, int64_t R, int64_t C, int64_t br,
                                  int64_t bc, int64_t nbc, unsigned* __restrict__ amax,
                                  unsigned long long* __restrict__ tensor) {
  __shared__ long long lead_block[1];  // an array of one: the emulator's build rewrites array declarations
  __shared__ unsigned scratch[32];
  const int64_t per_row = (C + kChunk - 1) / kChunk, chunks = R * per_row;
  long long block = -1;  // the block the thread is in, and its maximum so far
  unsigned m = 0u;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < chunks; q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = q / per_row, c0 = (q % per_row) * kChunk, c1 = min(C, c0 + kChunk);
    const int64_t row_blocks = (r / br) * nbc;
    int64_t cb = c0 / bc, next = (cb + 1) * bc;  // the column block and where the next one starts
    for (int64_t c = c0; c < c1; ++c) {
      if (c == next) ++cb, next += bc;
      if (row_blocks + cb != block) {
        if (block >= 0) {
          atomicMax(&amax[block], m);
          if (tensor) atomicMax(tensor, static_cast<unsigned long long>(m));
        }
        block = row_blocks + cb, m = 0u;
      }
      m = max(m, abs_bits(load(x[r * rs + c * cs])));
    }
  }
  // Thread 0 has work whenever any thread of the block has (grid-stride order).
  if (threadIdx.x == 0) lead_block[0] = block;
  __syncthreads();
  const long long lead = lead_block[0];
  if (__syncthreads_or(block >= 0 && block != lead) == 0) {  // one block for all: reduce, then one atomic
    m = block_max(m, scratch, 0u);
    if (threadIdx.x == 0 && lead >= 0) {
      atomicMax(&amax[lead], m);
      if (tensor) atomicMax(tensor, static_cast<unsigned long long>(m));
    }
  } else if (block >= 0) {
    atomicMax(&amax[block], m);
    if (tensor) atomicMax(tensor, static_cast<unsigned long long>(m));
  }
}

// ---- 2. codes and scales ------------------------------------------------------------------------

// 1 / s, correctly rounded (exact for a power of two); a NaN s (a block with inf or NaN under the
// power-of-two rules) stays the same NaN, as the CPU's division returns it on x86 (a GPU's would be
// the canonical NaN, other bits).
__device__ __forceinline__ float inverse(float s) { return s != s ? s : div_rn(1.0f, s); }

// codes[r][c] = from_float_rn(x[r][c] * s) with s = block_scale(q, f, amax of the block); the
// block's first element's thread writes scale_inv[b] = 1 / s. counters: as kCounters (atomic).
// amax == nullptr: a given scale (block_scale does not read the amax). pack: C and the codes'
// base are multiples of 8, so a chunk's codes are one 8-byte store. Under the nvfp4 rule:
// scale_inv[b] = d_b, and *tensor_inv = 1 / S (Note [Two-level scales]).
template <class T>
__global__ void quantize_kernel(const T* __restrict__ x, int64_t rs, int64_t cs, int64_t R, int64_t C,
                                const BlockQuant q, const bits8::Format f, int64_t nbc,
                                const unsigned* __restrict__ amax, uint8_t* __restrict__ codes, bool pack,
                                float* __restrict__ scale_inv, float* __restrict__ tensor_inv,
                                unsigned long long* __restrict__ counters) {
  __shared__ unsigned long long block_counts[4];
  __shared__ unsigned block_amax[1];
  if (threadIdx.x < 4) block_counts[threadIdx.x] = 0ull;
  if (threadIdx.x == 0) block_amax[0] = 0u;
  __syncthreads();
  const bool two_level = tensor_inv != nullptr;
  const float S =
      two_level ? scales::nvfp4_tensor_scale(__uint_as_float(unsigned(counters[kTensorAmaxCounter])), f) : 1.0f;
  if (two_level && blockIdx.x == 0 && threadIdx.x == 0) *tensor_inv = div_rn(1.0f, S);
  const uint32_t exp_mask = ((1u << f.exp_bits) - 1u) << f.man_bits, mag_mask = bits8::magnitude_mask(f);
  const int64_t br = q.block_rows, bc = q.block_cols;
  const int64_t per_row = (C + kChunk - 1) / kChunk, chunks = R * per_row;
  unsigned long long saturated = 0, flushed = 0, subnormal = 0, nonfinite = 0;
  unsigned finite_amax = 0u;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c0 = (i % per_row) * kChunk, c1 = min(C, c0 + kChunk);
    const int64_t row_blocks = (r / br) * nbc;
    int64_t cb = c0 / bc, next = (cb + 1) * bc;
    float s = 0.0f;
    uint32_t lo_word = 0u, hi_word = 0u;  // the chunk's codes when packed (registers, not an indexed array)
    for (int64_t c = c0; c < c1; ++c) {
      if (c == c0 || c == next) {  // a new block: its s (and its scale_inv, from its first element)
        if (c == next) ++cb, next += bc;
        const int64_t b = row_blocks + cb;
        const float block_amax = amax != nullptr ? __uint_as_float(amax[b]) : 0.0f;
        if (two_level) {
          const float d = scales::nvfp4_block_decode(block_amax, S, f);
          s = scales::nvfp4_block_scale(d, S);
          if (r % br == 0 && c == cb * bc) scale_inv[b] = d;
        } else {
          s = scales::block_scale(q, f, block_amax);
          if (r % br == 0 && c == cb * bc) scale_inv[b] = inverse(s);
        }
      }
      const float v = load(x[r * rs + c * cs]);
      const bits8::Rounded rounded = bits8::from_float_rn_checked(mul_rn(v, s), f, q.overflow);
      const uint8_t code = rounded.code;
      const int e = int(c - c0);
      if (!pack) codes[r * C + c] = code;
      else if (e < 4) lo_word |= uint32_t(code) << (8 * e);
      else hi_word |= uint32_t(code) << (8 * (e - 4));
      // The CPU's counts (tensor/cpu/quantize.cpp), element by element.
      if (!isfinite(v)) {
        ++nonfinite;
        continue;
      }
      finite_amax = max(finite_amax, abs_bits(v));
      if (rounded.past_max) ++saturated;  // an inf product too
      const uint32_t mag = code & mag_mask;
      if (mag == 0u && v != 0.0f) ++flushed;
      else if (mag != 0u && (code & exp_mask) == 0u) ++subnormal;
    }
    if (pack) *reinterpret_cast<uint2*>(codes + r * C + c0) = make_uint2(lo_word, hi_word);
  }
  if (saturated) atomicAdd(&block_counts[0], saturated);
  if (flushed) atomicAdd(&block_counts[1], flushed);
  if (subnormal) atomicAdd(&block_counts[2], subnormal);
  if (nonfinite) atomicAdd(&block_counts[3], nonfinite);
  if (finite_amax) atomicMax(&block_amax[0], finite_amax);
  __syncthreads();
  if (threadIdx.x < 4 && block_counts[threadIdx.x] != 0ull)
    atomicAdd(&counters[threadIdx.x], block_counts[threadIdx.x]);
  if (threadIdx.x == 0 && block_amax[0] != 0u)
    atomicMax(&counters[kAmaxCounter], static_cast<unsigned long long>(block_amax[0]));
}

// ---- 3. the statistics ------------------------------------------------------------------------------

// The maximum's fold over a run of candidates (Note [The range of the scales]): kind 0, no
// candidate; 1, none is NaN and v is the largest; 2, the run holds a NaN and ends at v whatever
// came before (the last NaN, or the largest candidate after it).
struct MaxRun {
  int kind;
  float v;
};

// The sequential step: max = c unless c < max (false for a NaN on either side).
__device__ __forceinline__ float fold_max(float max, float c) { return !(c < max) ? c : max; }

__device__ __forceinline__ MaxRun run_of(float c) { return {c != c ? 2 : 1, c}; }

// The run `a` followed by the run `b`.
__device__ __forceinline__ MaxRun then(MaxRun a, MaxRun b) {
  if (b.kind == 0) return a;
  if (a.kind == 0 || b.kind == 2) return b;
  return {a.kind, fold_max(a.v, b.v)};  // b holds no NaN: it folds into a's end
}

__device__ __forceinline__ float apply(MaxRun run, float max) {
  return run.kind == 0 ? max : (run.kind == 1 ? fold_max(max, run.v) : run.v);
}

// stats (i64 [kQuantStats], QuantStat): the counters, count, and the range of inv [n] as the
// CPU's std::minmax_element (Note [The range of the scales]), times *tensor_inv when given (nvfp4:
// the range of d_b / S; an empty operand, which no quantize_kernel ran for, gets 1 / S = 1 here).
// One block of kBlock threads: thread t takes a contiguous range of the pairs 1 .. n/2 - 1,
// thread 0 combines the ranges in order.
__global__ void quantize_stats_kernel(const unsigned long long* __restrict__ counters, const float* __restrict__ inv,
                                      int64_t n, int64_t count, float* __restrict__ tensor_inv,
                                      int64_t* __restrict__ stats) {
  __shared__ float min_of[kBlock];
  __shared__ int has_min[kBlock];
  __shared__ MaxRun max_of[kBlock];
  const int64_t pairs = n / 2, per_thread = (pairs + kBlock - 1) / kBlock;
  const int64_t p0 = max(int64_t(1), int64_t(threadIdx.x) * per_thread),
                p1 = min(pairs, (int64_t(threadIdx.x) + 1) * per_thread);
  float lo = 0.0f;
  int has = 0;
  MaxRun hi{0, 0.0f};
  for (int64_t p = p0; p < p1; ++p) {
    const float x0 = inv[2 * p], x1 = inv[2 * p + 1];
    const bool swap = x1 < x0;
    const float min_c = swap ? x1 : x0, max_c = swap ? x0 : x1;
    if (min_c == min_c && (!has || min_c < lo)) lo = min_c, has = 1;
    hi = then(hi, run_of(max_c));
  }
  min_of[threadIdx.x] = lo;
  has_min[threadIdx.x] = has;
  max_of[threadIdx.x] = hi;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int k = 0; k < kQuantStats; ++k) stats[k] = 0;
  stats[kStatCount] = count;
  stats[kStatSaturated] = int64_t(counters[0]);
  stats[kStatFlushed] = int64_t(counters[1]);
  stats[kStatSubnormal] = int64_t(counters[2]);
  stats[kStatNonfinite] = int64_t(counters[3]);
  stats[kStatAmaxBits] = int64_t(counters[kAmaxCounter]);
  if (tensor_inv && count == 0) *tensor_inv = 1.0f;
  if (n == 0) return;  // no blocks: a range of 0, 0
  float mn = inv[0], mx = inv[0];
  if (n >= 2) {
    const bool swap = inv[1] < inv[0];
    mn = swap ? inv[1] : inv[0], mx = swap ? inv[0] : inv[1];
    MaxRun all{0, 0.0f};
    float pair_min = 0.0f;
    int pair_has = 0;
    for (int t = 0; t < kBlock; ++t) {
      all = then(all, max_of[t]);
      if (has_min[t] && (!pair_has || min_of[t] < pair_min)) pair_min = min_of[t], pair_has = 1;
    }
    if (pair_has && pair_min < mn) mn = pair_min;  // never when mn (x[0]) is NaN
    mx = apply(all, mx);
    if (n % 2 == 1) {  // the last element, unpaired
      const float x = inv[n - 1];
      if (x < mn) mn = x;
      else if (!(x < mx)) mx = x;
    }
  }
  if (tensor_inv) mn = mul_rn(mn, *tensor_inv), mx = mul_rn(mx, *tensor_inv);
  stats[kStatScaleInvMinBits] = int64_t(__float_as_uint(mn));
  stats[kStatScaleInvMaxBits] = int64_t(__float_as_uint(mx));
}

// ---- scaled_matmul_nt ------------------------------------------------------------------------------

// One quantized operand, codes [R, K] with scale_inv over blocks of br x bc, as GEMM operand A
// (element (m, k) = codes[m][k]) or B (as_b: element (k, n) = codes[n][k]): scales that change
// along K go with the codes (widened in the GEMM's tiles, Note [8-bit operands] in gemm.cu),
// scales constant along K become `factor`, the factor of the operand's rows (A) or columns (B) of
// y, as on the CPU (tensor/cpu/quantize.cpp, gemm_operand). A two-level operand (tensor_inv
// defined) has its d_b go with the codes at any block size and its 1 / S as the factor.
GemmOperand code_operand(const Strided& codes, const Strided& scale_inv, int64_t br, int64_t bc,
                         const Strided& tensor_inv, bool as_b, GemmFactor& factor) {
  const int64_t R = codes.shape()[0], K = codes.shape()[1], nbc = scale_inv.shape()[1];
  const int64_t rs = codes.strides()[0], cs = codes.strides()[1];
  GemmOperand op{.ptr = codes.raw_data(), .row_stride = as_b ? cs : rs, .col_stride = as_b ? rs : cs};
  op.codes.format = codes.dtype();
  if (K == 0) return op;  // no scale columns, and no sum to scale
  const float* s = static_cast<const float*>(scale_inv.raw_data());
  if (tensor_inv.defined())
    factor = {.s = static_cast<const float*>(tensor_inv.raw_data()), .block = std::max<int64_t>(R, 1), .stride = 0};
  if (bc >= K && !tensor_inv.defined()) factor = {.s = s, .block = br, .stride = nbc};
  else if (as_b) op.codes = {.format = codes.dtype(), .scale = s, .br = bc, .bc = br, .srs = 1, .scs = nbc};
  else op.codes = {.format = codes.dtype(), .scale = s, .br = br, .bc = bc, .srs = nbc, .scs = 1};
  return op;
}

}  // namespace

void quantize(const Strided& x, const BlockQuant& q, const Strided& codes, const Strided& scale_inv,
              const Strided& tensor_scale_inv, const Strided& stats) {
  MT_CHECK(x.dim() == 2 && q.block_rows > 0 && q.block_cols > 0, "quantize: expected a matrix and blocks >= 1, got ",
           x.meta(), " in blocks of ", q.block_rows, " x ", q.block_cols);
  DeviceGuard guard(x.device().index);
  const Stream st = stream_of(x);
  const int64_t R = x.shape()[0], C = x.shape()[1], rs = x.strides()[0], cs = x.strides()[1];
  const int64_t nbc = scales::blocks_of(C, q.block_cols), blocks = scales::blocks_of(R, q.block_rows) * nbc;
  const bits8::Format f = format_of(q.format);  // a copy: kernels take the format by value
  const bool needs_amax = !(q.given_scale > 0.0f);
  const int64_t amax_words = needs_amax ? (blocks + 1) / 2 : 0;  // u32 amaxes in u64 words
  Workspace ws({kCounters + amax_words}, DType::i64, x.device());
  memset_async(ws.raw_data(), 0, size_t(kCounters + amax_words) * sizeof(int64_t), st);
  auto* counters = static_cast<unsigned long long*>(ws.raw_data());
  unsigned* amax = needs_amax ? reinterpret_cast<unsigned*>(counters + kCounters) : nullptr;
  auto* out = static_cast<uint8_t*>(codes.raw_data());
  auto* inv = static_cast<float*>(scale_inv.raw_data());
  const bool two_level = q.rule == ScaleRule::nvfp4 && needs_amax;
  float* tensor_inv = two_level ? static_cast<float*>(tensor_scale_inv.raw_data()) : nullptr;
  const int64_t chunks = R * ((C + kChunk - 1) / kChunk);
  if (chunks > 0) {
    const bool pack = C % kChunk == 0 && reinterpret_cast<uintptr_t>(out) % kChunk == 0;
    dispatch_floating(x.dtype(), "quantize", [&](auto tag) {
      using T = decltype(tag);
      const T* px = static_cast<const T*>(x.raw_data());
      if (needs_amax) {
        block_amax_kernel<T>
            <<<chunk_blocks(chunks), kBlock, 0, st>>>(px, rs, cs, R, C, q.block_rows, q.block_cols, nbc, amax,
                                                      two_level ? counters + kTensorAmaxCounter : nullptr);
        MT_CUDA_CHECK_LAUNCH("block_amax_kernel");
      }
      quantize_kernel<T><<<chunk_blocks(chunks), kBlock, 0, st>>>(px, rs, cs, R, C, q, f, nbc, amax, out, pack, inv,
                                                                  tensor_inv, counters);
      MT_CUDA_CHECK_LAUNCH("quantize_kernel");
    });
  }
  quantize_stats_kernel<<<1, kBlock, 0, st>>>(counters, inv, blocks, R * C, tensor_inv,
                                              static_cast<int64_t*>(stats.raw_data()));
  MT_CUDA_CHECK_LAUNCH("quantize_stats_kernel");
}

// The GEMM of Note [8-bit operands] in gemm.cu: the codes widened to bf16 in its shared-memory
// tiles, fp32 sums, y = sum * (a's factor * b's factor) + bias, rounded once.
void scaled_matmul_nt(const Strided& a, const Strided& a_scale_inv, int64_t a_br, int64_t a_bc,
                      const Strided& a_tensor_inv, const Strided& b, const Strided& b_scale_inv, int64_t b_br,
                      int64_t b_bc, const Strided& b_tensor_inv, const Strided& bias, const Strided& y) {
  GemmParams p;
  p.device = y.device().index;
  p.M = a.shape()[0], p.N = b.shape()[0], p.K = a.shape()[1];
  p.in_dtype = DType::bf16;  // the arithmetic the codes are widened to
  p.a = code_operand(a, a_scale_inv, a_br, a_bc, a_tensor_inv, false, p.row_factor);
  p.b = code_operand(b, b_scale_inv, b_br, b_bc, b_tensor_inv, true, p.col_factor);
  p.out_dtype = y.dtype();
  p.c = y.raw_data();
  p.c_row_stride = y.strides()[0], p.c_col_stride = y.strides()[1];
  if (bias.defined()) {
    p.bias = bias.raw_data();
    p.bias_stride = bias.strides()[0];
    p.bias_along = BiasAlong::cols;
    p.bias_dtype = bias.dtype();
  }
  p.caller = "scaled_matmul_nt";
  gemm(p, stream_of(y));
}

}  // namespace mixtape::cuda
