// gemm: mixtape's GEMM (cuda/gemm.h) against cuBLAS (cublasGemmStridedBatchedEx, the yardstick;
// the library itself never links cuBLAS) in one process, on the same device buffers and stream.
//
// For each dtype (f16 and bf16 with fp32 accumulation, f32 exact, f32 on TF32 Tensor Cores, each
// against cuBLAS's matching compute type) and each case, both GEMMs are warmed up, then timed
// with cudaEvents over enough iterations to fill ~0.2 s. The cases:
//   square, square_ABt, square_AtB   n x n x n for n = 256 ... --max-size, as A B, A B^T (a
//                                    linear layer's forward, x W^T) and A^T B (its weight
//                                    gradient, dY^T x)
//   cnn_*, lstm_*                    the GEMMs the examples make, with the operands exactly as
//                                    the library lays them out: cuda/conv.cu's batched convs
//                                    (one GEMM per batch of images, the weight shared: batch
//                                    stride 0; the column buffers' padded rows, Note [Padded
//                                    column rows]), their input and weight gradients, the linear
//                                    layers' three products, the LSTM gates
// and one JSON object per line is printed:
//   {"bench":"gemm","case":"cnn_conv2_fwd","dtype":"f16","M":..,"N":..,"K":..,"batch":..,
//    "a":"row"|"col","b":"row"|"col","out":"f16"|"f32","ours_tflops":..,"cublas_tflops":..,
//    "ratio":..,"max_rel_err_vs_cublas":..,"loads_a":16,"loads_b":8,"device_allocs_after_warmup":0,..}
// ratio = ours / cublas throughput. max_rel_err_vs_cublas = max |ours - cublas| / max |cublas|
// over the output (a normwise error; per-element ratios blow up near zero). loads_a / loads_b:
// the bytes per load our GEMM used for the full chunks of each operand (16, 8, 4; 0 = element by
// element; -1 = no full chunk, cuda::kGemmNoFullChunk; cuda::gemm_load_counts). device_allocs_after_warmup: allocations that reached cudaMalloc
// during our timed calls (cuda::runtime_counters; the split-K workspace must come from the cache).
// The exit status is 1 when any error exceeds its dtype's tolerance or our GEMM allocated after
// warm-up, 2 on a usage error.
//
// Usage: build/bench/gemm [--max-size N] [--dtype f16|bf16|f32|tf32] [--quick] [--case PREFIX]
//   --max-size skips squares larger than N; --dtype runs one dtype; --quick: squares <= 1024;
//   --case runs the cases whose name starts with PREFIX (e.g. cnn_).
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

// One operand as the GEMM sees it: strides in elements (cuda::GemmOperand without the pointer).
struct Layout {
  int64_t rs, cs, bs;
};
Layout row_major(int64_t ld, int64_t bs = 0) { return {ld, 1, bs}; }  // element (r, c) at r * ld + c
Layout col_major(int64_t ld, int64_t bs = 0) { return {1, ld, bs}; }  // element (r, c) at c * ld + r

struct Case {
  std::string name;
  int64_t M, N, K, batch;
  Layout a, b;           // logical A [M, K] and B [K, N]
  bool f32_out = false;  // C in f32 whatever the inputs (a conv's input gradient columns)
};

// Elements an operand spans: the largest offset it reaches, plus one.
int64_t extent(const Layout& l, int64_t rows, int64_t cols, int64_t batch) {
  return (batch - 1) * l.bs + (rows - 1) * l.rs + (cols - 1) * l.cs + 1;
}

int64_t padded8(int64_t n) { return (n + 7) / 8 * 8; }  // cuda/conv.cu's kRowAlign

// The example models' GEMMs, as the library issues them.
std::vector<Case> model_cases() {
  std::vector<Case> v;
  // cnn (examples/cnn_train.h): batch 64 of 28x28 images, Conv2d(1, 32, 3, pad 1) -> pool ->
  // Conv2d(32, 64, 3, pad 1) on 14x14 -> pool -> Linear(64*7*7, 128) -> Linear(128, 10).
  const int64_t B = 64;
  struct Conv {
    const char* name;
    int64_t C, OC, L;  // 3x3 kernels: R = 9 C
    bool first;        // the first layer computes no input gradient
  };
  for (const Conv& c : {Conv{"cnn_conv1", 1, 32, 28 * 28, true}, Conv{"cnn_conv2", 32, 64, 14 * 14, false}}) {
    const int64_t R = 9 * c.C, Lp = padded8(c.L), cols = B * c.L, cs = padded8(cols);
    // forward: out_n [OC, L] = W [OC, R] col_n [R, L]; W shared, col_n's rows Lp apart
    v.push_back({std::string(c.name) + "_fwd", c.OC, c.L, R, B, row_major(R), row_major(Lp, R * Lp)});
    // input gradient: dcol_n [R, L] = W^T [R, OC] dy_n [OC, L], fp32 columns; dy as the tensor is
    if (!c.first)
      v.push_back({std::string(c.name) + "_dgrad", R, c.L, c.OC, B, col_major(R), row_major(c.L, c.OC * c.L), true});
    // weight gradient: dW [OC, R] = G [OC, B*L] col^T [B*L, R]; both rows cs apart; split-K
    v.push_back({std::string(c.name) + "_wgrad", c.OC, R, cols, 1, row_major(cs), col_major(cs)});
  }
  // Linear(3136, 128): forward x W^T (A B^T), input gradient dY W (A B), weight gradient dY^T x (A^T B).
  const int64_t in = 64 * 7 * 7, out = 128;
  v.push_back({"cnn_linear1_fwd", B, out, in, 1, row_major(in), col_major(in)});
  v.push_back({"cnn_linear1_dgrad", B, in, out, 1, row_major(out), row_major(in)});
  v.push_back({"cnn_linear1_wgrad", out, in, B, 1, col_major(out), row_major(in)});
  // char_lstm: batch 64, hidden 256: the gates x W_ih^T and h W_hh^T, and the weight gradient.
  v.push_back({"lstm_gates_fwd", 64, 4 * 256, 256, 1, row_major(256), col_major(256)});
  v.push_back({"lstm_gates_wgrad", 4 * 256, 256, 64, 1, col_major(4 * 256), row_major(256)});
  return v;
}

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

cublasOperation_t op_of(const Layout& l) { return l.cs == 1 ? CUBLAS_OP_N : CUBLAS_OP_T; }
int ld_of(const Layout& l) { return int(l.cs == 1 ? l.rs : l.cs); }

template <class T, class Out>
bool run_case(const Mode& mode, const Case& s, cublasHandle_t handle, cudaStream_t stream) {
  const Device dev = Device::cuda(0);
  const DType out_dtype = s.f32_out ? DType::f32 : mode.dtype;
  Tensor a = empty({extent(s.a, s.M, s.K, s.batch)}, mode.dtype, dev);
  Tensor b = empty({extent(s.b, s.K, s.N, s.batch)}, mode.dtype, dev);
  Tensor c_ours = empty({s.batch, s.M, s.N}, out_dtype, dev), c_ref = empty({s.batch, s.M, s.N}, out_dtype, dev);
  fill_kernel<T><<<cuda::grid_for(a.numel()), cuda::kBlock, 0, stream>>>(static_cast<T*>(a.raw_data()), a.numel(), 1u);
  fill_kernel<T><<<cuda::grid_for(b.numel()), cuda::kBlock, 0, stream>>>(static_cast<T*>(b.raw_data()), b.numel(), 2u);
  MT_CUDA_CHECK_LAUNCH("fill_kernel");

  // C[z] = A[z] B[z], C contiguous [batch][M][N].
  cuda::GemmParams p;
  p.M = s.M, p.N = s.N, p.K = s.K, p.batch = s.batch;
  p.in_dtype = mode.dtype;
  p.out_dtype = out_dtype;
  p.a = {a.raw_data(), s.a.rs, s.a.cs, s.a.bs};
  p.b = {b.raw_data(), s.b.rs, s.b.cs, s.b.bs};
  p.c = c_ours.raw_data();
  p.c_row_stride = s.N, p.c_col_stride = 1, p.c_batch_stride = s.M * s.N;
  p.fp32_math = mode.fp32;
  auto ours = [&] { cuda::gemm(p, stream); };
  // cuBLAS is column-major: row-major C = A B is column-major C^T = B^T A^T, (N x M) = (N x K)(K x M).
  // A row-major operand is its transpose in column-major terms (op N); a column-major one needs op T.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t c_type = s.f32_out ? CUDA_R_32F : mode.cuda_type;
  auto theirs = [&] {
    BENCH_CUBLAS(cublasGemmStridedBatchedEx(handle, op_of(s.b), op_of(s.a), int(s.N), int(s.M), int(s.K), &alpha,
                                            b.raw_data(), mode.cuda_type, ld_of(s.b), s.b.bs, a.raw_data(),
                                            mode.cuda_type, ld_of(s.a), s.a.bs, &beta, c_ref.raw_data(), c_type,
                                            int(s.N), s.M * s.N, int(s.batch), mode.compute, CUBLAS_GEMM_DEFAULT));
  };
  // Warm-up (the caching allocator fills) inside bench(); the timed calls must not allocate.
  const cuda::GemmLoadPlan plan = cuda::gemm_load_plan(p);
  ours();
  const uint64_t allocs0 = cuda::runtime_counters().device_allocs;
  const double ms_ours = bench(ours, stream);
  const uint64_t allocs = cuda::runtime_counters().device_allocs - allocs0;
  const double ms_ref = bench(theirs, stream);

  Tensor stats = empty({2}, DType::f32, dev);  // two float bit patterns, zeroed
  auto* st = static_cast<unsigned int*>(stats.raw_data());
  MT_CUDA_CHECK(cudaMemsetAsync(st, 0, 2 * sizeof(unsigned int), stream));
  compare_kernel<Out><<<cuda::grid_for(c_ref.numel()), cuda::kBlock, 0, stream>>>(
      static_cast<const Out*>(c_ours.raw_data()), static_cast<const Out*>(c_ref.raw_data()), c_ref.numel(), st);
  MT_CUDA_CHECK_LAUNCH("compare_kernel");
  const std::vector<double> v = stats.to(Device::cpu()).to_vector();
  const double err = v[1] > 0.0 ? v[0] / v[1] : v[0];
  const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K) * double(s.batch);
  const double ours_tf = flops / (ms_ours * 1e-3) / 1e12, ref_tf = flops / (ms_ref * 1e-3) / 1e12;
  const bool ok = err <= mode.tolerance && allocs == 0;
  std::printf(
      "{\"bench\":\"gemm\",\"case\":\"%s\",\"dtype\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"batch\":%lld,"
      "\"a\":\"%s\",\"b\":\"%s\",\"out\":\"%s\",\"ours_ms\":%.4f,\"cublas_ms\":%.4f,\"ours_tflops\":%.3f,"
      "\"cublas_tflops\":%.3f,\"ratio\":%.3f,\"max_rel_err_vs_cublas\":%.3g,\"tolerance\":%.3g,\"loads_a\":%d,"
      "\"loads_b\":%d,\"device_allocs_after_warmup\":%llu,\"ok\":%s}\n",
      s.name.c_str(), mode.name, (long long)s.M, (long long)s.N, (long long)s.K, (long long)s.batch,
      s.a.cs == 1 ? "row" : "col", s.b.cs == 1 ? "row" : "col", dtype_name(out_dtype), ms_ours, ms_ref, ours_tf, ref_tf,
      ours_tf / ref_tf, err, mode.tolerance, plan.a_bytes, plan.b_bytes, (unsigned long long)allocs,
      ok ? "true" : "false");
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t max_size = 8192;
  std::string only, prefix;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--max-size" && i + 1 < argc) max_size = std::atoll(argv[++i]);
    else if (arg == "--dtype" && i + 1 < argc) only = argv[++i];
    else if (arg == "--case" && i + 1 < argc) prefix = argv[++i];
    else if (arg == "--quick") max_size = 1024;
    else {
      std::fprintf(stderr, "usage: %s [--max-size N] [--dtype f16|bf16|f32|tf32] [--quick] [--case PREFIX]\n", argv[0]);
      return 2;
    }
  }
  if (!cuda::is_available()) {
    std::fprintf(stderr, "gemm: no CUDA device visible\n");
    return 2;
  }
  std::vector<Case> cases;
  for (int64_t n : {256, 512, 1024, 2048, 4096, 8192})
    if (n <= max_size) {
      cases.push_back({"square", n, n, n, 1, row_major(n), row_major(n)});
      cases.push_back({"square_ABt", n, n, n, 1, row_major(n), col_major(n)});
      cases.push_back({"square_AtB", n, n, n, 1, col_major(n), row_major(n)});
    }
  for (Case& c : model_cases()) cases.push_back(c);

  cudaStream_t stream = cuda::stream(0);
  cublasHandle_t handle;
  BENCH_CUBLAS(cublasCreate(&handle));
  BENCH_CUBLAS(cublasSetStream(handle, stream));
  bool ok = true;
  try {
    for (const Mode& mode : kModes) {
      if (!only.empty() && only != mode.name) continue;
      for (const Case& s : cases) {
        if (s.name.rfind(prefix, 0) != 0) continue;
        if (mode.dtype == DType::f16) {
          ok &= s.f32_out ? run_case<__half, float>(mode, s, handle, stream)
                          : run_case<__half, __half>(mode, s, handle, stream);
        } else if (mode.dtype == DType::bf16) {
          ok &= s.f32_out ? run_case<__nv_bfloat16, float>(mode, s, handle, stream)
                          : run_case<__nv_bfloat16, __nv_bfloat16>(mode, s, handle, stream);
        } else {
          ok &= run_case<float, float>(mode, s, handle, stream);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm: %s\n", e.what());
    return 2;
  }
  BENCH_CUBLAS(cublasDestroy(handle));
  if (!ok)
    std::fprintf(stderr,
                 "gemm: some results disagree with cuBLAS beyond tolerance, or our GEMM allocated after warm-up\n");
  return ok ? 0 : 1;
}
