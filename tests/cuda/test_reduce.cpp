// cuda/reduce.cu against the CPU kernels (tensor/cpu/reduce.cpp): sum, mean, max, amax, min over
// each dim, several dims and all dims, forward and backward, contiguous and strided, ragged sizes;
// max_abs with NaN and empty tensors; argmax / argmin (ties, NaN) and var / std with their
// backward.
#include "tests/cuda/cuda_test.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};
const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::amax, ReduceOp::min};

// Shapes with ragged sizes: single dims of the brief's sizes, and a few multi-dim ones.
const std::vector<Shape> kShapes = {{1},        {7},          {31},        {33},         {1000},
                                    {4097},     {100003},     {7, 33},     {33, 1000},   {4097, 3},
                                    {3, 31, 7}, {2, 3, 5, 7}, {1, 257, 1}, {1000, 1, 33}};

// For the one-block-per-output kernels (argmax, var): the same sizes without the shapes that
// make tens of thousands of tiny blocks, which the emulated device runs slowly.
const std::vector<Shape> kSliceShapes = {{1},     {7},        {33},       {4097},       {100003},
                                         {7, 33}, {33, 1000}, {3, 31, 7}, {2, 3, 5, 7}, {1, 257, 1}};

// The dim sets to reduce over: each dim alone, all dims ({}), and for 3+ dims the first and the
// last together and all but the first.
std::vector<std::vector<int64_t>> dim_sets(const Shape& s) {
  std::vector<std::vector<int64_t>> r;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) r.push_back({d});
  r.push_back({});
  if (s.size() >= 3) {
    r.push_back({0, int64_t(s.size()) - 1});
    std::vector<int64_t> rest;
    for (int64_t d = 1; d < int64_t(s.size()); ++d) rest.push_back(d);
    r.push_back(rest);
  }
  return r;
}

std::string describe(ReduceOp op, const Shape& s, const std::vector<int64_t>& dims, DType dt, const char* layout) {
  return std::string(reduce_op_name(op)) + " of " + shape_str(s) + " " + dtype_name(dt) + " over dims " +
         shape_str(dims) + " (" + layout + ")";
}

// Uniform integers in [-k, k] (as `dtype`, exact in every dtype for small k), on the CPU.
Tensor small_integers(const Shape& shape, DType dtype, uint64_t seed, int k) {
  std::vector<double> v = random(shape, DType::f64, seed, -k - 0.49, k + 0.49).to_vector();
  for (double& e : v) e = std::round(e);
  return from_vector(v, shape, dtype);
}

// x with every inf and NaN replaced by 0 (for a tolerance computed from the finite values).
Tensor finite_part(const Tensor& x) {
  std::vector<double> v = x.to_vector();
  for (double& e : v) e = std::isfinite(e) ? e : 0.0;
  return from_vector(v, x.shape(), x.dtype());
}

int64_t reduced_count(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d = 0; d < int64_t(s.size()); ++d)
    if (dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end()) n *= s[size_t(d)];
  return n;
}

// Tolerance of a sum: the GPU accumulates in the compute type (fp32, f64 for f64) in a tree of
// per-thread loops; each value goes through at most k = max(32, ceil(n / 256)) + 24 additions
// (thread loop of at most 32 or of ceil(chunk / 256) elements, two butterflies of 5 and block
// scratch of 5 levels, and the split partials), so the classic bound |error| <= k u sum|x|
// (Higham, Thm 4.4) holds with u the compute type's unit roundoff. The CPU sums in f64 (its error
// is far below). Applied with the largest sum|x| over the outputs; the output's own rounding is
// covered by rel_ulps = 2 (both sides round once, so they may land one ulp apart).
double sum_atol(const Tensor& x, const std::vector<int64_t>& dims, bool mean) {
  const int64_t n = reduced_count(x.shape(), dims);
  const double k = double(std::max<int64_t>(32, (n + 255) / 256) + 24);
  const double u = x.dtype() == DType::f64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const std::vector<double> s = reduce(ReduceOp::sum, abs(x.to(DType::f64)), dims, false).to_vector();
  double smax = 0.0;
  for (double v : s) smax = std::max(smax, v);
  // Plus one subnormal step of f16 (2^-24): a result that lands among f16's subnormals is
  // rounded absolutely.
  const double f16_subnormal = x.dtype() == DType::f16 ? std::ldexp(1.0, -24) : 0.0;
  return k * u * smax / (mean ? double(std::max<int64_t>(n, 1)) : 1.0) + f16_subnormal;
}

}  // namespace

TEST_CASE("cuda reduce forward matches the CPU over each dim, several dims and all dims", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Shape& shape : kShapes)
    for (DType dt : kDtypes) {
      const Tensor x = random(shape, dt, ++seed);
      for (const auto& dims : dim_sets(shape))
        for (ReduceOp op : kOps) {
          const Tensor want = reduce(op, x, dims, true);
          const bool is_sum = op == ReduceOp::sum || op == ReduceOp::mean;
          // max/amax pick one of the inputs: exact (rel 0, atol 0).
          const double atol = is_sum ? sum_atol(x, dims, op == ReduceOp::mean) : 0.0;
          for (const auto& [layout, xg] : layouts(x)) {
            const Tensor got = reduce(op, xg, dims, true);
            REQUIRE(got.device() == gpu());
            REQUIRE(got.dtype() == dt);
            require_close(got, want, describe(op, shape, dims, dt, layout), is_sum ? 2.0 : 0.0, atol);
          }
        }
    }
}

TEST_CASE("cuda sum of small integers is exact in every dtype, so no element is lost or repeated", "[cuda]") {
  MT_REQUIRE_GPU();
  // Integers in [-3, 3]: every partial sum is an integer below 2^24 in magnitude, exact in fp32
  // in any order, so the GPU result must equal the CPU's bit for bit (both round the same exact
  // sum once to the output dtype). A dropped or doubled element would show.
  uint64_t seed = 300;
  for (const Shape& shape : {Shape{100003}, Shape{4097, 3}, Shape{33, 1000}, Shape{3, 31, 7}})
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor x = small_integers(shape, dt, ++seed, 3);
      for (const auto& dims : dim_sets(shape))
        for (const auto& [layout, xg] : layouts(x))
          require_bit_identical(reduce(ReduceOp::sum, xg, dims, false), reduce(ReduceOp::sum, x, dims, false),
                                describe(ReduceOp::sum, shape, dims, dt, layout));
    }
}

TEST_CASE("cuda max, amax and min propagate NaN and keep -inf", "[cuda]") {
  MT_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    // Row 0 has a NaN in the middle, row 1 only -inf, row 2 is ordinary, row 3 a NaN at the end
    // of a long row (4097: more than one thread's stride).
    std::vector<double> v(4 * 4097, 0.0);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(double(i));
    v[2000] = nan;
    for (size_t i = 4097; i < 2 * 4097; ++i) v[i] = -inf;
    v[4 * 4097 - 1] = nan;
    const Tensor x = from_vector(v, {4, 4097}, dt);
    for (ReduceOp op : {ReduceOp::max, ReduceOp::amax, ReduceOp::min, ReduceOp::sum}) {
      const Tensor want = reduce(op, x, {1});
      const std::vector<double> w = want.to_vector();
      REQUIRE(std::isnan(w[0]));
      if (op != ReduceOp::sum) REQUIRE(w[1] == -inf);
      const bool is_sum = op == ReduceOp::sum;
      for (const auto& [layout, xg] : layouts(x))
        require_close(reduce(op, xg, {1}), want, describe(op, x.shape(), {1}, dt, layout), is_sum ? 2.0 : 0.0,
                      is_sum ? sum_atol(finite_part(x), {1}, false) : 0.0);
    }
  }
}

TEST_CASE("cuda reduce backward matches the CPU bit for bit, ties included", "[cuda]") {
  MT_REQUIRE_GPU();
  // Inputs of few distinct values (integers in [-2, 2]) so that max slices have many ties: max
  // sends dy to the first maximum, amax splits it evenly. The backward formulas are the CPU's,
  // elementwise, with y taken from the (exact) CPU forward: results must be bit-identical.
  uint64_t seed = 500;
  for (const Shape& shape : kShapes)
    for (DType dt : kDtypes) {
      const Tensor x = small_integers(shape, dt, ++seed, 2);
      for (const auto& dims : dim_sets(shape))
        for (ReduceOp op : kOps) {
          const Tensor y = reduce(op, x, dims, true);
          const Tensor dy = random(y.shape(), dt, ++seed);
          const bool reads_x = op == ReduceOp::max || op == ReduceOp::amax || op == ReduceOp::min;
          const Tensor want = reduce_backward(op, x.shape(), reads_x ? x : Tensor(), reads_x ? y : Tensor(), dy, dims);
          for (const auto& [layout, xg] : layouts(x)) {
            const Tensor dyg = std::string(layout) == "strided" ? strided_on_gpu(dy) : on_gpu(dy);
            const Tensor got =
                reduce_backward(op, x.shape(), reads_x ? xg : Tensor(), reads_x ? on_gpu(y) : Tensor(), dyg, dims);
            REQUIRE(got.device() == gpu());
            require_bit_identical(got, want, describe(op, shape, dims, dt, layout) + " backward");
          }
        }
    }
}

TEST_CASE("cuda max_abs matches the CPU, NaN and empty tensors included", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 700;
  for (DType dt : kDtypes)
    for (const Shape& shape : {Shape{1}, Shape{7}, Shape{33, 1000}, Shape{100003}, Shape{4097, 3}}) {
      const Tensor x = random(shape, dt, ++seed, -5.0, 3.0);
      for (const auto& [layout, xg] : layouts(x)) {
        INFO(shape_str(shape) << " " << dtype_name(dt) << " " << layout);
        CHECK(max_abs(xg) == max_abs(x));  // a max picks an element: exact
      }
    }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    CHECK(std::isnan(max_abs(on_gpu(from_vector(std::vector<double>{1.0, nan, -7.0, inf}, {4}, dt)))));
    CHECK(max_abs(on_gpu(from_vector(std::vector<double>{1.0, -inf, 2.0}, {3}, dt))) == inf);
    CHECK(max_abs(on_gpu(from_vector(std::vector<double>{-0.0, 0.0}, {2}, dt))) == 0.0);
    CHECK(max_abs(on_gpu(zeros({0}, dt))) == 0.0);
  }
}

TEST_CASE("cuda argmax and argmin match the CPU exactly, ties and NaN included", "[cuda]") {
  MT_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t seed = 900;
  for (const Shape& shape : kSliceShapes)
    for (DType dt : kDtypes) {
      Tensor x = small_integers(shape, dt, ++seed, 2);  // many ties
      if (x.numel() > 40) {                             // a few NaNs in the larger tensors
        std::vector<double> v = x.to_vector();
        for (size_t i = 17; i < v.size(); i += 37) v[i] = nan;
        x = from_vector(v, shape, dt);
      }
      std::vector<std::optional<int64_t>> dims = {std::nullopt};
      for (int64_t d = 0; d < int64_t(shape.size()); ++d) dims.push_back(d);
      for (const auto& d : dims)
        for (bool largest : {true, false}) {
          const Tensor want = largest ? argmax(x, d, true) : argmin(x, d, true);
          for (const auto& [layout, xg] : layouts(x)) {
            const Tensor got = largest ? argmax(xg, d, true) : argmin(xg, d, true);
            require_bit_identical(got, want,
                                  std::string(largest ? "argmax" : "argmin") + " of " + shape_str(shape) + " " +
                                      dtype_name(dt) + " dim " + (d ? std::to_string(*d) : "all") + " (" + layout +
                                      ")");
          }
        }
    }
}

TEST_CASE("cuda var and std forward and backward match the CPU to the last bit of the output", "[cuda]") {
  MT_REQUIRE_GPU();
  // Both devices sum in f64 and round once; only the order of the f64 additions differs, so a
  // result may differ by at most one ulp of its dtype, where the f64 value falls next to a
  // rounding boundary (in practice it does not).
  uint64_t seed = 1100;
  for (const Shape& shape : kSliceShapes)
    for (DType dt : kDtypes) {
      const Tensor x = random(shape, dt, ++seed, -1.0, 3.0);
      for (const auto& dims : dim_sets(shape))
        for (const auto& [take_sqrt, correction] : {std::pair{false, 1.0}, std::pair{true, 0.0}}) {
          const Tensor y = take_sqrt ? mixtape::std(x, dims, correction, true) : var(x, dims, correction, true);
          const Tensor dy = random(y.shape(), dt, ++seed);
          const Tensor dx = var_backward(x, take_sqrt ? y : Tensor(), dy, dims, correction, take_sqrt);
          const std::string what = std::string(take_sqrt ? "std" : "var") + " correction " +
                                   std::to_string(int(correction)) + " of " + shape_str(shape) + " " + dtype_name(dt) +
                                   " over dims " + shape_str(dims);
          for (const auto& [layout, xg] : layouts(x)) {
            const Tensor yg = take_sqrt ? mixtape::std(xg, dims, correction, true) : var(xg, dims, correction, true);
            require_close(yg, y, what + " (" + layout + ")", 2.0);  // eps_of is half an ulp
            const Tensor dxg =
                var_backward(xg, take_sqrt ? on_gpu(y) : Tensor(), on_gpu(dy), dims, correction, take_sqrt);
            // x - mean may cancel: the two f64 means differ by ~1e-16 |mean|, far below atol.
            require_close(dxg, dx, what + " backward (" + layout + ")", 2.0, 1e-10 * max_abs(dx));
          }
        }
    }
}
