// gemm: mixtape's GEMM (cuda/gemm.h) against cuBLAS (cublasGemmEx, the yardstick; the
// library itself never links cuBLAS) in one process, on the same device buffers and stream.
//
// For each dtype (f16 and bf16 with fp32 accumulation, f32 exact, f32 on TF32 Tensor Cores, each
// against cuBLAS's matching compute type) and each shape (squares 256 ... 8192, and the GEMMs of
// the example models), both GEMMs are warmed up, then timed with cudaEvents over enough iterations
// to fill ~0.2 s, and one JSON object per line is printed:
//   {"bench":"gemm","case":"square","dtype":"f16","M":..,"N":..,"K":..,"ours_tflops":..,
//    "cublas_tflops":..,"ratio":..,"max_rel_err_vs_cublas":..}
// ratio = ours / cublas throughput. max_rel_err_vs_cublas = max |ours - cublas| / max |cublas|
// over the output (a normwise error; per-element ratios blow up near zero). The exit status is 1
// when any error exceeds its dtype's tolerance (below), 2 on a usage error.
//
// Usage: build/bench/gemm [--max-size N] [--dtype f16|bf16|f32|tf32] [--quick]
//   --max-size skips squares larger than N; --dtype runs one dtype; --quick: squares <= 1024.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/gemm.h"
#include "tensor/tensor.h"

using namespace mixtape;

namespace {

#define BENCH_CUBLAS(call)                                                                          \
  do {                                                                                              \
    const cublasStatus_t st_ = (call);                                                              \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s failed at %s:%d: status %d\n", #call, __FILE__, __LINE__, int(st_)); \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

// Uniform values in [-1, 1) from a hash of the index, rounded to T.
template <class T>
__global__ void fill_kernel(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    p[i] = cuda::store<T>(float(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

// out[0] = max |a - b| and out[1] = max |b| as float bits (non-negative floats order as integers).
template <class T>
__global__ void compare_kernel(const T* a, const T* b, int64_t n, unsigned int* out) {
  float diff = 0.0f, ref = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = cuda::load(a[i]), y = cuda::load(b[i]);
    const float d = fabsf(x - y);
    diff = d != d ? INFINITY : fmaxf(diff, d);  // NaN counts as an infinite error
    ref = fmaxf(ref, fabsf(y));
  }
  atomicMax(&out[0], __float_as_uint(diff));
  atomicMax(&out[1], __float_as_uint(ref));
}

struct Mode {
  const char* name;
  DType dtype;
  cudaDataType_t cuda_type;
  cublasComputeType_t compute;
  cuda::Fp32Math fp32;
  double tolerance;  // on max_rel_err_vs_cublas
};

// cuBLAS's CUBLAS_COMPUTE_32F is fp32 SGEMM (TF32 only with CUBLAS_COMPUTE_32F_FAST_TF32, or when
// NVIDIA_TF32_OVERRIDE forces it: leave that unset). Tolerances: both sides accumulate in fp32 and round once, so 16-bit results differ by about an
// output ulp at the largest magnitude (f16 2^-10, bf16 2^-7) plus summation-order noise; exact
// fp32 by summation order only (~sqrt(K) 2^-24, K <= 8192); TF32 products carry ~2^-11 relative
// error each, in different places for the two libraries.
const Mode kModes[] = {
    {"f16", DType::f16, CUDA_R_16F, CUBLAS_COMPUTE_32F, cuda::Fp32Math::global, 4e-3},
    {"bf16", DType::bf16, CUDA_R_16BF, CUBLAS_COMPUTE_32F, cuda::Fp32Math::global, 2e-2},
    {"f32", DType::f32, CUDA_R_32F, CUBLAS_COMPUTE_32F, cuda::Fp32Math::exact, 1e-4},
    {"tf32", DType::f32, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, cuda::Fp32Math::tf32, 1e-2},
};

struct Shape3 {
  const char* name;
  int64_t M, N, K;
};

template <class F>
double time_ms(F&& f, cudaStream_t stream, int iters) {
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  MT_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) f();
  MT_CUDA_CHECK(cudaEventRecord(stop, stream));
  MT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  return double(ms) / iters;
}

// Warm-up, then enough iterations for ~0.2 s (at least 3, at most 2000); milliseconds per call.
template <class F>
double bench(F&& f, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) f();
  const double once = time_ms(f, stream, 1);
  const int iters = int(std::clamp(200.0 / std::max(once, 1e-3), 3.0, 2000.0));
  return time_ms(f, stream, iters);
}

template <class T>
bool run_case(const Mode& mode, const Shape3& s, cublasHandle_t handle, cudaStream_t stream) {
  const Device dev = Device::cuda(0);
  Tensor a = empty({s.M, s.K}, mode.dtype, dev), b = empty({s.K, s.N}, mode.dtype, dev);
  Tensor c_ours = empty({s.M, s.N}, mode.dtype, dev), c_ref = empty({s.M, s.N}, mode.dtype, dev);
  fill_kernel<T><<<cuda::grid_for(a.numel()), cuda::kBlock, 0, stream>>>(static_cast<T*>(a.raw_data()), a.numel(), 1u);
  fill_kernel<T><<<cuda::grid_for(b.numel()), cuda::kBlock, 0, stream>>>(static_cast<T*>(b.raw_data()), b.numel(), 2u);
  MT_CUDA_CHECK_LAUNCH("fill_kernel");

  // Row-major C = A B; A [M, K] and B [K, N] row-major.
  cuda::GemmParams p;
  p.M = s.M, p.N = s.N, p.K = s.K;
  p.in_dtype = p.out_dtype = mode.dtype;
  p.a = {a.raw_data(), s.K, 1, 0};
  p.b = {b.raw_data(), s.N, 1, 0};
  p.c = c_ours.raw_data();
  p.c_row_stride = s.N;
  p.fp32_math = mode.fp32;
  auto ours = [&] { cuda::gemm(p, stream); };
  // cuBLAS is column-major: row-major C = A B is column-major C^T = B^T A^T, i.e. (N x M) =
  // (N x K)(K x M) with B and A as stored.
  const float alpha = 1.0f, beta = 0.0f;
  auto theirs = [&] {
    BENCH_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(s.N), int(s.M), int(s.K), &alpha, b.raw_data(),
                              mode.cuda_type, int(s.N), a.raw_data(), mode.cuda_type, int(s.K), &beta, c_ref.raw_data(),
                              mode.cuda_type, int(s.N), mode.compute, CUBLAS_GEMM_DEFAULT));
  };
  const double ms_ours = bench(ours, stream), ms_ref = bench(theirs, stream);

  Tensor stats = empty({2}, DType::f32, dev);  // two float bit patterns, zeroed
  auto* st = static_cast<unsigned int*>(stats.raw_data());
  MT_CUDA_CHECK(cudaMemsetAsync(st, 0, 2 * sizeof(unsigned int), stream));
  compare_kernel<T><<<cuda::grid_for(c_ref.numel()), cuda::kBlock, 0, stream>>>(
      static_cast<const T*>(c_ours.raw_data()), static_cast<const T*>(c_ref.raw_data()), c_ref.numel(), st);
  MT_CUDA_CHECK_LAUNCH("compare_kernel");
  const std::vector<double> v = stats.to(Device::cpu()).to_vector();
  const double err = v[1] > 0.0 ? v[0] / v[1] : v[0];
  const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
  const double ours_tf = flops / (ms_ours * 1e-3) / 1e12, ref_tf = flops / (ms_ref * 1e-3) / 1e12;
  const bool ok = err <= mode.tolerance;
  std::printf(
      "{\"bench\":\"gemm\",\"case\":\"%s\",\"dtype\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
      "\"ours_tflops\":%.3f,\"cublas_tflops\":%.3f,\"ratio\":%.3f,\"max_rel_err_vs_cublas\":%.3g,"
      "\"tolerance\":%.3g,\"ok\":%s}\n",
      s.name, mode.name, (long long)s.M, (long long)s.N, (long long)s.K, ours_tf, ref_tf, ours_tf / ref_tf, err,
      mode.tolerance, ok ? "true" : "false");
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_size = 8192;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--max-size" && i + 1 < argc) max_size = std::atoll(argv[++i]);
    else if (arg == "--dtype" && i + 1 < argc) only = argv[++i];
    else if (arg == "--quick") max_size = 1024;
    else {
      std::fprintf(stderr, "usage: %s [--max-size N] [--dtype f16|bf16|f32|tf32] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::fprintf(stderr, "gemm: no CUDA device visible\n");
    return 2;
  }
  std::vector<Shape3> shapes;
  for (int64_t n : {256, 512, 1024, 2048, 4096, 8192})
    if (n <= max_size) shapes.push_back({"square", n, n, n});
  // The example models (batch 128 Fashion-MNIST CNN of width 32; char-LSTM batch 64, hidden 256):
  shapes.push_back({"cnn_conv1_im2col", 128 * 28 * 28, 32, 9});       // (pixels, OC) = (pixels, 1*3*3) W^T
  shapes.push_back({"cnn_conv2_im2col", 128 * 14 * 14, 64, 32 * 9});  // second conv after a 2x2 pool
  shapes.push_back({"cnn_conv1_weight_grad", 32, 9, 128 * 28 * 28});  // dW = G col^T: split-K
  shapes.push_back({"cnn_linear", 128, 128, 64 * 7 * 7});             // 128 x 3136 -> 128
  shapes.push_back({"lstm_gates", 64, 4 * 256, 256});                 // x W_ih^T and h W_hh^T

  cudaStream_t stream = cuda::stream(0);
  cublasHandle_t handle;
  BENCH_CUBLAS(cublasCreate(&handle));
  BENCH_CUBLAS(cublasSetStream(handle, stream));
  bool ok = true;
  try {
    for (const Mode& mode : kModes) {
      if (!only.empty() && only != mode.name) continue;
      for (const Shape3& s : shapes) {
        if (mode.dtype == DType::f16) ok &= run_case<__half>(mode, s, handle, stream);
        else if (mode.dtype == DType::bf16) ok &= run_case<__nv_bfloat16>(mode, s, handle, stream);
        else ok &= run_case<float>(mode, s, handle, stream);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm: %s\n", e.what());
    return 2;
  }
  BENCH_CUBLAS(cublasDestroy(handle));
  if (!ok) std::fprintf(stderr, "gemm: some results disagree with cuBLAS beyond tolerance\n");
  return ok ? 0 : 1;
}
