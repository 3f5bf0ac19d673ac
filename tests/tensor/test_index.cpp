// gather, index_select, where and masked_fill on plain tensors: values against loops written out
// in f64 on strided inputs, scatter-add gradients of repeated indices with one rounding, masks of
// every dtype, error messages, and the same bits for any thread count.
#include "support/catch.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;
using mixtape::test::error_of;

namespace {

Tensor idx(const std::vector<int64_t>& v, const Shape& s) { return from_vector(v, s); }

// Row-major position of a multi-index in `shape`.
int64_t linear(const Shape& shape, const std::vector<int64_t>& at) {
  int64_t p = 0;
  for (size_t d = 0; d < shape.size(); ++d) p = p * shape[d] + at[d];
  return p;
}
double at(const Tensor& t, const std::vector<int64_t>& i) { return t.flat_get(linear(t.shape(), i)); }

// Every multi-index of `shape`, row-major.
std::vector<std::vector<int64_t>> positions(const Shape& shape) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> i(shape.size(), 0);
  for (int64_t n = 0; n < numel_of(shape); ++n) {
    out.push_back(i);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++i[d] < shape[d]) break;
      i[d] = 0;
    }
  }
  return out;
}

// x [A, B, C] stored transposed in its last two dims: non-contiguous, same values.
Tensor strided(const Tensor& x) {
  const Tensor t = x.transpose(-1, -2).contiguous().transpose(-1, -2);
  REQUIRE_FALSE(t.is_contiguous());
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> b(size_t(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

struct RestoreThreads {
  int n = num_threads();
  ~RestoreThreads() { set_num_threads(n); }
};

}  // namespace

TEST_CASE("gather and its backward match loops written out in f64, repeated indices included", "[index]") {
  Generator gen(1);
  const Tensor x = strided(uniform({3, 4, 5}, -2.0, 2.0, gen, DType::f64));
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    Shape is = {2, 3, 4};  // smaller than x in every dim but `dim`, where it may be larger
    is[size_t(d)] = 6;
    std::vector<int64_t> iv(size_t(numel_of(is)));
    for (size_t k = 0; k < iv.size(); ++k) iv[k] = int64_t((k * 7 + 3) % size_t(x.size(d)));  // repeats
    const Tensor index = idx(iv, is);
    const Tensor y = gather(x, dim, index);
    REQUIRE(y.shape() == is);
    const Tensor dy = uniform(is, -1.0, 1.0, gen, DType::f64);
    std::vector<double> want_dx(size_t(x.numel()), 0.0);
    for (const auto& p : positions(is)) {
      std::vector<int64_t> src = p;
      src[size_t(d)] = int64_t(at(index, p));
      INFO("dim " << dim << " at " << shape_str(p));
      CHECK(at(y, p) == at(x, src));
      want_dx[size_t(linear(x.shape(), src))] += at(dy, p);
    }
    const Tensor dx = gather_backward(dy, dim, index, x.shape());
    REQUIRE(dx.shape() == x.shape());
    for (int64_t k = 0; k < dx.numel(); ++k) CHECK(dx.flat_get(k) == Approx(want_dx[size_t(k)]).margin(1e-15));
  }
}

TEST_CASE("gather backward sums repeated indices in f64 and rounds once", "[index]") {
  // 1 + 16 * 2^-9 is exact in bf16, but a bf16 running sum would stay at 1 (each 2^-9 is below
  // half an ulp of 1). Index [17] all 0 into a [3] input along dim 0.
  std::vector<double> g(17, std::ldexp(1.0, -9));
  g[0] = 1.0;
  const Tensor dx = gather_backward(from_vector(g, {17}, DType::bf16), 0, idx(std::vector<int64_t>(17, 0), {17}), {3});
  CHECK(dx.dtype() == DType::bf16);
  CHECK(dx.to_vector() == std::vector<double>{1.03125, 0.0, 0.0});
  // In every dtype the result is the f64 sum rounded once.
  Generator gen(2);
  const Tensor dy = uniform({64, 5}, -1.0, 1.0, gen, DType::f64);
  std::vector<int64_t> iv(64 * 5);
  for (size_t k = 0; k < iv.size(); ++k) iv[k] = int64_t(k % 3);
  const Tensor index = idx(iv, {64, 5});
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor d16 = dy.to(dt);
    CHECK(bytes_of(gather_backward(d16, 0, index, {3, 5})) ==
          bytes_of(gather_backward(d16.to(DType::f64), 0, index, {3, 5}).to(dt)));
  }
}

TEST_CASE("index_select picks slices along any dim and its backward adds them back", "[index]") {
  const Tensor x = strided(arange(0, 24, 1, DType::f64).reshape({2, 3, 4}));
  const Tensor i = idx({2, 0, 2}, {3});
  const Tensor y = index_select(x, 1, i);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  for (const auto& p : positions(y.shape())) {
    std::vector<int64_t> src = p;
    src[1] = at(i, {p[1]});
    CHECK(at(y, p) == at(x, src));
  }
  CHECK(index_select(x, -1, idx({3, 0}, {2})).to_vector() ==
        std::vector<double>{3, 0, 7, 4, 11, 8, 15, 12, 19, 16, 23, 20});
  // A 0-dim index selects one entry and keeps the dim (size 1), as torch.index_select.
  CHECK(index_select(x, 0, idx({1}, {})).shape() == Shape{1, 3, 4});
  // A strided index (every other entry of a buffer).
  const Tensor si = idx({1, 9, 0, 9, 1, 9}, {6}).slice(0, 0, 6, 2);
  CHECK(index_select(x, 0, si).to_vector() == index_select(x, 0, idx({1, 0, 1}, {3})).to_vector());
  // Backward: slice 2 of dim 1 received two slices of dy, slice 1 none.
  const Tensor dx = index_select_backward(ones({2, 3, 4}, DType::f64), 1, i, {2, 3, 4});
  for (const auto& p : positions(dx.shape())) CHECK(at(dx, p) == (p[1] == 2 ? 2.0 : p[1] == 0 ? 1.0 : 0.0));
}

TEST_CASE("where and masked_fill broadcast, take i64 and floating masks, and pass NaN through", "[index]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4});
  const Tensor b = from_vector(std::vector<double>{-1, -2, -3}, {3, 1});
  const Tensor cond = idx({1, 0, 1}, {3, 1});
  CHECK(where(cond, a, b).to_vector() == std::vector<double>{1, 2, 3, 4, -2, -2, -2, -2, 1, 2, 3, 4});
  // A floating condition: nonzero is true, NaN is true (bool(nan) in PyTorch), -0.0 is false.
  for (DType ct : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tensor fc = from_vector(std::vector<double>{0.5, -0.0, nan, 0.0}, {4}, ct);
    CHECK(where(fc, a, zeros({1})).to_vector() == std::vector<double>{1, 0, 3, 0});
  }
  // NaN in the selected operand comes through; NaN in the other one does not.
  const Tensor an = from_vector(std::vector<double>{nan, 1}, {2});
  const std::vector<double> w = where(idx({1, 0}, {2}), an, zeros({2})).to_vector();
  CHECK(std::isnan(w[0]));
  CHECK(w[1] == 0.0);
  CHECK(where(idx({0, 1}, {2}), an, zeros({2})).to_vector() == std::vector<double>{0, 1});

  // masked_fill: a broadcast mask; the value rounded once to x's dtype; NaN under the mask replaced.
  const Tensor x = from_vector(std::vector<double>{nan, 1, 2, 3, 4, 5}, {2, 3}, DType::bf16);
  const Tensor m = idx({1, 0, 1}, {3});
  const Tensor y = masked_fill(x, m, 1.0 / 3.0);
  REQUIRE(y.dtype() == DType::bf16);
  const double third = from_vector(std::vector<double>{1.0 / 3.0}, {1}, DType::bf16).item();
  CHECK(y.to_vector() == std::vector<double>{third, 1, third, third, 4, third});
  // A value beyond f16's range rounds to -inf (PyTorch refuses it; Note [Masks without a bool dtype]).
  CHECK(masked_fill(x.to(DType::f16), m, -1e9).flat_get(0) == -std::numeric_limits<double>::infinity());
}

TEST_CASE("indexing ops reject bad arguments, naming the op, the shapes and the bad index", "[index]") {
  const Tensor x = zeros({3, 4});
  CHECK_THAT(error_of([&] {
               gather(x, 1, idx({0, 4}, {1, 2}));
             }),
             Contains("gather: index 4 (at position 1") && Contains("dim 1 of size 4") && Contains("f32[3, 4]"));
  CHECK_THAT(error_of([&] { gather(x, 0, idx({-1}, {1, 1})); }), Contains("gather: index -1 (at position 0"));
  CHECK_THAT(error_of([&] { gather(x, 0, idx({0, 0}, {2})); }), Contains("gather") && Contains("as many dims"));
  CHECK_THAT(error_of([&] {
               gather(x, 0, idx(std::vector<int64_t>(5, 0), {1, 5}));
             }),
             Contains("gather") && Contains("larger than input") && Contains("dim 1"));
  CHECK_THAT(error_of([&] { gather(x, 0, zeros({1, 1})); }), Contains("gather: index must be i64"));
  CHECK_THAT(error_of([&] { gather(x, 2, idx({0}, {1, 1})); }), Contains("gather"));
  CHECK_THAT(error_of([&] {
               index_select(x, 0, idx({0, 3, 5}, {3}));
             }),
             Contains("index_select: index 3 (at position 1") && Contains("dim 0 of size 3"));
  CHECK_THAT(error_of([&] {
               index_select(x, 0, idx({0, 1}, {1, 2}));
             }),
             Contains("index_select: index must have one dim"));
  CHECK_THAT(error_of([&] {
               where(idx({1}, {1}), x, zeros({3, 4}, DType::f64));
             }),
             Contains("where") && Contains("f32[3, 4]") && Contains("f64[3, 4]"));
  CHECK_THAT(error_of([&] { where(idx({1, 0}, {2}), x, x); }), Contains("where"));
  CHECK_THAT(error_of([&] { masked_fill(x, idx({1, 0, 1}, {3}), 0.0); }), Contains("masked_fill"));
  CHECK_THAT(error_of([&] { masked_fill(idx({1}, {1}), idx({1}, {1}), 0.0); }),
             Contains("masked_fill: expected a floating tensor"));
}

TEST_CASE("gather backward and where give the same bits with 1 and 2 threads", "[index][threads]") {
  RestoreThreads restore;
  Generator gen(3);
  const Tensor dy = uniform({300, 400}, -1.0, 1.0, gen, DType::f32);
  std::vector<int64_t> iv(300 * 400);
  for (size_t k = 0; k < iv.size(); ++k) iv[k] = int64_t((k * 2654435761u) % 50);
  const Tensor index = idx(iv, {300, 400});
  const Tensor cond = bernoulli({300, 400}, 0.5, gen);
  auto run = [&](int threads) {
    set_num_threads(threads);
    return std::vector<std::vector<uint8_t>>{bytes_of(gather_backward(dy, 1, index, {300, 50})),
                                             bytes_of(gather_backward(dy, 0, index, {50, 400})),
                                             bytes_of(where(cond, dy, dy * 2.0))};
  };
  CHECK(run(1) == run(2));
}
