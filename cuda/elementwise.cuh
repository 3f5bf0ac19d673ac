// The elementwise loop of the CUDA backend, the device twin of for_each_offset in
// tensor/cpu/loops.h: one thread per element (grid-stride), element i being the row-major index
// of the iteration shape, and one element offset per operand from an OffsetCalculator<N>.
// Included by cuda/elementwise.cu (unary, binary), cuda/dropout.cu and cuda/copy.cu (copy_cast,
// fill).
//
// An op is a functor with `__device__ void operator()(int64_t i, const int64_t (&o)[N]) const`:
// i is the row-major index (the Philox counter of kernels that draw random numbers, as on the
// CPU), o[k] the element offset of operand k. Functors, not lambdas: the build does not enable
// --extended-lambda.
#pragma once

#include "cuda/common.cuh"

namespace mixtape::cuda {

// Strides of the one merged dim of a calculator with ndim <= 1 (0 for a single element).
template <int N>
struct LinearStrides {
  int64_t s[N];
};

namespace elementwise_detail {

// Fast path: the merged iteration space is one dim, so the offset of operand k is i * s[k]
// (kContiguous: every s[k] == 1, the common case of fresh contiguous tensors). Any n, any grid:
// the grid-stride loop covers the ragged tail.
template <bool kContiguous, int N, class Op>
__global__ void linear_kernel(Op op, LinearStrides<N> st, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t o[N];
    for (int k = 0; k < N; ++k) o[k] = kContiguous ? i : i * st.s[k];
    op(i, o);
  }
}

// General path: up to kMaxDims merged dims, broadcast operands with stride 0.
template <int N, class Op>
__global__ void strided_kernel(Op op, OffsetCalculator<N> calc, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t o[N];
    calc.offsets(i, o);
    op(i, o);
  }
}

}  // namespace elementwise_detail

// Runs op over the n = numel(shape) elements of `calc` (built for `shape`, e.g. by
// offsets_for<N>) on `stream`. Nothing to do for n == 0.
template <int N, class Op>
void launch_elementwise(const char* name, int64_t n, const OffsetCalculator<N>& calc, const Op& op, Stream stream) {
  if (n <= 0) return;
  const unsigned grid = grid_for(n);
  if (calc.ndim <= 1) {
    LinearStrides<N> st;
    bool contiguous = true;
    for (int k = 0; k < N; ++k) {
      st.s[k] = calc.ndim == 0 ? 0 : calc.strides[k][0];
      contiguous = contiguous && st.s[k] == 1;
    }
    if (contiguous) elementwise_detail::linear_kernel<true, N><<<grid, kBlock, 0, stream>>>(op, st, n);
    else elementwise_detail::linear_kernel<false, N><<<grid, kBlock, 0, stream>>>(op, st, n);
  } else {
    elementwise_detail::strided_kernel<N><<<grid, kBlock, 0, stream>>>(op, calc, n);
  }
  MT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace mixtape::cuda
