// matmul / bmm / linear, conv2d / conv_transpose2d and pooling on plain tensors: forward values
// against naive loops, adjointness, the 16-bit rounding contract, error messages, and the
// gradient-scaling plumbing of the GEMM-like autograd nodes.
#include "support/catch.h"

#include <cmath>
#include <limits>

#include "mixtape.h"
#include "support/op_cases.h"
#include "support/test_util.h"
#include "tensor/cpu/convert.h"

using namespace mixtape;
using Catch::Contains;
using test::rand_input;

namespace {

void check_close(const Tensor& got, const Tensor& want, double rtol, double atol = 0.0) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  int64_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - w[i]);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::abs(w[i]))) ++bad;
  }
  INFO(bad << " of " << g.size() << " elements differ; worst abs error " << worst);
  CHECK(bad == 0);
}

// Bitwise equality of two tensors' values (same dtype).
void check_equal(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i]) ++bad;
  INFO(bad << " of " << g.size() << " elements differ");
  CHECK(bad == 0);
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// Integers in [-m, m] (exact in every dtype for m <= 256).
Tensor int_input(const Shape& shape, uint64_t seed, int64_t m, DType dt = DType::f32) {
  Tensor u = rand_input(shape, DType::f64, seed, 0.0, 1.0);
  std::vector<double> v = u.to_vector();
  for (double& e : v) e = std::floor(e * double(2 * m + 1)) - double(m);
  return from_vector(v, shape, dt);
}

// ---- naive references (f64, row-major logical indexing) ----

Tensor naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const std::vector<double> A = a.to_vector(), B = b.to_vector();
  std::vector<double> C(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) C[size_t(i * N + j)] += A[size_t(i * K + k)] * B[size_t(k * N + j)];
  return from_vector(C, {M, N}, DType::f64);
}

Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 s, Size2 p, Size2 d) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OC = w.size(0), KH = w.size(2), KW = w.size(3);
  const int64_t OH = (H + 2 * p.h - d.h * (KH - 1) - 1) / s.h + 1, OW = (W + 2 * p.w - d.w * (KW - 1) - 1) / s.w + 1;
  const std::vector<double> X = x.to_vector(), Wt = w.to_vector();
  std::vector<double> Y(size_t(N * OC * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b.defined() ? b.flat_get(o) : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * s.h - p.h + kh * d.h, iw = ow * s.w - p.w + kw * d.w;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += X[size_t(((n * C + c) * H + ih) * W + iw)] * Wt[size_t(((o * C + c) * KH + kh) * KW + kw)];
              }
          Y[size_t(((n * OC + o) * OH + oh) * OW + ow)] = acc;
        }
  return from_vector(Y, {N, OC, OH, OW}, DType::f64);
}

// Transposed convolution as a scatter: every input element adds x * w to the outputs it reaches.
Tensor naive_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 s, Size2 p, Size2 op, Size2 d) {
  const int64_t N = x.size(0), IC = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OC = w.size(1), KH = w.size(2), KW = w.size(3);
  const int64_t OH = (H - 1) * s.h - 2 * p.h + d.h * (KH - 1) + op.h + 1;
  const int64_t OW = (W - 1) * s.w - 2 * p.w + d.w * (KW - 1) + op.w + 1;
  const std::vector<double> X = x.to_vector(), Wt = w.to_vector();
  std::vector<double> Y(size_t(N * OC * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t k = 0; k < OH * OW; ++k) Y[size_t((n * OC + o) * OH * OW + k)] = b.defined() ? b.flat_get(o) : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < IC; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t o = 0; o < OC; ++o)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t oh = h * s.h - p.h + kh * d.h, ow = ww * s.w - p.w + kw * d.w;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                Y[size_t(((n * OC + o) * OH + oh) * OW + ow)] +=
                    X[size_t(((n * IC + i) * H + h) * W + ww)] * Wt[size_t(((i * OC + o) * KH + kh) * KW + kw)];
              }
  return from_vector(Y, {N, OC, OH, OW}, DType::f64);
}

Tensor naive_pool(const Tensor& x, Size2 k, Size2 s, Size2 p, bool is_max) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * p.h - k.h) / s.h + 1, OW = (W + 2 * p.w - k.w) / s.w + 1;
  const std::vector<double> X = x.to_vector();
  std::vector<double> Y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
          for (int64_t i = 0; i < k.h; ++i)
            for (int64_t j = 0; j < k.w; ++j) {
              const int64_t h = oh * s.h - p.h + i, w = ow * s.w - p.w + j;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;  // padding: -inf for max, 0 for avg
              const double v = X[size_t(((n * C + c) * H + h) * W + w)];
              m = std::max(m, v);
              sum += v;
            }
          Y.push_back(is_max ? m : sum / double(k.h * k.w));
        }
  return from_vector(Y, {N, C, OH, OW}, DType::f64);
}

}  // namespace

// ---- matmul, bmm, linear ------------------------------------------------------------------

TEST_CASE("matmul of a hand-computed 2x2 product", "[linalg]") {
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, dt);
    Tensor b = from_vector(std::vector<double>{5, 6, 7, 8}, {2, 2}, dt);
    Tensor c = matmul(a, b);
    CHECK(c.dtype() == dt);
    CHECK(c.to_vector() == std::vector<double>{19, 22, 43, 50});
    CHECK(matmul(a.t(), b).to_vector() == std::vector<double>{26, 30, 38, 44});
    CHECK(matmul(a, b.t()).to_vector() == std::vector<double>{17, 23, 39, 53});
  }
}

TEST_CASE("matmul matches a naive product for every layout", "[linalg]") {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-13 : 1e-5;
    INFO("dtype " << dtype_name(dt));
    const Tensor a = rand_input({5, 7}, dt, 1), b = rand_input({7, 4}, dt, 2);
    check_close(matmul(a, b), naive_mm(a, b), tol, tol);
    // Transposed (column-major) operands and a strided slice that must be copied.
    const Tensor at = rand_input({7, 5}, dt, 3).t(), bt = rand_input({4, 7}, dt, 4).t();
    const Tensor bs = rand_input({7, 8}, dt, 5).slice(1, 0, 8, 2);
    check_close(matmul(at, bt), naive_mm(at, bt), tol, tol);
    check_close(matmul(a, bs), naive_mm(a, bs), tol, tol);
    // Batched with broadcast: [2, 1, 5, 7] x [3, 7, 4] -> [2, 3, 5, 4].
    const Tensor ab = rand_input({2, 1, 5, 7}, dt, 6), bb = rand_input({3, 4, 7}, dt, 7).transpose(1, 2);
    const Tensor cb = matmul(ab, bb);
    REQUIRE(cb.shape() == Shape{2, 3, 5, 4});
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        check_close(cb.select(0, i).select(0, j), naive_mm(ab.select(0, i).select(0, 0), bb.select(0, j)), tol, tol);
    // N-D x 2-D folds the leading dims.
    const Tensor a3 = rand_input({2, 3, 7}, dt, 8);
    const Tensor c3 = matmul(a3, b);
    REQUIRE(c3.shape() == Shape{2, 3, 4});
    check_close(c3.reshape({6, 4}), naive_mm(a3.reshape({6, 7}), b), tol, tol);
    // 1-D operands.
    const Tensor v = rand_input({7}, dt, 9), u = rand_input({4}, dt, 10);
    check_close(matmul(v, b), naive_mm(v.reshape({1, 7}), b).reshape({4}), tol, tol);
    check_close(matmul(b, u), naive_mm(b, u.reshape({4, 1})).reshape({7}), tol, tol);
    CHECK(matmul(v, v).dim() == 0);
    CHECK(matmul(v, v).item() == Approx(dot(v, v)).epsilon(tol));
  }
}

TEST_CASE("bmm and linear match naive loops", "[linalg]") {
  const Tensor a = rand_input({3, 4, 5}, DType::f64, 11), b = rand_input({3, 6, 5}, DType::f64, 12).transpose(1, 2);
  const Tensor c = bmm(a, b);
  REQUIRE(c.shape() == Shape{3, 4, 6});
  for (int64_t i = 0; i < 3; ++i) check_close(c.select(0, i), naive_mm(a.select(0, i), b.select(0, i)), 1e-13, 1e-13);

  const Tensor x = rand_input({2, 3, 5}, DType::f64, 13), w = rand_input({4, 5}, DType::f64, 14);
  const Tensor bias = rand_input({4}, DType::f64, 15);
  const Tensor y = linear(x, w, bias);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const Tensor ref = naive_mm(x.reshape({6, 5}), w.t()) + bias;
  check_close(y.reshape({6, 4}), ref, 1e-13, 1e-13);
  check_close(linear(x, w).reshape({6, 4}), naive_mm(x.reshape({6, 5}), w.t()), 1e-13, 1e-13);
}

TEST_CASE("16-bit GEMM output equals the f32 result rounded once", "[linalg]") {
  // Integer inputs make every f32 product and sum exact, so the only rounding is the final one;
  // sums beyond 256 (bf16) and 2048 (f16) make that rounding visible.
  const Tensor a = int_input({9, 64}, 21, 32), b = int_input({64, 7}, 22, 32), bias = int_input({7}, 23, 32);
  const Tensor ab = int_input({3, 9, 64}, 24, 32);
  const Tensor x = int_input({2, 3, 9, 8}, 25, 8), w = int_input({4, 3, 3, 3}, 26, 8), cb = int_input({4}, 27, 8);
  const Tensor wt = int_input({3, 4, 3, 3}, 28, 8);
  const Tensor dy_exact = conv2d(x, w, Tensor(), 1, 1);  // [2, 4, 9, 8], integers
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dt));
    auto lo = [dt](const Tensor& t) { return t.to(dt); };
    const Tensor dy = lo(dy_exact).to(DType::f32);  // an incoming gradient representable in dt
    // The f32 references are exact (integers below 2^24).
    const Tensor ref_mm = matmul(a, b);
    int64_t rounded = 0;
    for (double v : ref_mm.to_vector()) rounded += lo(from_vector(std::vector<double>{v}, {1})).item() != v;
    CHECK(rounded > 0);  // the test would be vacuous if nothing needed rounding
    check_equal(matmul(lo(a), lo(b)), lo(ref_mm));
    check_equal(matmul(lo(b).t(), lo(a).t()), lo(matmul(b.t(), a.t())));
    check_equal(matmul(lo(ab), lo(b)), lo(matmul(ab, b)));
    check_equal(bmm(lo(ab), lo(b).expand({3, 64, 7})), lo(bmm(ab, b.expand({3, 64, 7}))));
    check_equal(linear(lo(a), lo(b).t(), lo(bias)), lo(linear(a, b.t(), bias)));
    check_equal(linear_backward_weight(lo(a.t()), lo(b)), lo(linear_backward_weight(a.t(), b)));
    check_equal(conv2d(lo(x), lo(w), lo(cb), 1, 1), lo(conv2d(x, w, cb, 1, 1)));
    check_equal(conv2d(lo(x), lo(w), lo(cb), 2, 1, 2), lo(conv2d(x, w, cb, 2, 1, 2)));
    check_equal(conv2d_backward_input(lo(dy), lo(w), x.shape(), 1, 1, 1),
                lo(conv2d_backward_input(dy, w, x.shape(), 1, 1, 1)));
    check_equal(conv2d_backward_weight(lo(x), lo(dy), w.shape(), 1, 1, 1),
                lo(conv2d_backward_weight(x, dy, w.shape(), 1, 1, 1)));
    check_equal(conv_transpose2d(lo(x), lo(wt), lo(cb), 2, 1, 1), lo(conv_transpose2d(x, wt, cb, 2, 1, 1)));
  }
}

TEST_CASE("matmul, bmm and linear reject bad shapes and dtypes with clear messages", "[linalg]") {
  const Tensor a = zeros({2, 3}), b = zeros({4, 5});
  REQUIRE_THROWS_WITH(matmul(a, b), Contains("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(matmul(a, zeros({3, 4}, DType::f64)), Contains("matmul") && Contains("f32") && Contains("f64"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})), Contains("matmul") && Contains("broadcast"));
  REQUIRE_THROWS_WITH(matmul(zeros({}), a), Contains("matmul"));
  REQUIRE_THROWS_WITH(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})),
                      Contains("bmm") && Contains("[2, 3, 4]") && Contains("[3, 4, 5]"));
  REQUIRE_THROWS_WITH(bmm(a, b), Contains("bmm") && Contains("3 dims"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 5}), zeros({3, 4})),
                      Contains("linear") && Contains("[2, 5]") && Contains("[3, 4]"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 4}), zeros({3, 4}), zeros({2})),
                      Contains("linear") && Contains("bias") && Contains("[2]"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 4}), zeros({3, 4}, DType::bf16)), Contains("linear") && Contains("bf16"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}, DType::i64), zeros({3, 2}, DType::i64)), Contains("matmul"));
}

// ---- convolutions -------------------------------------------------------------------------

TEST_CASE("conv2d matches a naive loop", "[conv]") {
  struct P {
    Shape x, w;
    Size2 s, p, d;
    bool bias;
  };
  const std::vector<P> params = {
      {{2, 3, 6, 5}, {4, 3, 3, 3}, 1, 0, 1, true},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, 2, 1, 1, true},
      {{1, 2, 9, 8}, {3, 2, 3, 2}, {1, 2}, {2, 1}, 2, false},
      {{1, 2, 5, 7}, {2, 2, 1, 1}, 3, 0, 1, true},
      {{1, 1, 4, 4}, {2, 1, 5, 5}, 1, 2, 1, false},
      {{3, 2, 8, 8}, {2, 2, 2, 2}, 2, 0, 3, true},
      // Stride 1 keeping the width: on a contiguous input, one copy per image and column row
      // (Note [im2col runs]), with padded columns on both sides and wholly padded rows.
      {{2, 3, 6, 5}, {4, 3, 3, 3}, 1, 1, 1, true},
      {{1, 2, 9, 8}, {3, 2, 3, 3}, 1, 2, 2, false},
      {{2, 2, 2, 7}, {3, 2, 5, 5}, 1, 2, 1, true},
      {{1, 3, 5, 6}, {2, 3, 1, 3}, 1, {0, 1}, 1, false},
  };
  for (DType dt : {DType::f64, DType::f32})
    for (bool permuted : {true, false}) {
      const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      for (const P& q : params) {
        INFO("x " << shape_str(q.x) << " w " << shape_str(q.w) << " stride " << size2_str(q.s) << " padding "
                  << size2_str(q.p) << " dilation " << size2_str(q.d) << " " << dtype_name(dt)
                  << (permuted ? " permuted" : " contiguous"));
        // A permuted (non-contiguous) input, or a contiguous one.
        Shape xt = {q.x[0], q.x[2], q.x[3], q.x[1]};
        const Tensor x = permuted ? rand_input(xt, dt, 31).permute({0, 3, 1, 2}) : rand_input(q.x, dt, 31);
        const Tensor w = rand_input(q.w, dt, 32);
        const Tensor b = q.bias ? rand_input({q.w[0]}, dt, 33) : Tensor();
        check_close(conv2d(x, w, b, q.s, q.p, q.d), naive_conv2d(x, w, b, q.s, q.p, q.d), tol, tol);
      }
    }
}

TEST_CASE("im2col's and col2im's vector rows give the scalar code's bits", "[conv]") {
  // Note [im2col vectors]: on the AVX-512 conversion path, short strided rows are gathered with
  // masked loads and a lane permute, and scattered back the same way. conv2d and its weight
  // gradient (through im2col) and its input gradient (through col2im) on every conversion path,
  // f32 and bf16, bit for bit: rows that just fit one vector (OW 16 for
  // f32, 32 for bf16) and just miss it, inputs that just fit two vectors, strides 2 to 4,
  // dilation, rows wholly in the padding, and a channels-last input (element stride C).
  struct P {
    Shape x, w;
    Size2 s, p, d;
    bool channels_last;
  };
  const std::vector<P> params = {
      {{2, 3, 32, 32}, {4, 3, 4, 4}, 2, 1, 1, false},     // OW 16, inputs 31 apart
      {{2, 3, 34, 34}, {4, 3, 4, 4}, 2, 1, 1, false},     // OW 17: f32 rows take the scalar code
      {{1, 2, 64, 64}, {2, 2, 4, 4}, 2, 1, 1, false},     // OW 32: the bf16 rows' limit
      {{1, 2, 9, 10}, {2, 2, 3, 3}, 2, 2, 2, false},      // dilation, padded columns on both sides
      {{1, 2, 7, 9}, {3, 2, 3, 3}, {2, 3}, 1, 1, false},  // es 3
      {{1, 2, 12, 64}, {2, 2, 3, 3}, 4, 1, 1, false},     // es 4, OW 16: 61 inputs, over two f32 vectors
      {{1, 2, 5, 6}, {2, 2, 5, 5}, 2, 4, 1, false},       // rows wholly in the padding
      {{2, 2, 8, 8}, {3, 2, 3, 3}, 2, 1, 1, true},        // element stride 2: es 4
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (const P& q : params) {
      INFO("x " << shape_str(q.x) << " w " << shape_str(q.w) << " stride " << size2_str(q.s) << " padding "
                << size2_str(q.p) << " dilation " << size2_str(q.d) << " " << dtype_name(dt)
                << (q.channels_last ? " channels-last" : ""));
      const Tensor x = q.channels_last
                           ? rand_input({q.x[0], q.x[2], q.x[3], q.x[1]}, DType::f32, 61).permute({0, 3, 1, 2}).to(dt)
                           : rand_input(q.x, DType::f32, 61).to(dt);
      const Tensor w = rand_input(q.w, DType::f32, 62).to(dt);
      std::vector<std::vector<double>> outs;
      for (const std::string& path : cpu::conversion_paths()) {
        test::ConversionPathScope scope(path);
        const Tensor y = conv2d(x, w, Tensor(), q.s, q.p, q.d);
        outs.push_back(y.to_vector());
        outs.push_back(conv2d_backward_weight(x, y, w.shape(), q.s, q.p, q.d).to_vector());
        outs.push_back(conv2d_backward_input(y, w, x.shape(), q.s, q.p, q.d).to_vector());  // col2im
      }
      for (size_t i = 3; i < outs.size(); ++i) CHECK(outs[i] == outs[i % 3]);
    }
}

TEST_CASE("conv_transpose2d matches a naive scatter and is the adjoint of conv2d", "[conv]") {
  struct P {
    Shape x, w;  // conv_transpose2d input [N, IC, H, W] and weight [IC, OC, KH, KW]
    Size2 s, p, op, d;
  };
  const std::vector<P> params = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, 1, 0, 0, 1},
      {{2, 3, 4, 5}, {3, 2, 3, 3}, 2, 1, 1, 1},
      {{1, 2, 3, 4}, {2, 3, 2, 3}, {2, 3}, {1, 0}, {1, 2}, 1},
      {{1, 2, 4, 3}, {2, 2, 3, 2}, 1, 1, 0, 2},
      {{1, 2, 3, 3}, {2, 2, 3, 3}, 2, 2, {1, 0}, {2, 1}},
  };
  for (const P& q : params) {
    INFO("x " << shape_str(q.x) << " w " << shape_str(q.w) << " stride " << size2_str(q.s) << " padding "
              << size2_str(q.p) << " output_padding " << size2_str(q.op) << " dilation " << size2_str(q.d));
    const Tensor y = rand_input(q.x, DType::f64, 41), w = rand_input(q.w, DType::f64, 42);
    const Tensor b = rand_input({q.w[1]}, DType::f64, 43);
    const Tensor ct = conv_transpose2d(y, w, b, q.s, q.p, q.op, q.d);
    check_close(ct, naive_conv_transpose2d(y, w, b, q.s, q.p, q.op, q.d), 1e-12, 1e-12);
    // <conv2d(x, w), y> == <x, conv_transpose2d(y, w)> for x in conv_transpose2d's output space.
    const Tensor x = rand_input(ct.shape(), DType::f64, 44);
    const Tensor cx = conv2d(x, w, Tensor(), q.s, q.p, q.d);
    REQUIRE(cx.shape() == y.shape());
    const double lhs = dot(cx, y), rhs = dot(x, conv_transpose2d(y, w, Tensor(), q.s, q.p, q.op, q.d));
    CHECK(std::abs(lhs - rhs) <= 1e-12 * (1.0 + std::abs(lhs)));
  }
}

TEST_CASE("conv2d over many images (several GEMM chunks) equals per-image results", "[conv]") {
  // 16 channels, 3x3, 32x32: 147456 column elements per image, so 60 images take two chunks.
  const Tensor x = rand_input({60, 16, 32, 32}, DType::f64, 51), w = rand_input({4, 16, 3, 3}, DType::f64, 52);
  const Tensor b = rand_input({4}, DType::f64, 53);
  const Tensor y = conv2d(x, w, b, 1, 1);
  const Tensor dy = rand_input(y.shape(), DType::f64, 54);
  const Tensor dx = conv2d_backward_input(dy, w, x.shape(), 1, 1, 1);
  const Tensor dw = conv2d_backward_weight(x, dy, w.shape(), 1, 1, 1);
  Tensor dw_sum = zeros(w.shape(), DType::f64);
  for (int64_t n : {0, 31, 55, 59}) {
    const Tensor xn = x.narrow(0, n, 1), dyn = dy.narrow(0, n, 1);
    check_close(y.narrow(0, n, 1), conv2d(xn, w, b, 1, 1), 1e-12, 1e-12);
    check_close(dx.narrow(0, n, 1), conv2d_backward_input(dyn, w, xn.shape(), 1, 1, 1), 1e-12, 1e-12);
  }
  for (int64_t n = 0; n < 60; ++n)
    dw_sum = dw_sum + conv2d_backward_weight(x.narrow(0, n, 1), dy.narrow(0, n, 1), w.shape(), 1, 1, 1);
  check_close(dw, dw_sum, 1e-10, 1e-10);
  check_close(conv2d_backward_bias(dy), sum(dy, {0, 2, 3}), 1e-12, 1e-12);
}

TEST_CASE("conv2d and its gradients in groups of images give the bits of one GEMM", "[conv][threads]") {
  // Note [Conv image groups]: 8 input channels of 20 x 20, 3 x 3, padding 1: 28,800 column
  // elements per image, so groups of at most 4 of the 7 images (4 with one thread, 3 per thread
  // with two), the last one partial; once with two weight groups. Each image's output and input
  // gradient must be the bits of the same convolution of that image alone.
  const int threads_before = num_threads();
  for (int threads : {1, 2})
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (int64_t groups : {1, 2}) {
        INFO(threads << " threads, " << dtype_name(dt) << ", " << groups << " weight groups");
        set_num_threads(threads);
        const Tensor x = rand_input({7, 8, 20, 20}, dt, 61), w = rand_input({6, 8 / groups, 3, 3}, dt, 62);
        const Tensor b = rand_input({6}, dt, 63);
        const Tensor y = conv2d(x, w, b, 1, 1, 1, groups);
        const Tensor dy = rand_input(y.shape(), dt, 64);
        const Tensor dx = conv2d_backward_input(dy, w, x.shape(), 1, 1, 1, groups);
        for (int64_t n = 0; n < 7; ++n) {
          const Tensor xn = x.narrow(0, n, 1), dyn = dy.narrow(0, n, 1);
          CHECK(y.narrow(0, n, 1).contiguous().to_vector() == conv2d(xn, w, b, 1, 1, 1, groups).to_vector());
          CHECK(dx.narrow(0, n, 1).contiguous().to_vector() ==
                conv2d_backward_input(dyn, w, xn.shape(), 1, 1, 1, groups).to_vector());
        }
        // The weight gradient: in f32, each element is one chain of FMAs over the images,
        // rows and columns in order, whichever rows of col a thread took.
        const Tensor dw = conv2d_backward_weight(x, dy, w.shape(), 1, 1, 1, groups);
        if (dt == DType::f32) {
          const std::vector<double> xv = x.to_vector(), dyv = dy.to_vector(), dwv = dw.to_vector();
          const int64_t cg = 8 / groups, og = 6 / groups;
          for (int64_t oc = 0; oc < 6; ++oc)
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t kh = 0; kh < 3; ++kh)
                for (int64_t kw = 0; kw < 3; ++kw) {
                  float chain = 0.0f;
                  for (int64_t n = 0; n < 7; ++n)
                    for (int64_t oh = 0; oh < 20; ++oh)
                      for (int64_t ow = 0; ow < 20; ++ow) {
                        const int64_t ih = oh - 1 + kh, iw = ow - 1 + kw, xc = oc / og * cg + c;
                        const bool inside = ih >= 0 && ih < 20 && iw >= 0 && iw < 20;
                        const float xval = inside ? float(xv[size_t(((n * 8 + xc) * 20 + ih) * 20 + iw)]) : 0.0f;
                        chain = std::fma(float(dyv[size_t(((n * 6 + oc) * 20 + oh) * 20 + ow)]), xval, chain);
                      }
                  CHECK(float(dwv[size_t(((oc * cg + c) * 3 + kh) * 3 + kw)]) == chain);
                }
        }
        const double tol = dt == DType::f32 ? 1e-5 : 5e-2;
        if (groups == 1)
          check_close(y.to(DType::f64), naive_conv2d(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64), 1, 1, 1),
                      tol, tol);
      }
  set_num_threads(threads_before);
}

TEST_CASE("conv2d and conv_transpose2d reject bad arguments with clear messages", "[conv]") {
  const Tensor x = zeros({1, 3, 5, 5}), w = zeros({4, 2, 3, 3});
  REQUIRE_THROWS_WITH(conv2d(x, w), Contains("conv2d") && Contains("[1, 3, 5, 5]") && Contains("[4, 2, 3, 3]"));
  const Tensor w3 = zeros({4, 3, 3, 3});
  REQUIRE_THROWS_WITH(conv2d(x, w3, Tensor(), 0), Contains("conv2d") && Contains("stride") && Contains("[0, 0]"));
  REQUIRE_THROWS_WITH(conv2d(x, w3, Tensor(), 1, 0, {1, -1}), Contains("conv2d") && Contains("dilation"));
  REQUIRE_THROWS_WITH(conv2d(x, w3, Tensor(), 1, -1), Contains("conv2d") && Contains("padding"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({4, 3, 7, 3})),
                      Contains("conv2d") && Contains("larger than the padded input") && Contains("[1, 3, 5, 5]"));
  REQUIRE_THROWS_WITH(conv2d(x, w3, Tensor(), 1, 0, 3), Contains("conv2d") && Contains("dilation [3, 3]"));
  REQUIRE_THROWS_WITH(conv2d(x, w3, zeros({3})), Contains("conv2d") && Contains("bias") && Contains("[4]"));
  REQUIRE_THROWS_WITH(conv2d(x, w3.to(DType::f16)), Contains("conv2d") && Contains("f32") && Contains("f16"));
  REQUIRE_THROWS_WITH(conv2d(zeros({3, 5, 5}), w3), Contains("conv2d") && Contains("4 dims"));

  const Tensor wt = zeros({3, 2, 3, 3});  // [IC, OC, KH, KW]
  REQUIRE_THROWS_WITH(conv_transpose2d(zeros({1, 2, 4, 4}), wt),
                      Contains("conv_transpose2d") && Contains("[1, 2, 4, 4]") && Contains("[3, 2, 3, 3]"));
  REQUIRE_THROWS_WITH(conv_transpose2d(x, wt, Tensor(), 2, 1, 2),
                      Contains("conv_transpose2d") && Contains("output_padding [2, 2]") && Contains("stride [2, 2]"));
  REQUIRE_THROWS_WITH(conv_transpose2d(x, wt, Tensor(), 1, 0, 1), Contains("output_padding"));
  CHECK_NOTHROW(conv_transpose2d(x, wt, Tensor(), 1, 0, 1, 2));  // smaller than the dilation
  REQUIRE_THROWS_WITH(conv_transpose2d(x, wt, Tensor(), -1), Contains("conv_transpose2d") && Contains("stride"));
  REQUIRE_THROWS_WITH(conv_transpose2d(x, wt, zeros({3})), Contains("conv_transpose2d") && Contains("bias"));
  REQUIRE_THROWS_WITH(conv_transpose2d(zeros({1, 3, 1, 1}), zeros({3, 2, 1, 1}), Tensor(), 1, 1),
                      Contains("conv_transpose2d") && Contains("not positive"));
}

// ---- pooling ------------------------------------------------------------------------------

TEST_CASE("max_pool2d and avg_pool2d match naive loops", "[conv]") {
  struct P {
    Size2 k, s, p;
  };
  const std::vector<P> params = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1}, {{2, 3}, {1, 2}, {1, 0}}, {{3, 2}, 3, {1, 1}}};
  for (const P& q : params) {
    INFO("kernel " << size2_str(q.k) << " stride " << size2_str(q.s) << " padding " << size2_str(q.p));
    // Negative inputs: zero padding would win a max, -inf padding must not.
    const Tensor x = rand_input({2, 3, 7, 6}, DType::f64, 61, -2.0, -0.5).transpose(2, 3);
    check_close(max_pool2d(x, q.k, q.s, q.p), naive_pool(x, q.k, q.s, q.p, true), 0.0);
    check_close(avg_pool2d(x, q.k, q.s, q.p), naive_pool(x, q.k, q.s, q.p, false), 1e-15, 1e-15);
  }
  // Default stride = kernel, and count_include_pad: a corner window of ones averages to 4/9.
  CHECK(max_pool2d(rand_input({1, 1, 6, 6}, DType::f32, 62), 3).shape() == Shape{1, 1, 2, 2});
  const Tensor avg = avg_pool2d(ones({1, 1, 4, 4}), 3, 1, 1);
  CHECK(avg.flat_get(0) == Approx(4.0 / 9.0));
  CHECK(avg.flat_get(5) == Approx(1.0));
  // Indices: flat h * W + w of the first maximum in each window.
  const Tensor t = from_vector(std::vector<double>{1, 5, 5, 2, 0, 3, 9, 9, 4}, {1, 1, 3, 3});
  PoolWithIndices r = max_pool2d_with_indices(t, 2, 1);
  CHECK(r.out.to_vector() == std::vector<double>{5, 5, 9, 9});
  CHECK(r.indices.values<int64_t>() == std::vector<int64_t>{1, 1, 6, 7});
  // A NaN in a window wins (the first one), as in PyTorch.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const PoolWithIndices rn =
      max_pool2d_with_indices(from_vector(std::vector<double>{1, nan, 3, nan}, {1, 1, 2, 2}), 2, 2);
  CHECK(std::isnan(rn.out.item()));
  CHECK(rn.indices.values<int64_t>() == std::vector<int64_t>{1});
  // Gradients: max sends dy to the argmax (tied windows add up), avg spreads it evenly.
  const Tensor g = max_pool2d_backward(ones({1, 1, 2, 2}), r.indices, t.shape());
  CHECK(g.to_vector() == std::vector<double>{0, 2, 0, 0, 0, 0, 1, 1, 0});
  const Tensor ga = avg_pool2d_backward(ones({1, 1, 2, 2}), t.shape(), 2, 1, 0);
  CHECK(ga.to_vector() == std::vector<double>{0.25, 0.5, 0.25, 0.5, 1.0, 0.5, 0.25, 0.5, 0.25});
}

TEST_CASE("max_pool2d's 16-bit gradient on bit patterns equals the generic kernel", "[conv][pool]") {
  // Note [Max pool gradient on bit patterns]: without a rounding census, planes whose indices are
  // all different are written as bits; with one open the generic kernel (sum in f32, round) runs.
  // dy holds all 65,536 patterns (zeros, subnormals, inf, NaN), routed by 2 x 2 windows (no
  // repeats), and by 3 x 3 windows of stride 2 (repeats: the plane is summed) in a second plane.
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    const Tensor x = test::rand_distinct({2, 2, 512, 512}, dt, 71);
    for (bool overlap : {false, true}) {
      INFO((overlap ? "3 x 3 windows, stride 2" : "2 x 2 windows"));
      const PoolWithIndices pooled = overlap ? max_pool2d_with_indices(x, 3, 2, 1) : max_pool2d_with_indices(x, 2, 2);
      Tensor dy = empty(pooled.out.shape(), dt);
      auto* p = static_cast<uint16_t*>(dy.raw_data());
      for (int64_t i = 0; i < dy.numel(); ++i) p[i] = uint16_t((i * 40503) & 0xFFFF);
      const Tensor fast = max_pool2d_backward(dy, pooled.indices, x.shape());
      Tensor generic;
      {
        RoundingCensus census;
        generic = max_pool2d_backward(dy, pooled.indices, x.shape());
      }
      const auto* a = static_cast<const uint16_t*>(fast.raw_data());
      const auto* b = static_cast<const uint16_t*>(generic.raw_data());
      int64_t differ = 0;
      for (int64_t i = 0; i < fast.numel(); ++i) differ += a[i] != b[i];
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("pooling rejects bad arguments with clear messages", "[conv]") {
  const Tensor x = zeros({1, 2, 5, 5});
  REQUIRE_THROWS_WITH(max_pool2d(x, 0), Contains("max_pool2d") && Contains("kernel"));
  REQUIRE_THROWS_WITH(max_pool2d(x, 2, 0), Contains("max_pool2d") && Contains("stride"));
  REQUIRE_THROWS_WITH(max_pool2d(x, 2, 2, 2), Contains("max_pool2d") && Contains("half the kernel"));
  REQUIRE_THROWS_WITH(avg_pool2d(x, 7), Contains("avg_pool2d") && Contains("larger than the padded input"));
  REQUIRE_THROWS_WITH(avg_pool2d(zeros({2, 5, 5}), 2), Contains("avg_pool2d") && Contains("[2, 5, 5]"));
  REQUIRE_THROWS_WITH(max_pool2d(zeros({1, 1, 4, 4}, DType::i64), 2), Contains("max_pool2d") && Contains("i64"));
}

// ---- gradient-scaling plumbing of the GEMM-like nodes --------------------------------------

namespace {
// Answers every GEMM query with beta = 4 and remembers what it was asked.
struct RecordingRule : ScalingRule {
  struct Query {
    OpId op;
    int64_t reduction;
    float dy_scale;
    Shape w_shape;
  };
  std::vector<Query> queries;
  float gemm_beta(const GemmGradQuery& q) override {
    queries.push_back({q.op, q.reduction, q.dy->scale, q.w->shape()});
    return 4.0f;
  }
  float cast_beta(const CastGradQuery&) override { return 1.0f; }
  float param_beta(const ParamGradQuery&) override { return 0.5f; }  // f64 gradients never ask
};

struct Grads {
  std::vector<ScaledGrad> g;
  RecordingRule rule;
};

// Runs f on fresh leaves (all requiring grad) with seed {S * r, S}; returns every leaf gradient.
template <class F>
void run_scaled(const std::vector<Tensor>& ins, F&& f, bool with_rule, Grads& out) {
  std::vector<Variable> vs;
  for (const Tensor& t : ins) vs.emplace_back(t, true);
  Tape tape;
  if (with_rule) tape.set_scaling_rule(&out.rule);
  Variable y = f(vs);
  const float S = 8.0f;
  tape.backward(y, ScaledGrad{rand_input(y.shape(), y.dtype(), 99) * double(S), S});
  for (const Variable& v : vs) out.g.push_back(*v.grad());
}
}  // namespace

TEST_CASE("GEMM-like nodes scale activation gradients by gemm_beta and keep alpha for parameters",
          "[linalg][conv][autograd]") {
  struct Case {
    const char* name;
    std::vector<Tensor> ins;
    std::function<Variable(const std::vector<Variable>&)> f;
    std::vector<float> scales;                      // expected scale of each input's gradient (alpha = 8)
    std::vector<std::pair<OpId, int64_t>> queries;  // expected (op, reduction) in backward order
    std::vector<Shape> w_shapes;                    // expected shape of the query's `w`
  };
  const DType f = DType::f64;
  std::vector<Case> cases;
  cases.push_back({"linear",
                   {rand_input({2, 3, 4}, f, 1), rand_input({5, 4}, f, 2), rand_input({5}, f, 3)},
                   [](const std::vector<Variable>& v) { return linear(v[0], v[1], v[2]); },
                   {32.0f, 8.0f, 8.0f},
                   {{OpId::linear, 5}},
                   {{5, 4}}});
  cases.push_back({"matmul broadcast",
                   {rand_input({2, 3, 4}, f, 4), rand_input({4, 5}, f, 5)},
                   [](const std::vector<Variable>& v) { return matmul(v[0], v[1]); },
                   {32.0f, 32.0f},
                   {{OpId::matmul, 5}, {OpId::matmul, 6}},
                   {{4, 5}, {2, 3, 4}}});
  cases.push_back({"bmm",
                   {rand_input({2, 3, 4}, f, 6), rand_input({2, 4, 5}, f, 7)},
                   [](const std::vector<Variable>& v) { return bmm(v[0], v[1]); },
                   {32.0f, 32.0f},
                   {{OpId::bmm, 5}, {OpId::bmm, 3}},
                   {{2, 4, 5}, {2, 3, 4}}});
  cases.push_back({"conv2d",
                   {rand_input({1, 2, 5, 5}, f, 8), rand_input({3, 2, 3, 2}, f, 9), rand_input({3}, f, 10)},
                   [](const std::vector<Variable>& v) { return conv2d(v[0], v[1], v[2], 1, 1); },
                   {32.0f, 8.0f, 8.0f},
                   {{OpId::conv2d, 18}},
                   {{3, 2, 3, 2}}});
  cases.push_back({"conv_transpose2d",
                   {rand_input({1, 2, 3, 3}, f, 11), rand_input({2, 3, 2, 2}, f, 12), rand_input({3}, f, 13)},
                   [](const std::vector<Variable>& v) { return conv_transpose2d(v[0], v[1], v[2], 2, 0, 1); },
                   {32.0f, 8.0f, 8.0f},
                   {{OpId::conv_transpose2d, 12}},
                   {{2, 3, 2, 2}}});
  for (Case& c : cases) {
    INFO(c.name);
    Grads plain, ruled;
    run_scaled(c.ins, c.f, false, plain);
    run_scaled(c.ins, c.f, true, ruled);
    REQUIRE(ruled.rule.queries.size() == c.queries.size());
    for (size_t i = 0; i < c.queries.size(); ++i) {
      CHECK(ruled.rule.queries[i].op == c.queries[i].first);
      CHECK(ruled.rule.queries[i].reduction == c.queries[i].second);
      CHECK(ruled.rule.queries[i].dy_scale == 8.0f);
      CHECK(ruled.rule.queries[i].w_shape == c.w_shapes[i]);
    }
    for (size_t i = 0; i < c.ins.size(); ++i) {
      INFO("input " << i);
      CHECK(plain.g[i].scale == 8.0f);
      CHECK(ruled.g[i].scale == c.scales[i]);
      // Same true gradient: beta is a power of two, so the scaled values agree exactly.
      check_equal(ruled.g[i].unscaled(), plain.g[i].unscaled());
    }
  }
}
