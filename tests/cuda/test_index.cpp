// cuda/index.cu against the CPU kernels (tensor/cpu/index.cpp): gather and index_select forward
// and backward, where and masked_fill, in f32, f16 and bf16, contiguous and strided, ragged
// sizes, repeated indices, conditions of every dtype, and out-of-range indices.
#include "tests/cuda/cuda_test.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// An i64 index of `shape` with entries in [0, n), many repeated.
Tensor index_tensor(const Shape& shape, int64_t n, uint64_t seed) {
  std::vector<double> u = random(shape, DType::f64, seed, 0.0, 1.0).to_vector();
  std::vector<int64_t> v(u.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::min<int64_t>(n - 1, int64_t(u[i] * u[i] * double(n)));
  return from_vector(v, shape);
}

}  // namespace

TEST_CASE("cuda gather and its backward match the CPU bit for bit", "[cuda]") {
  MT_REQUIRE_GPU();
  // (input shape, index shape, dim): index smaller in the other dims, larger or smaller in dim.
  struct Case {
    Shape x, index;
    int64_t dim;
  };
  const std::vector<Case> cases = {{{7}, {33}, 0},
                                   {{5, 33}, {5, 7}, 1},
                                   {{33, 5}, {40, 3}, 0},
                                   {{3, 31, 7}, {2, 5, 7}, 1},
                                   {{4, 9, 2}, {4, 9, 17}, -1},
                                   {{1000, 3}, {3000, 2}, 0}};
  uint64_t seed = 100;
  for (DType dt : kDtypes)
    for (const Case& c : cases)
      for (bool strided : {false, true}) {
        const int64_t d = c.dim < 0 ? c.dim + int64_t(c.x.size()) : c.dim;
        const Tensor x = random(c.x, dt, ++seed);
        const Tensor index = index_tensor(c.index, c.x[size_t(d)], ++seed);
        const Tensor dy = random(c.index, dt, ++seed, -2.0, 2.0);
        const std::string what = std::string(dtype_name(dt)) + " gather " + shape_str(c.x) + " by " +
                                 shape_str(c.index) + " dim " + std::to_string(c.dim) + " " + layout_name(strided);
        require_bit_identical(gather(gpu_input(x, strided), c.dim, gpu_input(index, strided)), gather(x, c.dim, index),
                              what);
        require_bit_identical(gather_backward(gpu_input(dy, strided), c.dim, gpu_input(index, strided), c.x),
                              gather_backward(dy, c.dim, index, c.x), what + " backward");
      }
}

TEST_CASE("cuda index_select and its backward match the CPU bit for bit", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (DType dt : kDtypes)
    for (const Shape& xs : {Shape{17}, Shape{40, 33}, Shape{3, 31, 7}})
      for (int64_t dim = 0; dim < int64_t(xs.size()); ++dim)
        for (int64_t n : {1, 5, 100})
          for (bool strided : {false, true}) {
            const Tensor x = random(xs, dt, ++seed);
            const Tensor index = index_tensor({n}, xs[size_t(dim)], ++seed);
            const Tensor want = index_select(x, dim, index);
            const Tensor dy = random(want.shape(), dt, ++seed);
            const std::string what = std::string(dtype_name(dt)) + " index_select " + shape_str(xs) + " dim " +
                                     std::to_string(dim) + " n " + std::to_string(n) + " " + layout_name(strided);
            require_bit_identical(index_select(gpu_input(x, strided), dim, on_gpu(index)), want, what);
            require_bit_identical(index_select_backward(gpu_input(dy, strided), dim, on_gpu(index), xs),
                                  index_select_backward(dy, dim, index, xs), what + " backward");
          }
}

TEST_CASE("cuda where and masked_fill match the CPU bit for bit, conditions of every dtype", "[cuda]") {
  MT_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t seed = 500;
  // (condition, a, b) shapes broadcast together.
  const std::vector<std::vector<Shape>> shapes = {
      {{33}, {33}, {33}}, {{7, 1}, {1, 33}, {7, 33}}, {{3, 31, 7}, {31, 1}, {7}}, {{1}, {1000, 3}, {1000, 3}}};
  for (DType dt : kDtypes)
    for (DType ct : {DType::i64, DType::f32, DType::f16, DType::bf16})
      for (const auto& s : shapes)
        for (bool strided : {false, true}) {
          Tensor cond = random(s[0], DType::f64, ++seed, -1.0, 1.0);
          std::vector<double> cv = cond.to_vector();
          for (size_t i = 0; i < cv.size(); ++i) cv[i] = i % 5 == 3 ? nan : (cv[i] > 0 ? 1.0 : (i % 2 ? -0.0 : 0.0));
          if (ct == DType::i64)
            for (double& v : cv) v = std::isnan(v) ? 7 : v;  // any nonzero is true
          cond = from_vector(cv, s[0], ct);
          const Tensor a = random(s[1], dt, ++seed), b = random(s[2], dt, ++seed);
          const std::string what = std::string(dtype_name(dt)) + " where, condition " + dtype_name(ct) + " " +
                                   shape_str(s[0]) + ", a " + shape_str(s[1]) + ", b " + shape_str(s[2]) + " " +
                                   layout_name(strided);
          require_bit_identical(where(gpu_input(cond, strided), gpu_input(a, strided), gpu_input(b, strided)),
                                where(cond, a, b), what);
          require_bit_identical(masked_fill(gpu_input(b, strided), gpu_input(cond, strided), -1.0 / 3.0),
                                masked_fill(b, cond, -1.0 / 3.0), what + " masked_fill");
        }
}

TEST_CASE("cuda gather and index_select reject out-of-range indices like the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const Tensor x = on_gpu(random({3, 4}, DType::f32, 1));
  for (int64_t bad : {int64_t(-1), int64_t(4), int64_t(1) << 40}) {
    const Tensor index = on_gpu(from_vector(std::vector<int64_t>{0, 3, bad, 1, bad, 2}, {3, 2}));
    REQUIRE_THROWS_WITH(gather(x, 1, index), Catch::Contains("gather: index " + std::to_string(bad) +
                                                             " (at position 2 of index i64[3, 2] cuda:0) is out of "
                                                             "range for dim 1 of size 4"));
    REQUIRE_THROWS_WITH(index_select(x, 1, index.reshape({6})),
                        Catch::Contains("index_select: index " + std::to_string(bad) + " (at position 2"));
  }
  // The stream is still usable after the error.
  const Tensor ok = from_vector(std::vector<int64_t>{3, 0}, {1, 2});
  require_bit_identical(gather(x, 1, on_gpu(ok)), gather(on_cpu(x), 1, ok), "after an error");
}
