// Gradient and tensor statistics for loss scaling, gradient scaling and telemetry: grad_stats
// (tensor/cpu/optim.cpp), grad_telemetry (tensor/cpu/grad_telemetry.cpp), tensor_moments and
// log_abs_moments (tensor/cpu/stats.cpp). Each is one grid-stride pass over x through its
// strides (any layout), results left on the device for the front-end to read.
//
// Note [Deterministic statistics]
// No float is accumulated with atomics. Maxima of non-negative finite values and inf/NaN flags
// use atomicMax on bit patterns (the bits of non-negative IEEE floats order like the values, and
// a max is exact and order-independent); counts use integer atomics (exact). Sums (the moments)
// are f64 per-block partials in a fixed grid-stride order, combined by one block in a fixed
// order, with a grid size that depends on numel alone, so a run repeats bit for bit. The CPU
// sums in row-major order in f64; the two agree to f64 summation error.
#include <algorithm>
#include <type_traits>

#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

// Blocks of a grid-stride statistics pass: by numel alone (Note [Deterministic statistics]).
unsigned stat_blocks(int64_t numel) { return std::min<unsigned>(grid_for(numel, kBlock * 4), 512u); }

// atomicMax of a non-negative value through its bit pattern (f32 or f64 storage).
__device__ __forceinline__ void atomic_max_nonneg(float* p, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(p), __float_as_uint(v));
}

__device__ __forceinline__ bool finite(float v) { return isfinite(v); }

// ---- grad_stats -----------------------------------------------------------------------------

// out[0] = 1 if any element is inf/NaN, out[1] = max |g| over the finite ones. out starts at
// zero (memset); each block contributes with atomicMax on the bits (1.0 > 0.0 as bits too).
template <class T>
__global__ void grad_stats_kernel(const T* __restrict__ g, OffsetCalculator<1> calc, int64_t numel,
                                  compute_t<T>* __restrict__ out) {
  using C = compute_t<T>;
  __shared__ C scratch[32];
  C m = C(0);
  int bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[1];
    calc.offsets(i, o);
    const C v = fabs(C(load(g[o[0]])));
    if (!finite(v)) bad = 1;
    else if (v > m) m = v;
  }
  bad = __syncthreads_or(bad);
  m = block_max(m, scratch, C(0));
  if (threadIdx.x != 0) return;
  if (bad) atomic_max_nonneg(&out[0], C(1));
  if (m > C(0)) atomic_max_nonneg(&out[1], m);
}

// ---- grad_telemetry -------------------------------------------------------------------------

// |v| rounded (RNE) to the format as its magnitude bits (sign dropped), as the CPU's
// round_magnitude: what store would write, measured rather than stored.
__device__ __forceinline__ uint16_t round_magnitude(float v, bool f16) {
  return uint16_t((f16 ? __half_as_ushort(store<__half>(v)) : __bfloat16_as_ushort(store<__nv_bfloat16>(v))) & 0x7FFFu);
}

// floor(log2 a) for finite a > 0, exact for subnormals (std::ilogb on the CPU), from the bits.
__device__ __forceinline__ int64_t floor_log2(float a) {
  const unsigned int b = __float_as_uint(a);
  const int e = int(b >> 23);
  return e != 0 ? int64_t(e) - 127 : int64_t(31 - __clz(int(b))) - 149;
}

// Shared memory: kTelemetryCounts + nbins counters (unsigned, per block), flushed to the i64
// counts with integer atomics. counts and max_abs start at zero (memset).
constexpr int kTelemetryCounts = 4;  // tensor/cpu/grad_telemetry.h: nonzero, underflow, subnormal, overflow

template <class T>
__global__ void grad_telemetry_kernel(const T* __restrict__ x, OffsetCalculator<1> calc, int64_t numel, bool f16,
                                      int64_t hist_lo, int64_t nbins, unsigned long long* __restrict__ counts,
                                      compute_t<T>* __restrict__ max_abs) {
  using C = compute_t<T>;
  extern __shared__ unsigned int shared_counts[];  // [kTelemetryCounts + nbins]
  __shared__ C scratch[32];
  const int64_t ncounts = kTelemetryCounts + nbins;
  for (int64_t k = threadIdx.x; k < ncounts; k += blockDim.x) shared_counts[k] = 0u;
  __syncthreads();
  const uint16_t min_normal = f16 ? 0x0400u : 0x0080u;
  const uint16_t inf = f16 ? 0x7C00u : 0x7F80u;
  C m = C(0);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[1];
    calc.offsets(i, o);
    const C v = load(x[o[0]]);
    if (!finite(v)) {
      atomicAdd(&shared_counts[3], 1u);
      continue;
    }
    if (v == C(0)) continue;
    atomicAdd(&shared_counts[0], 1u);
    const C a = fabs(v);
    if (a > m) m = a;
    const uint16_t r = round_magnitude(v, f16);
    if (r == 0) atomicAdd(&shared_counts[1], 1u);
    else if (r < min_normal) atomicAdd(&shared_counts[2], 1u);
    else if (r >= inf) atomicAdd(&shared_counts[3], 1u);
    if (nbins > 0) {
      int64_t bin = floor_log2(a) - hist_lo;
      bin = bin < 0 ? 0 : (bin > nbins - 1 ? nbins - 1 : bin);
      atomicAdd(&shared_counts[kTelemetryCounts + bin], 1u);
    }
  }
  m = block_max(m, scratch, C(0));  // its barriers also order the shared counters
  __syncthreads();
  for (int64_t k = threadIdx.x; k < ncounts; k += blockDim.x)
    if (shared_counts[k] != 0u) atomicAdd(&counts[k], static_cast<unsigned long long>(shared_counts[k]));
  if (threadIdx.x == 0 && m > C(0)) atomic_max_nonneg(max_abs, m);
}

// ---- moments ----------------------------------------------------------------------------------

// Pass 1: block b writes its 5 raw sums to partial[b * 5 ..]: {count, nonfinite, s, ss, max}.
// log_abs: {finite nonzero count, nonfinite, sum ln|x|, sum ln^2|x|, max |x|}; else
// {finite count, nonfinite, sum x, sum x^2, max |x|}. Every value is read as a double.
template <class T>
__global__ void moments_kernel(const T* __restrict__ x, OffsetCalculator<1> calc, int64_t numel, bool log_abs,
                               double* __restrict__ partial) {
  __shared__ double scratch[32];
  double n = 0.0, bad = 0.0, s = 0.0, ss = 0.0, m = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[1];
    calc.offsets(i, o);
    const double v = double(load(x[o[0]]));
    if (!isfinite(v)) {
      bad += 1.0;
      continue;
    }
    const double a = fabs(v);
    m = a > m ? a : m;
    if (!log_abs) {
      n += 1.0;
      s += v;
      ss += v * v;
      continue;
    }
    if (a == 0.0) continue;
    const double l = log(a);
    n += 1.0;
    s += l;
    ss += l * l;
  }
  n = block_sum(n, scratch);
  bad = block_sum(bad, scratch);
  s = block_sum(s, scratch);
  ss = block_sum(ss, scratch);
  m = block_max(m, scratch, 0.0);
  if (threadIdx.x != 0) return;
  double* p = partial + 5 * int64_t(blockIdx.x);
  p[0] = n;
  p[1] = bad;
  p[2] = s;
  p[3] = ss;
  p[4] = m;
}

// Pass 2 (one block): out[k] = combination of partial[b * 5 + k] over the blocks, in order.
__global__ void moments_total_kernel(const double* __restrict__ partial, int64_t blocks, double* __restrict__ out) {
  __shared__ double scratch[32];
  double v[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    for (int k = 0; k < 4; ++k) v[k] += partial[5 * b + k];
    v[4] = partial[5 * b + 4] > v[4] ? partial[5 * b + 4] : v[4];
  }
  for (int k = 0; k < 4; ++k) v[k] = block_sum(v[k], scratch);
  v[4] = block_max(v[4], scratch, 0.0);
  if (threadIdx.x == 0)
    for (int k = 0; k < 5; ++k) out[k] = v[k];
}

void launch_moments(const char* op, const Strided& x, const Strided& out, bool log_abs) {
  DeviceGuard guard(x.device().index);
  const Stream st = stream_of(x);
  const int64_t numel = x.numel();
  // Five f64 sums in the 8-byte elements of `out` (tensor/ops/stats.cpp: an i64 [5] on a GPU).
  MT_CHECK(dtype_size(out.dtype()) == 8 && out.numel() == 5 && out.is_contiguous(), op,
           ": the CUDA kernel writes five doubles into a contiguous 8-byte [5], got ", out.meta());
  double* po = static_cast<double*>(out.raw_data());
  if (numel == 0) {  // every sum empty: zeros, as the CPU writes
    memset_async(po, 0, 5 * sizeof(double), st);
    return;
  }
  const unsigned blocks = stat_blocks(numel);
  Workspace partial = workspace<double>(int64_t(blocks) * 5, x.device());
  auto* pp = static_cast<double*>(partial.raw_data());
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const OffsetCalculator<1> calc = offsets_for<1>(x.shape(), {&x});
    moments_kernel<T><<<blocks, kBlock, 0, st>>>(static_cast<const T*>(x.raw_data()), calc, numel, log_abs, pp);
    MT_CUDA_CHECK_LAUNCH("moments_kernel");
  });
  moments_total_kernel<<<1, kBlock, 0, st>>>(pp, int64_t(blocks), po);
  MT_CUDA_CHECK_LAUNCH("moments_total_kernel");
}

}  // namespace

void grad_stats(const Strided& g, const Strided& out) {
  DeviceGuard guard(g.device().index);
  const Stream st = stream_of(g);
  MT_CHECK(out.is_contiguous() && out.numel() == 2, "grad_stats: the CUDA kernel writes a contiguous [2], got ",
           out.meta());
  memset_async(out.raw_data(), 0, 2 * dtype_size(out.dtype()), st);
  if (g.numel() == 0) return;
  dispatch_floating(g.dtype(), "grad_stats", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    MT_CHECK(out.dtype() == (std::is_same_v<C, double> ? DType::f64 : DType::f32), "grad_stats: output ", out.meta(),
             " does not match gradient ", g.meta());
    const OffsetCalculator<1> calc = offsets_for<1>(g.shape(), {&g});
    grad_stats_kernel<T><<<stat_blocks(g.numel()), kBlock, 0, st>>>(static_cast<const T*>(g.raw_data()), calc,
                                                                    g.numel(), static_cast<C*>(out.raw_data()));
    MT_CUDA_CHECK_LAUNCH("grad_stats_kernel");
  });
}

void grad_telemetry(const Strided& x, DType format, int64_t hist_lo, const Strided& counts, const Strided& max_abs) {
  DeviceGuard guard(x.device().index);
  const Stream st = stream_of(x);
  const int64_t nbins = counts.numel() - kTelemetryCounts;
  MT_CHECK(nbins >= 0 && nbins <= 4096, "grad_telemetry: ", nbins, " histogram bins (at most 4096)");
  memset_async(counts.raw_data(), 0, size_t(counts.numel()) * sizeof(int64_t), st);
  memset_async(max_abs.raw_data(), 0, dtype_size(max_abs.dtype()), st);
  if (x.numel() == 0) return;
  dispatch_floating(x.dtype(), "grad_telemetry", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const OffsetCalculator<1> calc = offsets_for<1>(x.shape(), {&x});
    const size_t smem = size_t(kTelemetryCounts + nbins) * sizeof(unsigned int);
    grad_telemetry_kernel<T><<<stat_blocks(x.numel()), kBlock, smem, st>>>(
        static_cast<const T*>(x.raw_data()), calc, x.numel(), format == DType::f16, hist_lo, nbins,
        static_cast<unsigned long long*>(counts.raw_data()), static_cast<C*>(max_abs.raw_data()));
    MT_CUDA_CHECK_LAUNCH("grad_telemetry_kernel");
  });
}

void tensor_moments(const Strided& x, const Strided& out) { launch_moments("tensor_moments", x, out, false); }

void log_abs_moments(const Strided& x, const Strided& out) { launch_moments("log_abs_moments", x, out, true); }

}  // namespace mixtape::cuda
