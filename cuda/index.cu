// Indexing on the GPU, forward and backward side by side: first_bad_index, gather (which also
// serves index_select, whose index the front-end expands), gather_backward and where (which also
// serves masked_fill). Each launcher mirrors the CPU kernel of the same name in
// tensor/cpu/index.cpp (the readable truth); the front-end in tensor/ops/index.cpp has validated
// shapes, dtypes and index ranges and allocated the outputs.
//
// gather and where copy elements (no arithmetic, no rounding), so they equal the CPU bit for bit.
// gather_backward follows Note [Gather backward] in tensor/cpu/index.h: one thread per line of
// index sums its dy values in f64, in increasing position, into a workspace of dx's shape (each
// line owns its entries: no atomics), and a second kernel rounds every element once. The order of
// the f64 additions is the CPU's, so dx is bit-identical to the CPU's in every dtype.
#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

inline constexpr int kCheckBlock = 1024;

// One block of kCheckBlock threads: out = {p, index[p]} for the smallest row-major position p
// whose index lies outside [0, size), or {n, 0} when every index is in range.
__global__ void __launch_bounds__(kCheckBlock)
    first_bad_index_kernel(const int64_t* __restrict__ idx, OffsetCalculator<1> ic, int64_t n, int64_t size,
                           int64_t* __restrict__ out) {
  __shared__ long long scratch[32];
  long long best = n;
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
    int64_t o[1];
    ic.offsets(p, o);
    const int64_t k = idx[o[0]];
    if ((k < 0 || k >= size) && p < best) best = p;  // p grows: the first hit is this thread's minimum
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int s = 16; s > 0; s >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, s));
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  if (warp != 0) return;
  best = lane < warps ? scratch[lane] : n;
  for (int s = 16; s > 0; s >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, s));
  if (lane != 0) return;
  out[0] = best;
  int64_t value = 0;
  if (best < n) {
    int64_t o[1];
    ic.offsets(best, o);
    value = idx[o[0]];
  }
  out[1] = value;
}

// One thread per position p of index: out[p] = x[p with p[dim] = index[p]].
// calc: offsets of (index, out, x without dim) over index's shape.
template <class T>
__global__ void gather_kernel(const T* __restrict__ x, int64_t xstride, int64_t size, const int64_t* __restrict__ idx,
                              T* __restrict__ out, OffsetCalculator<3> calc, int64_t n) {
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    calc.offsets(p, o);
    const int64_t k = idx[o[0]];
    if (k >= 0 && k < size) out[o[1]] = x[o[2] + k * xstride];  // never skipped after the check
  }
}

// One thread per line (Note [Gather backward]): acc[line + index[p] * ast] += dy[p] for the `len`
// positions p of the line, in order. calc: offsets of (index, dy, acc) over the lines.
template <class T>
__global__ void gather_backward_lines_kernel(const T* __restrict__ dy, const int64_t* __restrict__ idx,
                                             double* __restrict__ acc, OffsetCalculator<3> calc, int64_t lines,
                                             int64_t len, int64_t ist, int64_t dst, int64_t ast, int64_t size) {
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    calc.offsets(l, o);
    for (int64_t p = 0; p < len; ++p) {
      const int64_t k = idx[o[0] + p * ist];
      if (k >= 0 && k < size) acc[o[2] + k * ast] += double(load(dy[o[1] + p * dst]));
    }
  }
}

// dx[i] = acc[i], rounded once; both contiguous.
template <class T>
__global__ void store_from_f64_kernel(const double* __restrict__ acc, T* __restrict__ dx, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = store<T>(acc[i]);
}

// Whether a condition element is true: not zero (a NaN is true, Note [Masks without a bool dtype]
// in tensor/ops/index.h).
__device__ __forceinline__ bool truth(int64_t c) { return c != 0; }
template <class M>
__device__ __forceinline__ bool truth(M c) {
  return load(c) != 0.0f;
}

// out = cond ? a : b; calc: offsets of (cond, a, b, out) over out's shape.
template <class T, class M>
__global__ void where_kernel(const M* __restrict__ cond, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ out, OffsetCalculator<4> calc, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[4];
    calc.offsets(i, o);
    out[o[3]] = truth(cond[o[0]]) ? a[o[1]] : b[o[2]];
  }
}

// The condition's dtype switch: i64 or a device floating type.
template <class F>
void dispatch_condition(DType dtype, F&& f) {
  if (dtype == DType::i64) f(int64_t{});
  else dispatch_floating(dtype, "where (condition)", f);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------

void first_bad_index(const Strided& index, int64_t size, const Strided& first_bad) {
  DeviceGuard guard(index.device().index);
  const OffsetCalculator<1> ic = make_offset_calculator<1>(index.shape(), {index.strides()});
  first_bad_index_kernel<<<1, kCheckBlock, 0, stream_of(index)>>>(static_cast<const int64_t*>(index.raw_data()), ic,
                                                                  index.numel(), size,
                                                                  static_cast<int64_t*>(first_bad.raw_data()));
  MT_CUDA_CHECK_LAUNCH("first_bad_index_kernel");
}

void gather(const Strided& x, int64_t dim, const Strided& index, const Strided& out) {
  DeviceGuard guard(x.device().index);
  const int64_t n = index.numel();
  if (n == 0) return;
  const OffsetCalculator<3> calc =
      make_offset_calculator<3>(index.shape(), {index.strides(), out.strides(), strides_without(x, dim)});
  dispatch_floating(x.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<grid_for(n), kBlock, 0, stream_of(x)>>>(
        static_cast<const T*>(x.raw_data()), x.strides()[size_t(dim)], x.size(dim),
        static_cast<const int64_t*>(index.raw_data()), static_cast<T*>(out.raw_data()), calc, n);
    MT_CUDA_CHECK_LAUNCH("gather_kernel");
  });
}

void gather_backward(const Strided& dy, int64_t dim, const Strided& index, const Strided& dx) {
  DeviceGuard guard(dx.device().index);
  const int64_t numel = dx.numel();
  if (numel == 0) return;
  MT_CHECK(dx.is_contiguous(), "gather backward: dx must be contiguous, got ", dx.meta());
  const Stream st = stream_of(dx);
  Workspace acc = workspace<double>(numel, dx.device());
  double* pacc = static_cast<double*>(acc.raw_data());
  memset_async(pacc, 0, size_t(numel) * sizeof(double), st);  // all-zero bits: +0.0
  const Shape acc_strides = contiguous_strides(dx.shape());
  Shape lines = index.shape();
  lines[size_t(dim)] = 1;
  const int64_t nlines = numel_of(lines), len = index.size(dim);
  dispatch_floating(dy.dtype(), "gather backward", [&](auto tag) {
    using T = decltype(tag);
    if (nlines > 0 && len > 0) {
      const OffsetCalculator<3> calc = make_offset_calculator<3>(lines, {index.strides(), dy.strides(), acc_strides});
      gather_backward_lines_kernel<T><<<grid_for(nlines), kBlock, 0, st>>>(
          static_cast<const T*>(dy.raw_data()), static_cast<const int64_t*>(index.raw_data()), pacc, calc, nlines, len,
          index.strides()[size_t(dim)], dy.strides()[size_t(dim)], acc_strides[size_t(dim)], dx.size(dim));
      MT_CUDA_CHECK_LAUNCH("gather_backward_lines_kernel");
    }
    store_from_f64_kernel<T><<<grid_for(numel), kBlock, 0, st>>>(pacc, static_cast<T*>(dx.raw_data()), numel);
    MT_CUDA_CHECK_LAUNCH("store_from_f64_kernel");
  });
}

void where(const Strided& cond, const Strided& a, const Strided& b, const Strided& out) {
  DeviceGuard guard(out.device().index);
  const int64_t n = out.numel();
  if (n == 0) return;
  const OffsetCalculator<4> calc =
      make_offset_calculator<4>(out.shape(), {cond.strides(), a.strides(), b.strides(), out.strides()});
  dispatch_floating(out.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    dispatch_condition(cond.dtype(), [&](auto ctag) {
      using M = decltype(ctag);
      where_kernel<T, M><<<grid_for(n), kBlock, 0, stream_of(out)>>>(
          static_cast<const M*>(cond.raw_data()), static_cast<const T*>(a.raw_data()),
          static_cast<const T*>(b.raw_data()), static_cast<T*>(out.raw_data()), calc, n);
      MT_CUDA_CHECK_LAUNCH("where_kernel");
    });
  });
}

}  // namespace mixtape::cuda
