// Layer norm and group norm on plain tensors: values and gradients against loops written out in
// f64, one rounding of 16-bit outputs, 1 vs 2 threads, error messages.
#include "support/catch.h"

#include <cmath>
#include <string>
#include <vector>

#include "mixtape.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;

using mixtape::test::error_of;

namespace {

// The f64 reference: x contiguous [rows, C, L], G groups; y, and the gradients for dy.
struct NormRef {
  std::vector<double> y, dx, dw, db;
};

NormRef reference(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                  const std::vector<double>& dy, int64_t C, int64_t L, int64_t G, double eps) {
  const int64_t K = C / G, M = K * L, rows = int64_t(x.size()) / (C * L);
  NormRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(size_t(C), 0.0);
  r.db.assign(size_t(C), 0.0);
  for (int64_t ng = 0; ng < rows * G; ++ng) {
    const int64_t g = ng % G;
    double m = 0.0, v = 0.0;
    for (int64_t j = 0; j < M; ++j) m += x[size_t(ng * M + j)];
    m /= double(M);
    for (int64_t j = 0; j < M; ++j) v += (x[size_t(ng * M + j)] - m) * (x[size_t(ng * M + j)] - m);
    const double is = 1.0 / std::sqrt(v / double(M) + eps);
    double mg = 0.0, mgx = 0.0;
    for (int64_t j = 0; j < M; ++j) {
      const size_t i = size_t(ng * M + j), c = size_t(g * K + j / L);
      const double xh = (x[i] - m) * is;
      r.y[i] = xh * w[c] + b[c];
      mg += dy[i] * w[c] / double(M);
      mgx += dy[i] * w[c] * xh / double(M);
      r.dw[c] += dy[i] * xh;
      r.db[c] += dy[i];
    }
    for (int64_t j = 0; j < M; ++j) {
      const size_t i = size_t(ng * M + j), c = size_t(g * K + j / L);
      r.dx[i] = is * (dy[i] * w[c] - mg - (x[i] - m) * is * mgx);
    }
  }
  return r;
}

void check_near(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.numel() == int64_t(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got.flat_get(i) - want[size_t(i)]) <= tol * (1.0 + std::abs(want[size_t(i)])));
  }
}

std::vector<double> values(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return uniform(s, lo, hi, g, DType::f64).to_vector();
}

}  // namespace

TEST_CASE("group_norm and layer_norm match the f64 formulas, forward and backward", "[norm]") {
  struct Case {
    const char* name;
    Shape shape;
    int64_t C, L, G;
    bool layer;
    Shape normalized;
  };
  const std::vector<Case> cases = {
      {"group_norm [3, 6, 2, 3], 3 groups", {3, 6, 2, 3}, 6, 6, 3, false, {}},
      {"group_norm [2, 4], 2 groups (no positions)", {2, 4}, 4, 1, 2, false, {}},
      {"group_norm [2, 5, 7], 1 group", {2, 5, 7}, 5, 7, 1, false, {}},
      {"layer_norm [4, 7] over [7]", {4, 7}, 7, 1, 1, true, {7}},
      {"layer_norm [2, 3, 4, 5] over [4, 5]", {2, 3, 4, 5}, 20, 1, 1, true, {4, 5}},
  };
  uint64_t seed = 10;
  for (const Case& k : cases) {
    INFO(k.name);
    const Shape pshape = k.layer ? k.normalized : Shape{k.C};
    const std::vector<double> x = values(k.shape, ++seed, -1.0, 3.0), w = values(pshape, ++seed, 0.5, 1.5),
                              b = values(pshape, ++seed, -0.5, 0.5), dy = values(k.shape, ++seed, -1.0, 1.0);
    const NormRef ref = reference(x, w, b, dy, k.C, k.L, k.G, 1e-5);
    const Tensor xt = from_vector(x, k.shape, DType::f64), wt = from_vector(w, pshape, DType::f64),
                 bt = from_vector(b, pshape, DType::f64), dyt = from_vector(dy, k.shape, DType::f64);
    const NormOutput out =
        k.layer ? layer_norm_forward(xt, k.normalized, wt, bt, 1e-5) : group_norm_forward(xt, k.G, wt, bt, 1e-5);
    check_near(out.y, ref.y, 1e-12, "y");
    const NormGrads g =
        k.layer ? layer_norm_backward(dyt, xt, k.normalized, wt, out.mean, out.invstd, true, true, true, DType::f64)
                : group_norm_backward(dyt, xt, k.G, wt, out.mean, out.invstd, true, true, true, DType::f64);
    check_near(g.dx, ref.dx, 1e-12, "dx");
    check_near(g.dweight, ref.dw, 1e-12, "dweight");
    check_near(g.dbias, ref.db, 1e-12, "dbias");
    CHECK(g.dweight.shape() == pshape);
    // f32: the same within fp32 rounding; a strided input gives the same bits as a contiguous one.
    const Tensor x32 = xt.to(DType::f32);
    const Tensor strided = x32.transpose(0, 1).contiguous().transpose(0, 1);
    REQUIRE_FALSE(strided.is_contiguous());
    const NormOutput o32 = k.layer ? layer_norm_forward(x32, k.normalized, wt.to(DType::f32), bt.to(DType::f32))
                                   : group_norm_forward(x32, k.G, wt.to(DType::f32), bt.to(DType::f32));
    const NormOutput s32 = k.layer ? layer_norm_forward(strided, k.normalized, wt.to(DType::f32), bt.to(DType::f32))
                                   : group_norm_forward(strided, k.G, wt.to(DType::f32), bt.to(DType::f32));
    check_near(o32.y, ref.y, 1e-5, "f32 y");
    CHECK(o32.y.to_vector() == s32.y.to_vector());
    CHECK(o32.mean.dtype() == DType::f32);
  }
}

TEST_CASE("16-bit layer_norm and group_norm keep fp32 statistics and round once", "[norm]") {
  // Large mean, small spread: a 16-bit sum would lose the spread; the fp32 path must not.
  std::vector<double> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 300.0 + 0.25 * double(i % 16);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor x = from_vector(v, {4, 16}, dt);
    const Tensor w = full({16}, 1.5, DType::f32), b = full({16}, 0.25, DType::f32);
    const NormOutput r = layer_norm_forward(x, {16}, w, b);
    const NormOutput r32 = layer_norm_forward(x.to(DType::f32), {16}, w, b);
    CHECK(r.y.dtype() == dt);
    CHECK(r.mean.dtype() == DType::f32);
    CHECK(r.y.to_vector() == r32.y.to(dt).to_vector());  // the fp32 result, rounded once
    const Tensor xg = x.view({2, 4, 2, 4});
    const NormOutput gr = group_norm_forward(xg, 2, full({4}, 1.5, DType::f32), Tensor());
    const NormOutput gr32 = group_norm_forward(xg.to(DType::f32), 2, full({4}, 1.5, DType::f32), Tensor());
    CHECK(gr.y.to_vector() == gr32.y.to(dt).to_vector());
    // f32 parameters with a 16-bit input: parameter gradients in f32.
    const NormGrads g = layer_norm_backward(ones_like(x), x, {16}, w, r.mean, r.invstd, true, true, true, DType::f32);
    CHECK(g.dx.dtype() == dt);
    CHECK(g.dweight.dtype() == DType::f32);
    CHECK(g.dbias.flat_get(0) == 4.0);
  }
}

TEST_CASE("layer_norm and group_norm give the same bits with 1 and 2 threads", "[norm][threads]") {
  Generator gen(5);
  const Tensor x = uniform({16, 8, 32, 32}, -1.0, 2.0, gen), dy = uniform({16, 8, 32, 32}, -1.0, 1.0, gen);
  const Tensor w = uniform({8}, 0.5, 1.5, gen), b = uniform({8}, -1.0, 1.0, gen);
  const int before = num_threads();
  auto run = [&](int threads) {
    set_num_threads(threads);
    const NormOutput r = group_norm_forward(x, 4, w, b);
    const NormGrads g = group_norm_backward(dy, x, 4, w, r.mean, r.invstd, true, true, true, DType::f32);
    const NormOutput l = layer_norm_forward(x, {32, 32}, Tensor(), Tensor());
    return std::vector<std::vector<double>>{r.y.to_vector(), g.dx.to_vector(), g.dweight.to_vector(),
                                            g.dbias.to_vector(), l.y.to_vector()};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(before);
  CHECK(one == two);
}

TEST_CASE("layer_norm and group_norm reject bad inputs with messages naming the shapes", "[norm]") {
  const Tensor x = zeros({2, 6, 3});
  CHECK_THAT(error_of([&] { layer_norm(x, {4}); }),
             Contains("layer_norm: the last 1 dims of input f32[2, 6, 3] must equal normalized_shape [4]"));
  CHECK_THAT(error_of([&] { layer_norm(x, {}); }), Contains("layer_norm: normalized_shape must have at least one dim"));
  CHECK_THAT(error_of([&] { layer_norm(x, {3}, zeros({4})); }),
             Contains("layer_norm: weight f32[4] does not fit input f32[2, 6, 3]; expected [3]"));
  CHECK_THAT(error_of([&] { layer_norm(x, {3}, zeros({3}, DType::f64)); }),
             Contains("must have the input's dtype or f32"));
  CHECK_THAT(error_of([&] { group_norm(x, 4); }),
             Contains("group_norm: the 6 channels of input f32[2, 6, 3] must split into num_groups = 4 equal groups"));
  CHECK_THAT(error_of([&] { group_norm(zeros({6}), 2); }), Contains("group_norm: expected input [N, C, ...]"));
  CHECK_THAT(error_of([&] { group_norm(x, 3, zeros({6}), zeros({6}, DType::f64)); }),
             Contains("group_norm: bias f64[6] must have the input's dtype or f32"));
  CHECK_THAT(error_of([&] { group_norm(x.to(DType::i64), 3); }), Contains("group_norm"));
  CHECK_THAT(error_of([&] { group_norm(x, 3, Tensor(), Tensor(), -1.0); }), Contains("eps must be finite and >= 0"));
  // An empty batch is fine and gives empty results.
  CHECK(group_norm(zeros({0, 6, 3}), 3).numel() == 0);
}
