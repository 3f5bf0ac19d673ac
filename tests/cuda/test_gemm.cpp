// The CUDA GEMM (cuda/gemm.cu) through matmul / bmm / linear and their backward helpers, against
// the CPU kernel (tensor/cpu/linalg.cpp): all four transpose combinations, odd and ragged sizes,
// batched and broadcast batches, bias, f32 / f16 / bf16, TF32 only when opted in; and the GEMM's
// own epilogue (scale, beta, bias along rows or columns, ReLU, f32 output) against a host loop.
// Tolerances: Note [GEMM tolerance] in gemm_check.h.
#include <cmath>
#include <tuple>
#include <vector>

#include "cuda/gemm.h"
#include "mixtape.h"
#include "tests/cuda/cuda_test.h"
#include "tests/cuda/gemm_check.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// A logical [rows, cols] input on the CPU: row-major, or (transposed) the transpose of a
// row-major [cols, rows] tensor, so the GPU copy is column-major.
Tensor operand(int64_t rows, int64_t cols, bool transposed, DType dt, uint64_t seed) {
  return transposed ? random({cols, rows}, dt, seed).t() : random({rows, cols}, dt, seed);
}

Tensor matmul_of(const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }
Tensor bmm_of(const std::vector<Tensor>& t) { return bmm(t[0], t[1]); }

// matmul on both devices; the GPU gets each operand in its CPU layout (column-major when
// transposed).
void check_matmul(int64_t M, int64_t N, int64_t K, bool ta, bool tb, DType dt, uint64_t seed, double extra = 0.0) {
  const Tensor a = operand(M, K, ta, dt, seed), b = operand(K, N, tb, dt, seed + 1);
  require_gpu_fp32_accumulated(
      matmul_of, {a, b}, K,
      detail::cat("matmul ", dtype_name(dt), " M=", M, " N=", N, " K=", K, " ta=", ta, " tb=", tb), extra);
}

}  // namespace

TEST_CASE("cuda matmul matches the CPU for every transpose combination and odd sizes", "[cuda]") {
  MT_REQUIRE_GPU();
  // Sizes 1, 7, 17, 33, 127, 129, 257 in M, N and K, mixed so each tile edge is ragged somewhere.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1},     {7, 17, 33}, {33, 7, 1},    {127, 129, 257}, {129, 257, 127},
      {257, 1, 129}, {1, 257, 7}, {17, 33, 129}, {64, 64, 32},    {128, 128, 64}};
  uint64_t seed = 100;
  for (DType dt : kDtypes)
    for (const auto& [M, N, K] : shapes)
      for (int t = 0; t < 4; ++t) check_matmul(M, N, K, t & 1, t & 2, dt, seed++);
}

TEST_CASE("cuda matmul: large tiles and split-K with ragged edges", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : kDtypes) {
    // 12 x 12 tiles of 128 with ragged right and bottom edges: the 128x128 configuration.
    check_matmul(1537, 1500, 67, false, false, dt, seed++);
    check_matmul(1537, 1500, 67, true, true, dt, seed++);
    // One output tile, long K: split into K ranges and finished by the split-K pass.
    check_matmul(33, 17, 4099, false, true, dt, seed++);
    check_matmul(33, 17, 4099, true, false, dt, seed++);
    // K = 0: the output is all zeros on both devices.
    check_matmul(5, 9, 0, false, false, dt, seed++);
  }
}

TEST_CASE("cuda bmm and matmul with batched and broadcast batch dims", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 400;
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    // bmm [B, M, K] x [B, K, N]
    const Tensor a = random({5, 17, 33}, dt, seed++), b = random({5, 33, 7}, dt, seed++);
    require_gpu_fp32_accumulated(bmm_of, {a, b}, 33, "bmm");
    // bmm with b transposed per entry (column-major last two dims)
    const Tensor bt = random({5, 7, 33}, dt, seed++);
    require_gpu_fp32_accumulated(bmm_of, {a, bt.transpose(1, 2)}, 33, "bmm, b transposed");
    // Broadcast batch: [2, 1, M, K] x [3, K, N] -> [2, 3, M, N] (stride-0 batch dims, two of them)
    const Tensor x = random({2, 1, 9, 129}, dt, seed++), y = random({3, 129, 31}, dt, seed++);
    require_gpu_fp32_accumulated(matmul_of, {x, y}, 129, "broadcast batch");
    // [..., M, K] x [K, N]: one GEMM over all rows
    const Tensor z = random({3, 4, 17, 65}, dt, seed++), w = random({65, 33}, dt, seed++);
    require_gpu_fp32_accumulated(matmul_of, {z, w}, 65, "batched x shared");
    // Non-contiguous operands (every other element of a transposed buffer): general strides.
    require_gpu_fp32_accumulated(matmul_of, {strided_copy(x), strided_copy(y)}, 129, "strided operands");
  }
}

TEST_CASE("cuda linear with bias and the matmul backward helpers", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 500;
  for (DType dt : kDtypes) {
    INFO(dtype_name(dt));
    // The LSTM's gate GEMM: batch 64, hidden 256 -> 4 * 256, and odd sizes.
    for (const auto& [rows, in, out] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{64, 256, 1024}, {7, 33, 129}}) {
      const Tensor x = random({rows, in}, dt, seed++), w = random({out, in}, dt, seed++), b = random({out}, dt, seed++);
      require_gpu_fp32_accumulated([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, {x, w, b}, in,
                                   "linear + bias");
      const Tensor dy = random({rows, out}, dt, seed++);
      require_gpu_fp32_accumulated([](const std::vector<Tensor>& t) { return linear_backward_input(t[0], t[1]); },
                                   {dy, w}, out, "linear backward input");
      require_gpu_fp32_accumulated([](const std::vector<Tensor>& t) { return linear_backward_weight(t[0], t[1]); },
                                   {dy, x}, rows, "linear backward weight");
    }
    // matmul backward with a shared b: da = dy b^T summed over the batch as one GEMM.
    const Tensor a = random({3, 9, 17}, dt, seed++), b = random({17, 5}, dt, seed++),
                 dy = random({3, 9, 5}, dt, seed++);
    require_gpu_fp32_accumulated([&](const std::vector<Tensor>& t) { return matmul_backward_b(t[0], t[1], b.shape()); },
                                 {dy, a}, 27, "matmul backward b");
    require_gpu_fp32_accumulated([&](const std::vector<Tensor>& t) { return matmul_backward_a(t[0], t[1], a.shape()); },
                                 {dy, b}, 5, "matmul backward a");
  }
}

TEST_CASE("cuda f32 matmul is exact fp32 unless TF32 is opted in", "[cuda]") {
  MT_REQUIRE_GPU();
#if defined(MIXTAPE_WITH_CUDA)
  // 1 + 2^-20 needs 20 mantissa bits: exact fp32 keeps it, TF32 (10 bits) cannot.
  const double v = 1.0 + std::ldexp(1.0, -20);
  const Tensor a = from_vector(std::vector<double>{v}, {1, 1}), one = from_vector(std::vector<double>{1.0}, {1, 1});
  cuda::Tf32Scope exact(false);
  CHECK(matmul(on_gpu(a), on_gpu(one)).item() == v);
  {
    cuda::Tf32Scope tf32(true);
    CHECK(matmul(on_gpu(a), on_gpu(one)).item() == 1.0);
    // Random shapes under TF32: 2^-9 relative error per product (Note [GEMM tolerance]).
    uint64_t seed = 600;
    for (const auto& [M, N, K] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{7, 17, 33}, {129, 127, 257}, {33, 17, 4099}})
      for (int t = 0; t < 4; ++t) check_matmul(M, N, K, t & 1, t & 2, DType::f32, seed++, std::ldexp(1.0, -9));
  }
  CHECK(matmul(on_gpu(a), on_gpu(one)).item() == v);  // the scope restored exact fp32
#endif
}

TEST_CASE("cuda gemm epilogue: scale, beta, bias along rows or columns, ReLU, f32 output", "[cuda]") {
  MT_REQUIRE_GPU();
#if defined(MIXTAPE_WITH_CUDA)
  const int64_t B = 3, M = 37, N = 45, K = 71;
  uint64_t seed = 700;
  for (DType dt : kDtypes)
    for (DType out_dt : {dt, DType::f32})
      for (int variant = 0; variant < 4; ++variant) {
        const bool relu = variant & 1, rows = variant & 2;
        const float alpha = 0.75f, beta = variant == 3 ? 0.0f : -0.5f;
        INFO(dtype_name(dt) << " -> " << dtype_name(out_dt) << ", relu " << relu << ", bias along "
                            << (rows ? "rows" : "cols") << ", beta " << beta);
        // A [B, M, K] row-major; B column-major [K, N] shared by all entries (batch stride 0).
        const Tensor a = random({B, M, K}, dt, seed++), bt = random({N, K}, dt, seed++);
        const Tensor bias = random({rows ? M : N}, dt, seed++), c0 = random({B, M, N}, out_dt, seed++);
        const Tensor ga = on_gpu(a), gbt = on_gpu(bt), gbias = on_gpu(bias);
        Tensor gc = on_gpu(c0);
        cuda::GemmParams p;
        p.M = M, p.N = N, p.K = K, p.batch = B;
        p.in_dtype = dt, p.out_dtype = out_dt;
        p.a = {ga.raw_data(), K, 1, M * K};
        p.b = {gbt.raw_data(), 1, K, 0};
        p.c = gc.raw_data();
        p.c_row_stride = N, p.c_col_stride = 1, p.c_batch_stride = M * N;
        p.alpha = alpha, p.beta = beta;
        p.bias = gbias.raw_data();
        p.bias_along = rows ? cuda::BiasAlong::rows : cuda::BiasAlong::cols;
        p.activation = relu ? cuda::Activation::relu : cuda::Activation::none;
        cuda::gemm(p, cuda::stream(0));

        // Host reference in double, rounded once to the output dtype.
        const std::vector<double> av = a.to_vector(), bv = bt.to_vector(), biasv = bias.to_vector(),
                                  cv = c0.to_vector();
        std::vector<double> want(size_t(B * M * N)), bound(size_t(B * M * N));
        for (int64_t e = 0; e < B; ++e)
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = 0.0, sa = 0.0;
              for (int64_t k = 0; k < K; ++k) {
                s += av[size_t((e * M + i) * K + k)] * bv[size_t(j * K + k)];
                sa += std::fabs(av[size_t((e * M + i) * K + k)] * bv[size_t(j * K + k)]);
              }
              const size_t o = size_t((e * M + i) * N + j);
              const double bb = biasv[size_t(rows ? i : j)];
              double r = alpha * s + beta * cv[o] + bb;
              if (relu) r = std::max(r, 0.0);
              want[o] = r;
              bound[o] = alpha * sa + std::fabs(beta * cv[o]) + std::fabs(bb);
            }
        const Tensor want_t = from_vector(want, {B, M, N}, out_dt), bound_t = from_vector(bound, {B, M, N}, DType::f64);
        // The reference is rounded once from double, the GPU once from fp32: same bound.
        require_fp32_accumulated(gc, want_t, bound_t, K, "gemm epilogue");
      }
#endif
}
