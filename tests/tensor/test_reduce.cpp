// Sum and mean over leading or trailing dims of contiguous tensors take the loops of
// Note [Reduce fast paths]; a non-contiguous view of the same values takes the general loop.
// min, argmax / argmin and var / std against loops written out, their edge values and messages.
#include "support/catch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

// The same values as x in a non-contiguous layout: x [A, B] stored transposed.
Tensor strided_copy(const Tensor& x) {
  const Tensor t = x.transpose(0, 1).contiguous().transpose(0, 1);
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

}  // namespace

TEST_CASE("sum and mean over leading and trailing dims match hand-computed values", "[reduce]") {
  // x[i, j] = 10 i + j, i < 3, j < 4
  std::vector<double> v;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) v.push_back(10.0 * i + j);
  const Tensor x = from_vector(v, {3, 4});
  CHECK(sum(x, {0}).to_vector() == std::vector<double>{30, 33, 36, 39});
  CHECK(sum(x, {1}).to_vector() == std::vector<double>{6, 46, 86});
  CHECK(mean(x, {0}).to_vector() == std::vector<double>{10, 11, 12, 13});
  CHECK(mean(x, {1}).to_vector() == std::vector<double>{1.5, 11.5, 21.5});
  CHECK(sum(x).item() == 138.0);
  // [2, 3, 2] over the leading pair and the trailing pair of dims
  const Tensor y = arange(0, 12).reshape({2, 3, 2});
  CHECK(sum(y, {0, 1}).to_vector() == std::vector<double>{30, 36});
  CHECK(sum(y, {1, 2}, true).to_vector() == std::vector<double>{15, 51});
  CHECK(sum(y, {1, 2}, true).shape() == Shape({2, 1, 1}));
}

TEST_CASE("the contiguous reduce loops are bit-identical to the strided loop in every float dtype", "[reduce]") {
  Generator gen(7);
  // Values of mixed magnitude, so that a different summation order would change low bits.
  // [37, 29], [9, 300]: columns across a chunk of 256 (the column sums run eight to a vector
  // on the AVX-512 path, with a partial last vector); [3, 4500]: across blocks of 2048 columns.
  // The sums over every dim take the row loop.
  for (const Shape& shape : {Shape{37, 29}, Shape{9, 300}, Shape{3, 4500}}) {
    const Tensor base = normal(shape, 0.0, 1.0, gen) * exp(normal(shape, 0.0, 3.0, gen));
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const Tensor x = base.to(dt);
      const Tensor xs = strided_copy(x);
      for (int64_t d : {0, 1}) {
        const Tensor a = sum(x, {d}), b = sum(xs, {d});
        const Tensor am = mean(x, {d}), bm = mean(xs, {d});
        REQUIRE(a.dtype() == dt);
        CHECK(a.to_vector() == b.to_vector());
        CHECK(am.to_vector() == bm.to_vector());
      }
      CHECK(sum(x).item() == sum(xs).item());
    }
  }
}

TEST_CASE("max_abs and grad_stats split over the threads equal the one-pass loop", "[reduce][threads]") {
  // A contiguous tensor of 2 x 32768 elements or more is scanned in fixed pieces on the threads;
  // a strided view of the same values takes the one-pass loop. The largest |x| sits on the last
  // element of a piece, and two NaNs of different payloads lie in different pieces: the first in
  // element order must win, as in the loop.
  const int threads_before = num_threads();
  Generator gen(5);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    Tensor x = uniform({300, 700}, -1.0, 1.0, gen).to(dt);  // 210,000 elements: 6 pieces
    std::vector<double> v = x.to_vector();
    v[size_t(210000 / 6 * 2 - 1)] = -8.0;  // the last element of piece 1
    x = from_vector(v, {300, 700}, dt);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      CHECK(max_abs(x) == 8.0);
      CHECK(max_abs(x) == max_abs(strided_copy(x)));
      const GradStats a = grad_stats(x), b = grad_stats(strided_copy(x));
      CHECK(a.max_abs == 8.0);
      CHECK(a.max_abs == b.max_abs);
      CHECK_FALSE(a.has_inf_nan);
    }
    if (dt == DType::f32) {
      Tensor y = x.clone();
      auto* p = y.data<float>();
      p[150000] = std::bit_cast<float>(0x7FC00002u);  // later piece: a second NaN
      p[70001] = std::bit_cast<float>(0x7FC00001u);   // the first NaN in element order
      p[100] = std::numeric_limits<float>::infinity();
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const double m = max_abs(y), ms = max_abs(strided_copy(y));
        CHECK(std::isnan(m));
        CHECK(std::bit_cast<uint64_t>(m) == std::bit_cast<uint64_t>(ms));
        CHECK(std::bit_cast<uint64_t>(m) == std::bit_cast<uint64_t>(double(std::bit_cast<float>(0x7FC00001u))));
        const GradStats a = grad_stats(y), b = grad_stats(strided_copy(y));
        CHECK(a.has_inf_nan);
        CHECK(a.max_abs == b.max_abs);
        CHECK(a.max_abs == 8.0);
      }
    }
  }
  set_num_threads(threads_before);
}

// ---- min, argmax / argmin, var / std ----------------------------------------------------------

namespace {

// Integers in [-2, 2] as f64: slices full of ties.
Tensor tie_heavy(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v = uniform(shape, -2.49, 2.49, gen, DType::f64).to_vector();
  for (double& e : v) e = std::round(e);
  return from_vector(v, shape, DType::f64);
}

// x's slices along `dim` (or the whole tensor for dim -1 meaning all), as f64 vectors in order.
std::vector<std::vector<double>> slices(const Tensor& x, int64_t dim) {
  if (dim < 0) return {x.to_vector()};
  const Tensor m = x.transpose(dim, x.dim() - 1).contiguous();
  const int64_t n = x.size(dim);
  const std::vector<double> v = m.to_vector();
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < v.size(); i += size_t(n)) out.emplace_back(v.begin() + long(i), v.begin() + long(i) + n);
  return out;
}

// The flat values of a reduction over `dim` in the order slices() gives them.
std::vector<double> in_slice_order(const Tensor& r, const Tensor& x, int64_t dim) {
  if (dim < 0) return r.to_vector();
  Shape ks = x.shape();
  ks[size_t(dim)] = 1;
  return r.reshape(ks).transpose(dim, x.dim() - 1).contiguous().to_vector();
}

}  // namespace

TEST_CASE("min, argmax and argmin match loops written out; ties give the first, NaN wins", "[reduce]") {
  const Tensor base = tie_heavy({4, 5, 6}, 11);
  const Tensor x = base.transpose(0, 2).contiguous().transpose(0, 2);  // strided, same values
  REQUIRE_FALSE(x.is_contiguous());
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const Tensor xd = x.to(dt);
    for (int64_t dim : {0, 1, 2, -1}) {
      INFO(dtype_name(dt) << " dim " << dim);
      const std::vector<std::vector<double>> s = slices(x, dim);
      const std::optional<int64_t> od = dim < 0 ? std::nullopt : std::optional<int64_t>(dim);
      const Tensor mn = dim < 0 ? min(xd) : min(xd, {dim});
      const Tensor amx = argmax(xd, od), amn = argmin(xd, od);
      REQUIRE(amx.dtype() == DType::i64);
      const std::vector<double> mnv = in_slice_order(mn, x, dim), amxv = in_slice_order(amx, x, dim),
                                amnv = in_slice_order(amn, x, dim);
      for (size_t k = 0; k < s.size(); ++k) {
        const auto& v = s[k];
        const auto imax = std::max_element(v.begin(), v.end()) - v.begin();  // first of the largest
        const auto imin = std::min_element(v.begin(), v.end()) - v.begin();  // first of the smallest
        CHECK(mnv[k] == v[size_t(imin)]);
        CHECK(amxv[k] == double(imax));
        CHECK(amnv[k] == double(imin));
      }
    }
  }
  // keepdim shapes, and PyTorch's answers on small examples.
  CHECK(argmax(x, 1, true).shape() == Shape{4, 1, 6});
  CHECK(argmax(x, std::nullopt, true).shape() == Shape{1, 1, 1});
  CHECK(argmax(x).shape() == Shape{});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor t = from_vector(std::vector<double>{1, 3, 3, 2, 1, nan, 5, nan}, {2, 4});
  CHECK(argmax(t, 1).to_vector() == std::vector<double>{1, 1});  // torch: [1, 1]
  CHECK(argmin(t, 1).to_vector() == std::vector<double>{0, 1});  // torch: [0, 1] (NaN is the min too)
  CHECK(argmax(t).item() == 5.0);                                // the first NaN, flat
  const std::vector<double> m = min(t, {1}).to_vector();
  CHECK(m[0] == 1.0);
  CHECK(std::isnan(m[1]));
  // min's gradient goes to the first minimum of each slice, as max's to the first maximum.
  const Tensor u = from_vector(std::vector<double>{2, 1, 1, 3}, {4});
  CHECK(reduce_backward(ReduceOp::min, {4}, u, min(u), from_vector(std::vector<double>{5}, {}), {}).to_vector() ==
        std::vector<double>{0, 5, 0, 0});
}

TEST_CASE("var and std match a two-pass f64 loop with every correction; 16 bits round once", "[reduce]") {
  // torch.var([1, 2, 3, 4]) = 1.6667 (unbiased), 1.25 with correction 0; one element: NaN
  // unbiased (0 / 0), 0 with correction 0.
  const Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {4}, DType::f64);
  CHECK(var(a).item() == Approx(5.0 / 3.0).epsilon(1e-15));
  CHECK(var(a, {}, 0.0).item() == 1.25);
  CHECK(mixtape::std(a, {}, 0.0).item() == std::sqrt(1.25));
  CHECK(std::isnan(var(from_vector(std::vector<double>{7}, {1})).item()));
  CHECK(var(from_vector(std::vector<double>{7}, {1}), {}, 0.0).item() == 0.0);
  // torch.mixtape::std([[1, 2], [3, 5]], dim=1) = [0.7071, 1.4142]
  CHECK(mixtape::std(from_vector(std::vector<double>{1, 2, 3, 5}, {2, 2}, DType::f64), {1}).to_vector() ==
        std::vector<double>{std::sqrt(0.5), std::sqrt(2.0)});

  Generator gen(5);
  // A large mean and a small spread: E[x^2] - E[x]^2 would cancel; the two-pass sum does not.
  const Tensor x = (uniform({6, 7, 5}, -1.0, 1.0, gen, DType::f64) + 1000.0).transpose(0, 2);
  for (int64_t dim : {0, 1, 2}) {
    const std::vector<std::vector<double>> s = slices(x, dim);
    for (double c : {0.0, 1.0, 2.5}) {
      const std::vector<double> got = in_slice_order(var(x, {dim}, c), x, dim),
                                gsd = in_slice_order(mixtape::std(x, {dim}, c, true), x, dim);
      for (size_t k = 0; k < s.size(); ++k) {
        double mean = 0.0, m2 = 0.0;
        for (double v : s[k]) mean += v;
        mean /= double(s[k].size());
        for (double v : s[k]) m2 += (v - mean) * (v - mean);
        const double want = m2 / std::max(0.0, double(s[k].size()) - c);
        CHECK(got[k] == Approx(want).epsilon(1e-13));
        CHECK(gsd[k] == Approx(std::sqrt(want)).epsilon(1e-13));
      }
    }
  }
  // 16-bit and f32 inputs: the f64 result on the same values, rounded once.
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor xd = (uniform({6, 7, 5}, -3.0, 3.0, gen, DType::f64)).to(dt);
    for (bool take_sqrt : {false, true}) {
      const Tensor got = take_sqrt ? mixtape::std(xd, {0, 2}) : var(xd, {0, 2});
      const Tensor want = (take_sqrt ? mixtape::std(xd.to(DType::f64), {0, 2}) : var(xd.to(DType::f64), {0, 2})).to(dt);
      REQUIRE(got.dtype() == dt);
      CHECK(got.to_vector() == want.to_vector());
    }
  }
}

TEST_CASE("var and std backward match the hand formula; std of a constant slice has gradient 0", "[reduce]") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 4, 3, 3, 3}, {2, 3}, DType::f64);
  const Tensor dy = from_vector(std::vector<double>{2, 5}, {2}, DType::f64);
  // Row 0: mean 7/3, unbiased divisor 2: dvar = dy * 2 (x - mean) / 2.
  const std::vector<double> dv = var_backward(x, Tensor(), dy, {1}, 1.0, false).to_vector();
  const double m0 = 7.0 / 3.0;
  CHECK(dv[0] == Approx(2.0 * (1.0 - m0)).epsilon(1e-15));
  CHECK(dv[2] == Approx(2.0 * (4.0 - m0)).epsilon(1e-15));
  CHECK(dv[3] == 0.0);
  // std: dy (x - mean) / (divisor std); row 1 is constant: std 0, gradient 0 (not NaN), as PyTorch.
  const Tensor sd = mixtape::std(x, {1});
  const std::vector<double> ds = var_backward(x, sd, dy, {1}, 1.0, true).to_vector();
  CHECK(ds[1] == Approx(2.0 * (2.0 - m0) / (2.0 * sd.flat_get(0))).epsilon(1e-15));
  CHECK(ds[3] == 0.0);
  CHECK(ds[4] == 0.0);
  CHECK(ds[5] == 0.0);
}

TEST_CASE("min, argmax, argmin, var and std reject bad arguments with clear messages", "[reduce]") {
  const Tensor x = zeros({3, 0});
  CHECK_THROWS_WITH(argmax(x, 1), Catch::Contains("argmax: cannot reduce the empty tensor f32[3, 0]"));
  CHECK_THROWS_WITH(argmin(zeros({2, 3}), 2), Catch::Contains("argmin"));
  CHECK_THROWS_WITH(argmax(from_vector(std::vector<int64_t>{1}, {1})), Catch::Contains("argmax: expected a floating"));
  CHECK_THROWS_WITH(min(x, {1}), Catch::Contains("min: cannot take the minimum over empty dim 1 of f32[3, 0]"));
  CHECK_THROWS_WITH(var(zeros({2}), {}, -1.0), Catch::Contains("var: correction must be finite and >= 0"));
  CHECK_THROWS_WITH(mixtape::std(zeros({2}), {0, 0}), Catch::Contains("std: repeated dim"));
}

TEST_CASE("argmax and var give the same bits with 1 and 2 threads", "[reduce][threads]") {
  const int saved = num_threads();
  Generator gen(9);
  const Tensor x = normal({512, 300}, 0.0, 1.0, gen).transpose(0, 1);
  auto run = [&](int threads) {
    set_num_threads(threads);
    return std::vector<std::vector<double>>{argmax(x, 0).to_vector(), argmin(x, 1).to_vector(), var(x, {0}).to_vector(),
                                            mixtape::std(x, {1}).to_vector(),
                                            var_backward(x, Tensor(), ones({512}), {0}, 1.0, false).to_vector()};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(saved);
  CHECK(one == two);
}
