// matmul on the GPU: the launcher behind matmul, bmm, linear and their backward passes
// (tensor/ops/linalg.cpp), mirroring cpu::matmul (tensor/cpu/linalg.cpp) on cuda::gemm.
//
// out[..., M, N] = a[..., M, K] b[..., K, N] (+ bias[N] on every row). a and b carry out's batch
// dims (stride 0 where broadcast); their last two dims have any strides (the GEMM's loaders take a
// row and a column stride, so a transposed view costs nothing). f16/bf16 run on Tensor Cores with
// fp32 accumulation, the bias is added in fp32 and each output is rounded once, as Note [16-bit
// GEMM] does on the CPU; f32 is exact fp32 unless TF32 is opted in (Note [TF32 opt-in], gemm.h).
#include "cuda/backend.h"
#include "cuda/common.cuh"
#include "cuda/gemm.h"

namespace mixtape::cuda {

void matmul(const Strided& a, const Strided& b, const Strided& bias, const Strided& out) {
  const size_t nd = size_t(out.dim());
  MT_CHECK(nd >= 2 && a.dim() == out.dim() && b.dim() == out.dim() && out.is_contiguous(),
           "cuda::matmul: expected a, b and a contiguous out of one rank >= 2, got ", a.meta(), " x ", b.meta(), " -> ",
           out.meta());
  MT_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype() && (!bias.defined() || bias.dtype() == out.dtype()),
           "cuda::matmul: operands must share out's dtype: ", a.meta(), " x ", b.meta(), " -> ", out.meta());
  dispatch_floating(out.dtype(), "matmul", [](auto) {});  // f64 stays on the CPU: a clear error
  DeviceGuard guard(out.device().index);
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[nd - 1];
  if (out.numel() == 0) return;

  GemmParams p;
  p.device = out.device().index;
  p.caller = "matmul";
  p.M = M, p.N = N, p.K = K;
  p.in_dtype = p.out_dtype = out.dtype();
  p.a = {a.raw_data(), a.strides()[nd - 2], a.strides()[nd - 1], 0};
  p.b = {b.raw_data(), b.strides()[nd - 2], b.strides()[nd - 1], 0};
  p.c = out.raw_data();
  p.c_row_stride = N, p.c_col_stride = 1, p.c_batch_stride = M * N;
  if (bias.defined()) {
    p.bias = bias.raw_data();
    p.bias_stride = bias.strides()[0];
    p.bias_along = BiasAlong::cols;
  }

  // Batch dims merged as the CPU's for_each_offset merges them; the innermost merged dim becomes
  // the GEMM's batch (one stride per operand), any outer ones a loop of launches. out is
  // contiguous, so batch entry i starts at i * M * N.
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const Shape a_bst(a.strides().begin(), a.strides().end() - 2), b_bst(b.strides().begin(), b.strides().end() - 2);
  const OffsetCalculator<2> offs = make_offset_calculator<2>(batch, {a_bst, b_bst});
  const Stream stream = stream_of(out);
  if (offs.ndim == 0) {
    gemm(p, stream);
    return;
  }
  const int last = offs.ndim - 1;
  const int64_t inner = offs.sizes[last], outer = numel_of(batch) / inner;
  const size_t es = dtype_size(out.dtype());
  p.batch = inner;
  p.a.batch_stride = offs.strides[0][last];
  p.b.batch_stride = offs.strides[1][last];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off[2];
    offs.offsets(o * inner, off);
    p.a.ptr = static_cast<const char*>(a.raw_data()) + off[0] * int64_t(es);
    p.b.ptr = static_cast<const char*>(b.raw_data()) + off[1] * int64_t(es);
    p.c = static_cast<char*>(out.raw_data()) + o * inner * M * N * int64_t(es);
    gemm(p, stream);
  }
}

}  // namespace mixtape::cuda
