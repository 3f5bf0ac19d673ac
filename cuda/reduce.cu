// Reductions over chosen dims (sum, mean, max, amax, min), forward and backward, max_abs,
// argmax / argmin, and var / std forward and backward (Note [CUDA argmax and variance]).
// Mirrors tensor/cpu/reduce.cpp; the front-end (tensor/ops/reduce.cpp) passes normalized dims
// (sorted, unique) and allocates `out` / `dx` contiguous with the keepdim / input shape.
//
// Note [CUDA reduce layout]
// x is seen as outer (kept dims) x inner (reduced dims), each a strided OffsetCalculator, so any
// layout is read in place (no contiguous() copy). Output o (row-major over the kept dims)
// reduces inner elements i = 0..n-1 (row-major over the reduced dims). Three shapes of work:
//   n <= 32          one thread per output, a sequential loop (bias-gradient-like [B, small]).
//   n > 32           one block per output; when there are few outputs and n is large, the
//                    inner range is split into `splits` chunks of one block each, every block
//                    writes a partial to a buffer [outputs, splits] and a second kernel combines
//                    the partials of each output in a fixed order.
// The split count depends only on the shape (never on the device or timing) and no float is
// accumulated with atomics, so results are deterministic run to run. Accumulation is in the
// compute type (fp32 for f32/f16/bf16, f64 for f64) and the output is rounded once; the CPU
// accumulates in f64, so sums agree with it up to fp32 summation error (tests/cuda/test_reduce.cpp).
// max/amax/min propagate NaN as the CPU loop does (any NaN in a slice gives NaN).
//
// Note [CUDA argmax and variance]
// argmax / argmin and var / std run one block per output over its slice (row-major over the
// reduced dims, any strides). argmax: each thread keeps its best (value, position) with the CPU's
// rule (strictly better replaces; NaN beats every number; ties keep the lower position), and the
// block combines pairs with the same rule, so the result is the CPU's index exactly. var / std
// follow the CPU in f64 (as the batch-norm statistics do): a block sum of x for the mean, then a
// block sum of squared deviations, rounded once; the f64 sums differ from the CPU's only in their
// order, so the rounded results agree to the last bit almost always (tests/cuda/test_reduce.cpp).
// The backward recomputes the mean the same way and writes dx = dy * k elementwise in f64.
#include <algorithm>
#include <bit>
#include <climits>
#include <limits>
#include <type_traits>

#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

struct SumOp {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};

// NaN-propagating max: the CPU's loop turns a slice with any NaN into NaN.
struct MaxOp {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    return b > a ? b : a;
  }
};

// NaN-propagating min, the mirror of MaxOp.
struct MinOp {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    if (isnan(a)) return a;
    if (isnan(b)) return b;
    return b < a ? b : a;
  }
};

struct MinIndexOp {
  __device__ __forceinline__ long long operator()(long long a, long long b) const { return b < a ? b : a; }
};

// Reduction of v over the block with the binary op `op` (commutative; the xor butterfly then
// leaves the same bits in every lane). blockDim.x a multiple of 32, at most 1024; `scratch`
// holds 32 values in shared memory. Every thread gets the result. Call from every thread.
template <class A, class Op>
__device__ A block_reduce(A v, A* scratch, Op op, A identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <class A>
A op_identity(ReduceOp op) {
  return (op == ReduceOp::sum || op == ReduceOp::mean) ? A(0) : op == ReduceOp::min ? A(INFINITY) : A(-INFINITY);
}

// ---- forward ------------------------------------------------------------------------------

// One thread per output (n <= 32). outer: offsets of (x, out) for output o; inner: offset of
// x for reduced element i. mean divides by n (0 / 0 = NaN for an empty slice, as on the CPU).
template <class T, class A, class Op>
__global__ void reduce_thread_kernel(const T* __restrict__ x, T* __restrict__ out, OffsetCalculator<2> outer,
                                     OffsetCalculator<1> inner, int64_t m, int64_t n, bool mean, A identity, Op op) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < m; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t oo[2];
    outer.offsets(o, oo);
    A acc = identity;
    for (int64_t i = 0; i < n; ++i) {
      int64_t io[1];
      inner.offsets(i, io);
      acc = op(acc, A(load(x[oo[0] + io[0]])));
    }
    if (mean) acc = acc / A(n);
    out[oo[1]] = store<T>(acc);
  }
}

// Block (o, s) = (blockIdx.x, blockIdx.y) reduces inner elements [s * chunk, min(n, (s+1) * chunk))
// of output o. With one split (gridDim.y == 1) it stores the output; else it writes the raw
// partial to partial[o * gridDim.y + s] for reduce_partials_kernel. blockDim.x: multiple of 32.
template <class T, class A, class Op>
__global__ void reduce_block_kernel(const T* __restrict__ x, T* __restrict__ out, A* __restrict__ partial,
                                    OffsetCalculator<2> outer, OffsetCalculator<1> inner, int64_t n, int64_t chunk,
                                    bool mean, A identity, Op op) {
  __shared__ A scratch[32];
  const int64_t o = blockIdx.x;
  const int64_t begin = int64_t(blockIdx.y) * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  int64_t oo[2];
  outer.offsets(o, oo);
  A acc = identity;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    int64_t io[1];
    inner.offsets(i, io);
    acc = op(acc, A(load(x[oo[0] + io[0]])));
  }
  acc = block_reduce(acc, scratch, op, identity);
  if (threadIdx.x != 0) return;
  if (gridDim.y > 1) partial[o * int64_t(gridDim.y) + blockIdx.y] = acc;
  else out[oo[1]] = store<T>(mean ? A(acc / A(n)) : acc);
}

// Second pass: block o combines partial[o * splits .. o * splits + splits) in a fixed order.
template <class T, class A, class Op>
__global__ void reduce_partials_kernel(const A* __restrict__ partial, int64_t splits, T* __restrict__ out,
                                       OffsetCalculator<2> outer, int64_t n, bool mean, A identity, Op op) {
  __shared__ A scratch[32];
  const int64_t o = blockIdx.x;
  A acc = identity;
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) acc = op(acc, partial[o * splits + s]);
  acc = block_reduce(acc, scratch, op, identity);
  if (threadIdx.x != 0) return;
  int64_t oo[2];
  outer.offsets(o, oo);
  out[oo[1]] = store<T>(mean ? A(acc / A(n)) : acc);
}

// ---- geometry ------------------------------------------------------------------------------

bool is_reduced(const std::vector<int64_t>& dims, int64_t d) {
  for (int64_t r : dims)
    if (r == d) return true;
  return false;
}

// Shape and strides of t's kept (reduced = false) or reduced (reduced = true) dims.
void split_of(const Strided& t, const std::vector<int64_t>& dims, bool reduced, Shape& shape, Shape& strides) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (is_reduced(dims, d) != reduced) continue;
    shape.push_back(t.shape()[size_t(d)]);
    strides.push_back(t.strides()[size_t(d)]);
  }
}

struct Split {
  Shape outer_shape, inner_shape;
  int64_t m = 1, n = 1;  // outputs, elements per output
};

Split split_shapes(const Strided& x, const std::vector<int64_t>& dims) {
  Split s;
  Shape unused;
  split_of(x, dims, false, s.outer_shape, unused);
  split_of(x, dims, true, s.inner_shape, unused);
  s.m = numel_of(s.outer_shape);
  s.n = numel_of(s.inner_shape);
  return s;
}

// Strides of `t` (x's shape, or the keepdim shape) over the kept or the reduced dims.
Shape strides_of(const Strided& t, const std::vector<int64_t>& dims, bool reduced) {
  Shape shape, strides;
  split_of(t, dims, reduced, shape, strides);
  return strides;
}

inline int64_t round_up32(int64_t v) { return (v + 31) / 32 * 32; }

constexpr int64_t kThreadPerOutputMax = 32;  // n at or below: one thread per output
constexpr int64_t kMinChunk = 8192;          // elements per block before an output is split
constexpr int64_t kTargetBlocks = 1024;      // split outputs until about this many blocks
constexpr int64_t kMaxSplits = 1024;

template <class T, class A, class Op>
void launch_reduce(const Strided& x, const Strided& out, const std::vector<int64_t>& dims, bool mean, A identity, Op op,
                   const char* name) {
  const Split s = split_shapes(x, dims);
  if (s.m == 0) return;
  const OffsetCalculator<2> outer =
      make_offset_calculator<2>(s.outer_shape, {strides_of(x, dims, false), strides_of(out, dims, false)});
  const OffsetCalculator<1> inner = make_offset_calculator<1>(s.inner_shape, {strides_of(x, dims, true)});
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const Stream st = stream_of(x);
  if (s.n <= kThreadPerOutputMax) {
    reduce_thread_kernel<T, A, Op>
        <<<grid_for(s.m), kBlock, 0, st>>>(px, po, outer, inner, s.m, s.n, mean, identity, op);
    MT_CUDA_CHECK_LAUNCH("reduce_thread_kernel");
    return;
  }
  MT_CHECK(s.m <= INT_MAX, name, ": ", s.m, " outputs exceed the CUDA grid (", x.meta(), ")");
  int64_t splits = std::min((s.n + kMinChunk - 1) / kMinChunk, (kTargetBlocks + s.m - 1) / s.m);
  splits = std::clamp<int64_t>(splits, 1, kMaxSplits);
  const int64_t chunk = (s.n + splits - 1) / splits;
  splits = (s.n + chunk - 1) / chunk;  // no empty split
  const int threads = int(std::min<int64_t>(kBlock, round_up32(chunk)));
  Workspace partial;
  A* pp = nullptr;
  if (splits > 1) {
    partial = workspace<A>(s.m * splits, x.device());
    pp = static_cast<A*>(partial.raw_data());
  }
  const dim3 grid(unsigned(s.m), unsigned(splits));
  reduce_block_kernel<T, A, Op><<<grid, threads, 0, st>>>(px, po, pp, outer, inner, s.n, chunk, mean, identity, op);
  MT_CUDA_CHECK_LAUNCH("reduce_block_kernel");
  if (splits > 1) {
    const int pthreads = int(std::min<int64_t>(kBlock, round_up32(splits)));
    reduce_partials_kernel<T, A, Op>
        <<<unsigned(s.m), pthreads, 0, st>>>(pp, splits, po, outer, s.n, mean, identity, op);
    MT_CUDA_CHECK_LAUNCH("reduce_partials_kernel");
  }
}

// ---- backward ------------------------------------------------------------------------------

// sum / mean: dx[i] = dy[o(i)] (divided by n for mean), one thread per element of dx.
// calc: offsets of (dx, dy) over x's shape, dy broadcast (stride 0) along the reduced dims.
template <class T>
__global__ void reduce_sum_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, OffsetCalculator<2> calc,
                                           int64_t numel, bool mean, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[2];
    calc.offsets(i, o);
    const C g = load(dy[o[1]]);
    dx[o[0]] = store<T>(mean ? C(g / C(n)) : g);
  }
}

// max / amax / min: block o scans its slice twice. Pass 1 counts the elements equal to y[o] and finds
// the first (lowest row-major index); pass 2 writes dx: max (min) gives all of dy to the first
// maximum (minimum), amax splits dy evenly among the ties, everything else gets 0. A NaN maximum matches
// nothing, so its slice gets zeros (as on the CPU).
// outer: offsets of (x, dx, y, dy) for output o; inner: offsets of (x, dx) for element i.
template <class T>
__global__ void reduce_max_backward_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                                           T* __restrict__ dx, OffsetCalculator<4> outer, OffsetCalculator<2> inner,
                                           int64_t n, bool split_ties) {
  using C = compute_t<T>;
  __shared__ long long scratch[32];
  int64_t oo[4];
  outer.offsets(blockIdx.x, oo);
  const C ymax = load(y[oo[2]]);
  const C g = load(dy[oo[3]]);
  long long count = 0, first = LLONG_MAX;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t io[2];
    inner.offsets(i, io);
    if (C(load(x[oo[0] + io[0]])) == ymax) {
      ++count;
      if (i < first) first = i;
    }
  }
  count = block_reduce(count, scratch, SumOp{}, 0LL);
  first = block_reduce(first, scratch, MinIndexOp{}, LLONG_MAX);
  const C share = split_ties ? (count > 0 ? C(g / C(count)) : C(0)) : g;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t io[2];
    inner.offsets(i, io);
    const bool hit = C(load(x[oo[0] + io[0]])) == ymax && (split_ties || i == first);
    dx[oo[1] + io[1]] = store<T>(hit ? share : C(0));
  }
}

// ---- max_abs --------------------------------------------------------------------------------

// acc[0] |= any NaN; acc[1] = max over the non-NaN |x| as bits (atomicMax on the bit patterns
// of non-negative floats orders them as the values: exact and order-independent, so
// deterministic). Floats are zero-extended into the 64-bit word.
template <class T>
__global__ void max_abs_kernel(const T* __restrict__ x, OffsetCalculator<1> calc, int64_t numel,
                               unsigned long long* __restrict__ acc) {
  using C = compute_t<T>;
  __shared__ C scratch[32];
  C m = C(0);
  int nan = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[1];
    calc.offsets(i, o);
    const C v = fabs(C(load(x[o[0]])));
    if (isnan(v)) nan = 1;
    else if (v > m) m = v;
  }
  nan = __syncthreads_or(nan);
  m = block_max(m, scratch, C(0));
  if (threadIdx.x != 0) return;
  if (nan) atomicOr(&acc[0], 1ull);
  if constexpr (std::is_same_v<C, double>) atomicMax(&acc[1], static_cast<unsigned long long>(__double_as_longlong(m)));
  else atomicMax(&acc[1], static_cast<unsigned long long>(__float_as_uint(m)));
}

// ---- argmax / argmin ------------------------------------------------------------------------

// True when (v, i) must replace (bv, bi) as the best of a slice: the CPU's rule, made symmetric
// in the order of the pair so that it can combine partial results (ties: the lower position).
__device__ __forceinline__ bool arg_better(bool largest, float v, long long i, float bv, long long bi) {
  if (bi < 0) return i >= 0;
  if (i < 0) return false;
  const bool vn = isnan(v), bn = isnan(bv);
  if (vn || bn) return vn && (!bn || i < bi);
  if (v == bv) return i < bi;
  return largest ? v > bv : v < bv;
}

// Block o: out[o] = position of the best element of slice o (Note [CUDA argmax and variance]).
// outer: offsets of (x, out) for output o; inner: offset of x for element i. blockDim.x: a
// multiple of 32.
template <class T>
__global__ void arg_reduce_kernel(const T* __restrict__ x, int64_t* __restrict__ out, OffsetCalculator<2> outer,
                                  OffsetCalculator<1> inner, int64_t n, bool largest) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  int64_t oo[2];
  outer.offsets(blockIdx.x, oo);
  float bv = 0.0f;
  long long bi = -1;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t io[1];
    inner.offsets(i, io);
    const float v = float(load(x[oo[0] + io[0]]));
    if (arg_better(largest, v, i, bv, bi)) bv = v, bi = i;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const long long i = __shfl_xor_sync(0xffffffffu, bi, o);
    if (arg_better(largest, v, i, bv, bi)) bv = v, bi = i;
  }
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  if (warp != 0) return;
  bv = lane < warps ? sv[lane] : 0.0f;
  bi = lane < warps ? si[lane] : -1;
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const long long i = __shfl_xor_sync(0xffffffffu, bi, o);
    if (arg_better(largest, v, i, bv, bi)) bv = v, bi = i;
  }
  if (lane == 0) out[oo[1]] = bi;
}

// ---- var / std -------------------------------------------------------------------------------

// The mean of slice o in f64 (every thread gets it). inner: offsets whose first entry is x's.
template <class T, int N>
__device__ double slice_mean(const T* __restrict__ x, int64_t xo, const OffsetCalculator<N>& inner, int64_t n,
                             double* scratch) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t io[N];
    inner.offsets(i, io);
    sum += double(load(x[xo + io[0]]));
  }
  return block_sum(sum, scratch) / double(n);
}

// Block o: out[o] = sum (x - mean)^2 / divisor (sqrt for std), in f64, rounded once.
template <class T>
__global__ void var_kernel(const T* __restrict__ x, T* __restrict__ out, OffsetCalculator<2> outer,
                           OffsetCalculator<1> inner, int64_t n, double divisor, bool take_sqrt) {
  __shared__ double scratch[32];
  int64_t oo[2];
  outer.offsets(blockIdx.x, oo);
  const double mean = slice_mean<T, 1>(x, oo[0], inner, n, scratch);
  double m2 = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t io[1];
    inner.offsets(i, io);
    const double d = double(load(x[oo[0] + io[0]])) - mean;
    m2 += d * d;
  }
  m2 = block_sum(m2, scratch);
  if (threadIdx.x != 0) return;
  const double v = m2 / divisor;
  out[oo[1]] = store<T>(take_sqrt ? sqrt_rn(v) : v);
}

// Block o writes dx over slice o (Note [Variance] in tensor/cpu/reduce.h).
// outer: offsets of (x, dx, y, dy) for output o; inner: offsets of (x, dx) for element i.
template <class T>
__global__ void var_backward_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                                    T* __restrict__ dx, OffsetCalculator<4> outer, OffsetCalculator<2> inner, int64_t n,
                                    double divisor, bool take_sqrt) {
  __shared__ double scratch[32];
  int64_t oo[4];
  outer.offsets(blockIdx.x, oo);
  const double mean = slice_mean<T, 2>(x, oo[0], inner, n, scratch);
  const double g = double(load(dy[oo[3]]));
  const double sd = take_sqrt ? double(load(y[oo[2]])) : 0.0;
  const bool zero = take_sqrt && sd == 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    int64_t io[2];
    inner.offsets(i, io);
    const double d = double(load(x[oo[0] + io[0]])) - mean;
    const double k = take_sqrt ? d / (divisor * sd) : d * 2.0 / divisor;
    dx[oo[1] + io[1]] = store<T>(zero ? 0.0 : g * k);
  }
}

// One block per output: threads for a slice of n elements (a multiple of 32, at most kBlock).
inline int slice_threads(int64_t n) { return int(std::min<int64_t>(kBlock, round_up32(std::max<int64_t>(n, 1)))); }

}  // namespace

void arg_reduce(bool largest, const Strided& x, const std::vector<int64_t>& dims, const Strided& out) {
  DeviceGuard guard(x.device().index);
  const char* name = largest ? "argmax" : "argmin";
  const Split s = split_shapes(x, dims);
  if (s.m == 0) return;
  MT_CHECK(s.m <= INT_MAX, name, ": ", s.m, " outputs exceed the CUDA grid (", x.meta(), ")");
  const OffsetCalculator<2> outer =
      make_offset_calculator<2>(s.outer_shape, {strides_of(x, dims, false), strides_of(out, dims, false)});
  const OffsetCalculator<1> inner = make_offset_calculator<1>(s.inner_shape, {strides_of(x, dims, true)});
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    arg_reduce_kernel<T><<<unsigned(s.m), slice_threads(s.n), 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), static_cast<int64_t*>(out.raw_data()), outer, inner, s.n, largest);
    MT_CUDA_CHECK_LAUNCH("arg_reduce_kernel");
  });
}

void var(const Strided& x, const std::vector<int64_t>& dims, double correction, bool take_sqrt, const Strided& out) {
  DeviceGuard guard(x.device().index);
  const char* name = take_sqrt ? "std" : "var";
  const Split s = split_shapes(x, dims);
  if (s.m == 0) return;
  MT_CHECK(s.m <= INT_MAX, name, ": ", s.m, " outputs exceed the CUDA grid (", x.meta(), ")");
  const double divisor = std::max(0.0, double(s.n) - correction);  // Note [Variance]
  const OffsetCalculator<2> outer =
      make_offset_calculator<2>(s.outer_shape, {strides_of(x, dims, false), strides_of(out, dims, false)});
  const OffsetCalculator<1> inner = make_offset_calculator<1>(s.inner_shape, {strides_of(x, dims, true)});
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    var_kernel<T><<<unsigned(s.m), slice_threads(s.n), 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), outer, inner, s.n, divisor, take_sqrt);
    MT_CUDA_CHECK_LAUNCH("var_kernel");
  });
}

void var_backward(const Strided& x, const Strided& y, const Strided& dy, const std::vector<int64_t>& dims,
                  double correction, bool take_sqrt, const Strided& dx) {
  DeviceGuard guard(dx.device().index);
  const char* name = take_sqrt ? "std backward" : "var backward";
  const Split s = split_shapes(x, dims);
  if (s.m == 0 || s.n == 0) return;
  MT_CHECK(s.m <= INT_MAX, name, ": ", s.m, " outputs exceed the CUDA grid (", x.meta(), ")");
  const double divisor = std::max(0.0, double(s.n) - correction);
  const OffsetCalculator<4> outer =
      make_offset_calculator<4>(s.outer_shape, {strides_of(x, dims, false), strides_of(dx, dims, false),
                                                strides_of(y, dims, false), strides_of(dy, dims, false)});
  const OffsetCalculator<2> inner =
      make_offset_calculator<2>(s.inner_shape, {strides_of(x, dims, true), strides_of(dx, dims, true)});
  dispatch_floating(dx.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    var_backward_kernel<T><<<unsigned(s.m), slice_threads(s.n), 0, stream_of(dx)>>>(
        static_cast<const T*>(x.raw_data()), static_cast<const T*>(y.raw_data()), static_cast<const T*>(dy.raw_data()),
        static_cast<T*>(dx.raw_data()), outer, inner, s.n, divisor, take_sqrt);
    MT_CUDA_CHECK_LAUNCH("var_backward_kernel");
  });
}

void reduce(ReduceOp op, const Strided& x, const std::vector<int64_t>& dims, const Strided& out) {
  DeviceGuard guard(x.device().index);
  const char* name = reduce_op_name(op);
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    if (op == ReduceOp::sum || op == ReduceOp::mean)
      launch_reduce<T, A>(x, out, dims, op == ReduceOp::mean, op_identity<A>(op), SumOp{}, name);
    else if (op == ReduceOp::min) launch_reduce<T, A>(x, out, dims, false, op_identity<A>(op), MinOp{}, name);
    else launch_reduce<T, A>(x, out, dims, false, op_identity<A>(op), MaxOp{}, name);
  });
}

void reduce_backward(ReduceOp op, const Strided& x, const Strided& y, const Strided& dy,
                     const std::vector<int64_t>& dims, const Strided& dx) {
  DeviceGuard guard(dx.device().index);
  const char* name = reduce_op_name(op);
  const Split s = split_shapes(x, dims);
  if (dx.numel() == 0) return;
  const Stream st = stream_of(dx);
  dispatch_floating(dx.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = static_cast<const T*>(dy.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    if (op == ReduceOp::sum || op == ReduceOp::mean) {  // x and y are not read
      const OffsetCalculator<2> calc = offsets_for<2>(dx.shape(), {&dx, &dy});
      reduce_sum_backward_kernel<T>
          <<<grid_for(dx.numel()), kBlock, 0, st>>>(pdy, pdx, calc, dx.numel(), op == ReduceOp::mean, s.n);
      MT_CUDA_CHECK_LAUNCH("reduce_sum_backward_kernel");
      return;
    }
    MT_CHECK(s.m <= INT_MAX, name, " backward: ", s.m, " outputs exceed the CUDA grid (", x.meta(), ")");
    const OffsetCalculator<4> outer =
        make_offset_calculator<4>(s.outer_shape, {strides_of(x, dims, false), strides_of(dx, dims, false),
                                                  strides_of(y, dims, false), strides_of(dy, dims, false)});
    const OffsetCalculator<2> inner =
        make_offset_calculator<2>(s.inner_shape, {strides_of(x, dims, true), strides_of(dx, dims, true)});
    const int threads = int(std::min<int64_t>(kBlock, round_up32(std::max<int64_t>(s.n, 1))));
    reduce_max_backward_kernel<T><<<unsigned(s.m), threads, 0, st>>>(static_cast<const T*>(x.raw_data()),
                                                                     static_cast<const T*>(y.raw_data()), pdy, pdx,
                                                                     outer, inner, s.n, op == ReduceOp::amax);
    MT_CUDA_CHECK_LAUNCH("reduce_max_backward_kernel");
  });
}

double max_abs(const Strided& x) {
  DeviceGuard guard(x.device().index);
  if (x.numel() == 0) return 0.0;
  const Stream st = stream_of(x);
  Workspace acc({2}, DType::i64, x.device());
  auto* pacc = static_cast<unsigned long long*>(acc.raw_data());
  memset_async(pacc, 0, 2 * sizeof(unsigned long long), st);
  bool is_double = false;
  dispatch_floating(x.dtype(), "max_abs", [&](auto tag) {
    using T = decltype(tag);
    is_double = std::is_same_v<T, double>;
    const OffsetCalculator<1> calc = offsets_for<1>(x.shape(), {&x});
    const unsigned blocks = std::min<unsigned>(grid_for(x.numel()), 1024u);
    max_abs_kernel<T><<<blocks, kBlock, 0, st>>>(static_cast<const T*>(x.raw_data()), calc, x.numel(), pacc);
    MT_CUDA_CHECK_LAUNCH("max_abs_kernel");
  });
  unsigned long long host[2] = {0, 0};
  copy_device_to_host(host, pacc, sizeof(host), x.device().index);
  if (host[0] != 0) return std::numeric_limits<double>::quiet_NaN();
  if (is_double) return std::bit_cast<double>(host[1]);
  return double(std::bit_cast<float>(uint32_t(host[1])));
}

}  // namespace mixtape::cuda
