// Max, average and adaptive average pooling on the GPU against the CPU kernels (tensor/cpu/pool.cpp). Every result
// is bit-identical: the kernels visit the CPU's clipped windows in the CPU's order and sum in the
// same type (cuda/pool.cu), including the max-pool gradient of overlapping windows, the first
// maximum on ties and the first NaN.
#include "tests/cuda/cuda_test.h"

#include <limits>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

struct PoolCase {
  Size2 kernel, stride, padding;
};

// Non-overlapping, overlapping (stride < kernel: several windows share an input), padded,
// rectangular, and a kernel as large as the padded input.
const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> cases = {{2, 2, 0},
                                              {3, 2, 1},
                                              {3, 1, 1},
                                              {{2, 3}, {1, 2}, {1, 0}},
                                              {1, 1, 0},
                                              {{5, 7}, {5, 7}, 0},
                                              {{4, 2}, {3, 1}, {2, 1}}};
  return cases;
}

const std::vector<Shape>& pool_shapes() {
  static const std::vector<Shape> shapes = {{1, 1, 5, 7}, {33, 3, 5, 7}, {2, 17, 28, 28}, {1, 3, 28, 28}, {3, 1, 9, 6}};
  return shapes;
}

// Whether the case fits the shape (the front-end's rule: kernel <= padded input).
bool fits(const PoolCase& pc, const Shape& s) {
  return pc.kernel.h <= s[2] + 2 * pc.padding.h && pc.kernel.w <= s[3] + 2 * pc.padding.w;
}

std::string case_name(DType dt, const Shape& s, const PoolCase& pc, bool strided) {
  return std::string(dtype_name(dt)) + " " + shape_str(s) + " kernel " + size2_str(pc.kernel) + " stride " +
         size2_str(pc.stride) + " padding " + size2_str(pc.padding) + " " + layout_name(strided);
}

}  // namespace

TEST_CASE("cuda max_pool2d forward and backward are bit-identical to the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 10;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& s : pool_shapes())
      for (const PoolCase& pc : pool_cases())
        for (bool strided : {false, true}) {
          if (!fits(pc, s)) continue;
          ++seed;
          const std::string what = case_name(dt, s, pc, strided);
          // Few distinct values (multiples of 1/4 in [-2, 2)), so windows hold ties: the first
          // maximum must win on both devices.
          const Tensor x = random(s, dt, seed, -8.0, 8.0).to(DType::f64);
          std::vector<double> xv = x.to_vector();
          for (double& v : xv) v = std::floor(v) / 4.0;
          const Tensor xt = from_vector(xv, s, dt);
          const PoolWithIndices want = max_pool2d_with_indices(xt, pc.kernel, pc.stride, pc.padding);
          const PoolWithIndices got = max_pool2d_with_indices(gpu_input(xt, strided), pc.kernel, pc.stride, pc.padding);
          REQUIRE(got.indices.dtype() == DType::i64);
          require_bit_identical(got.out, want.out, what + ": out");
          require_bit_identical(got.indices, want.indices, what + ": indices");

          const Tensor dy = random(want.out.shape(), dt, seed + 1);
          const Tensor dx_want = max_pool2d_backward(dy, want.indices, s);
          const Tensor dx_got = max_pool2d_backward(gpu_input(dy, strided), got.indices, s);
          require_bit_identical(dx_got, dx_want, what + ": dx");
        }
}

TEST_CASE("cuda max_pool2d propagates the first NaN and handles -inf windows", "[cuda]") {
  MT_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = from_vector(std::vector<double>{1, nan, 3, -nan, 5, 2, -inf, -inf, -inf, -inf, 0, 9, 4, 4, 4, 4},
                                 {1, 1, 4, 4}, dt);
    for (const PoolCase& pc : {PoolCase{2, 2, 0}, PoolCase{3, 1, 1}, PoolCase{2, 1, 1}}) {
      const std::string what = case_name(dt, x.shape(), pc, false);
      const PoolWithIndices want = max_pool2d_with_indices(x, pc.kernel, pc.stride, pc.padding);
      const PoolWithIndices got = max_pool2d_with_indices(on_gpu(x), pc.kernel, pc.stride, pc.padding);
      require_bit_identical(got.out, want.out, what + ": out");
      require_bit_identical(got.indices, want.indices, what + ": indices");
    }
  }
}

TEST_CASE("cuda avg_pool2d forward and backward are bit-identical to the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& s : pool_shapes())
      for (const PoolCase& pc : pool_cases())
        for (bool strided : {false, true}) {
          if (!fits(pc, s)) continue;
          ++seed;
          const std::string what = case_name(dt, s, pc, strided);
          const Tensor x = random(s, dt, seed, -2.0, 2.0);
          const Tensor want = avg_pool2d(x, pc.kernel, pc.stride, pc.padding);
          require_bit_identical(avg_pool2d(gpu_input(x, strided), pc.kernel, pc.stride, pc.padding), want,
                                what + ": out");
          const Tensor dy = random(want.shape(), dt, seed + 1);
          require_bit_identical(avg_pool2d_backward(gpu_input(dy, strided), s, pc.kernel, pc.stride, pc.padding),
                                avg_pool2d_backward(dy, s, pc.kernel, pc.stride, pc.padding), what + ": dx");
        }
}

TEST_CASE("cuda avg_pool2d counts padded zeros in the divisor", "[cuda]") {
  MT_REQUIRE_GPU();
  // A 1x1 input of 9 with a 3x3 window and padding 1: 9 / 9 = 1 (count_include_pad), not 9.
  const Tensor x = full({1, 1, 1, 1}, 9.0);
  const Tensor y = on_cpu(avg_pool2d(on_gpu(x), 3, 1, 1));
  CHECK(y.item() == 1.0);
}

TEST_CASE("cuda adaptive_avg_pool2d forward and backward are bit-identical to the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  // Output sizes that divide the input, that do not (overlapping windows), larger than the input,
  // and global pooling.
  const std::vector<Size2> sizes = {{1, 1}, {3, 4}, {7, 5}, {2, 9}, {28, 28}};
  uint64_t seed = 600;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& s : pool_shapes())
      for (Size2 os : sizes)
        for (bool strided : {false, true}) {
          ++seed;
          const std::string what =
              std::string(dtype_name(dt)) + " " + shape_str(s) + " -> " + size2_str(os) + " " + layout_name(strided);
          const Tensor x = random(s, dt, seed, -2.0, 2.0);
          const Tensor want = adaptive_avg_pool2d(x, os);
          require_bit_identical(adaptive_avg_pool2d(gpu_input(x, strided), os), want, what + ": out");
          const Tensor dy = random(want.shape(), dt, seed + 1);
          require_bit_identical(adaptive_avg_pool2d_backward(gpu_input(dy, strided), s),
                                adaptive_avg_pool2d_backward(dy, s), what + ": dx");
        }
}

TEST_CASE("cuda pooling with ceil_mode, dilation and count_include_pad is bit-identical to the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  struct OptCase {
    Size2 kernel, stride, padding, dilation;
    bool ceil_mode, count_include_pad;
  };
  // ceil_mode windows clipped at the end (with and without padding), dilated max windows,
  // averages that leave the padding out of the divisor.
  const std::vector<OptCase> cases = {{3, 2, 1, 1, true, true},
                                      {3, 2, 1, 2, true, false},
                                      {{2, 3}, {2, 2}, {1, 1}, 1, true, false},
                                      {2, 2, 0, {2, 1}, true, true},
                                      {{3, 2}, {2, 3}, {1, 0}, {1, 3}, false, false},
                                      {3, 3, 1, 1, true, true}};
  uint64_t seed = 900;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape& s : pool_shapes())
      for (const OptCase& pc : cases)
        for (bool strided : {false, true}) {
          const Size2 span{pc.dilation.h * (pc.kernel.h - 1) + 1, pc.dilation.w * (pc.kernel.w - 1) + 1};
          if (span.h > s[2] + 2 * pc.padding.h || span.w > s[3] + 2 * pc.padding.w) continue;
          ++seed;
          const std::string what = std::string(dtype_name(dt)) + " " + shape_str(s) + " kernel " +
                                   size2_str(pc.kernel) + " stride " + size2_str(pc.stride) + " padding " +
                                   size2_str(pc.padding) + " dilation " + size2_str(pc.dilation) +
                                   (pc.ceil_mode ? " ceil_mode" : "") + (pc.count_include_pad ? "" : " no pad count") +
                                   " " + layout_name(strided);
          const Tensor x = random(s, dt, seed, -2.0, 2.0);
          const PoolWithIndices want =
              max_pool2d_with_indices(x, pc.kernel, pc.stride, pc.padding, pc.dilation, pc.ceil_mode);
          const PoolWithIndices got = max_pool2d_with_indices(gpu_input(x, strided), pc.kernel, pc.stride, pc.padding,
                                                              pc.dilation, pc.ceil_mode);
          require_bit_identical(got.out, want.out, what + ": max out");
          require_bit_identical(got.indices, want.indices, what + ": max indices");
          const Tensor a_want = avg_pool2d(x, pc.kernel, pc.stride, pc.padding, pc.ceil_mode, pc.count_include_pad);
          require_bit_identical(
              avg_pool2d(gpu_input(x, strided), pc.kernel, pc.stride, pc.padding, pc.ceil_mode, pc.count_include_pad),
              a_want, what + ": avg out");
          const Tensor dy = random(a_want.shape(), dt, seed + 1);
          require_bit_identical(
              avg_pool2d_backward(gpu_input(dy, strided), s, pc.kernel, pc.stride, pc.padding, pc.ceil_mode,
                                  pc.count_include_pad),
              avg_pool2d_backward(dy, s, pc.kernel, pc.stride, pc.padding, pc.ceil_mode, pc.count_include_pad),
              what + ": avg dx");
        }
}
