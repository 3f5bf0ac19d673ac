// cuda/loss.cu against the CPU kernels (tensor/cpu/loss.cpp): softmax and log_softmax along every
// dim and on long rows, cross entropy (fused, reduced and not, bad targets), BCE with logits and
// MSE, forward and backward, in f32, f16 and bf16, contiguous and strided.
//
// Tolerances. The GPU computes in fp32 with expf/logf (at most 2 ulp from the correctly rounded
// value) and sums a row of len values in a tree where each value sees at most
// k = ceil(len / 256) + 10 fp32 additions; the CPU sums in f64 with std::exp. With u = 2^-24:
//   a sum of positive terms (the softmax denominator) has relative error <= k u (Higham 4.4),
//   so softmax = exp(z) / sum is within (k + 4) u relative, and log(sum) within (k + 4) u
//   absolute (d log s = ds / s);
// each test turns that into atol (fp32 error, scaled by the size of the output) and rel_ulps = 2
// for the output's own rounding (both sides round once and may land one ulp apart).
#include "tests/cuda/cuda_test.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};
constexpr double kU = 5.9604644775390625e-08;  // 2^-24, fp32 unit roundoff

double k_of(int64_t len) { return double((len + 255) / 256 + 10); }

// The spacing of the output dtype's subnormals: outputs that land there (tiny probabilities in
// f16) are rounded absolutely, not relatively, so one such step is always allowed.
double tiny(DType d) {
  switch (d) {
    case DType::f16: return std::ldexp(1.0, -24);
    case DType::bf16: return std::ldexp(1.0, -133);
    default: return std::ldexp(1.0, -149);
  }
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double rel_ulps, double atol = 0.0) {
  require_close(got, want, what, rel_ulps, atol + tiny(got.dtype()));
}

// GPU copy of t in the same layout family as `layout`.
Tensor like_layout(const Tensor& t, const char* layout) {
  return std::string(layout) == "strided" ? strided_on_gpu(t) : on_gpu(t);
}

double max_of(const Tensor& t) {
  double m = 0.0;
  for (double v : t.to_vector()) m = std::max(m, std::fabs(v));
  return m;
}

std::string what(const char* op, const Shape& s, DType dt, const char* layout, const std::string& extra = "") {
  return std::string(op) + " of " + shape_str(s) + " " + dtype_name(dt) + " (" + layout + ")" + extra;
}

Tensor targets_for(const Shape& logits_shape, uint64_t seed) {
  Shape ts = logits_shape;
  const int64_t C = ts[1];
  ts.erase(ts.begin() + 1);
  std::vector<double> v = random(ts, DType::f64, seed, 0.0, double(C)).to_vector();
  std::vector<int64_t> t;
  for (double e : v) t.push_back(std::min<int64_t>(int64_t(e), C - 1));
  return from_vector(t, ts);
}

}  // namespace

TEST_CASE("cuda softmax and log_softmax match the CPU along every dim and on long rows", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 1000;
  const std::vector<Shape> shapes = {{1}, {7}, {33}, {4097}, {3, 31, 7}, {4, 10000}, {10000, 3}, {2, 1, 1000}};
  for (const Shape& shape : shapes)
    for (DType dt : kDtypes) {
      const Tensor x = random(shape, dt, ++seed, -4.0, 4.0);
      for (int64_t dim = 0; dim < int64_t(shape.size()); ++dim) {
        const double k = k_of(shape[size_t(dim)]);
        const Tensor ys = softmax(x, dim), yl = log_softmax(x, dim);
        // softmax: relative (k + 4) u of fp32 on top of the output rounding -> in output ulps.
        const double rel = 2.0 + (k + 4) * kU / eps_of(dt);
        // log_softmax = z - log(sum): log(sum) off by (k + 4) u absolutely from the sum, logf's
        // 1 ulp and the CPU's rounding of log add 3 u log(sum) <= 3 u max|out| (z <= 0), and
        // z - log_sum rounds once on each side (covered with the output rounding by rel 2 and
        // one more u max|out|).
        const double atol_log = (k + 4) * kU + 4 * kU * max_of(yl);
        for (const auto& [layout, xg] : layouts(x)) {
          const std::string extra = " along dim " + std::to_string(dim);
          check_close(softmax(xg, dim), ys, what("softmax", shape, dt, layout, extra), rel);
          check_close(log_softmax(xg, dim), yl, what("log_softmax", shape, dt, layout, extra), 2.0, atol_log);
        }
      }
    }
}

TEST_CASE("cuda softmax and log_softmax backward match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 2000;
  const std::vector<Shape> shapes = {{7}, {33}, {3, 31, 7}, {4, 10000}, {10000, 3}};
  for (const Shape& shape : shapes)
    for (DType dt : kDtypes) {
      const Tensor x = random(shape, dt, ++seed, -4.0, 4.0);
      const Tensor dy = random(shape, dt, ++seed);
      for (int64_t dim = 0; dim < int64_t(shape.size()); ++dim) {
        const int64_t len = shape[size_t(dim)];
        const double k = k_of(len);
        const Tensor ys = softmax(x, dim), yl = log_softmax(x, dim);
        const Tensor ws = softmax_backward(ys, dy, dim), wl = log_softmax_backward(yl, dy, dim);
        // softmax: dx = y (dy - s), s = sum(dy y) with |dy| <= 1 and sum(y) = 1, so |s| <= 1 and
        // its fp32 error <= (k + 1) u; each dx then adds 2 roundings of size <= 2 max|y|.
        const double atol_s = (k + 5) * kU * std::max(1.0, max_of(ys));
        // log_softmax: dx = dy - exp(y) s, s = sum(dy) with |s| <= len; fp32 error of s is
        // <= k u len, times exp(y) <= max softmax; expf's 2 ulp and the roundings add 4 u |s|.
        const double atol_l = (k + 6) * kU * double(len) * max_of(ys) + 2 * kU;
        for (const auto& [layout, yg] : layouts(ys)) {
          const std::string extra = " backward along dim " + std::to_string(dim);
          check_close(softmax_backward(yg, like_layout(dy, layout), dim), ws, what("softmax", shape, dt, layout, extra),
                      2.0, atol_s);
          check_close(log_softmax_backward(like_layout(yl, layout), like_layout(dy, layout), dim), wl,
                      what("log_softmax", shape, dt, layout, extra), 2.0, atol_l);
        }
      }
    }
}

TEST_CASE("cuda cross_entropy forward and backward match the CPU, reduced and not", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 3000;
  // [N, C] and [N, C, d]: rows are everything but dim 1 (spatial cross entropy).
  const std::vector<Shape> shapes = {{1, 7}, {33, 10}, {7, 1000}, {4, 10000}, {5, 33, 7}, {257, 3}};
  for (const Shape& shape : shapes)
    for (DType dt : kDtypes) {
      const Tensor logits = random(shape, dt, ++seed, -3.0, 3.0);
      const Tensor targets = targets_for(shape, ++seed);
      const int64_t C = shape[1];
      const double k = k_of(C);
      for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
        const Tensor want = cross_entropy(logits, targets, r);
        // Each row's loss = log(sum) - (x_t - max) is within (k + 4) u (1 + |loss|) in fp32; a
        // sum over rows adds up the rows' errors (f64 summation error is negligible) and a mean
        // divides them again.
        const double rows = double(targets.numel());
        const double row_err = (k + 4) * kU * (1.0 + std::log(double(C)) + 6.0);
        const double atol = r == Reduction::sum ? row_err * rows : row_err;
        const Tensor dy = r == Reduction::none ? random(targets.shape(), dt, ++seed) : full({}, 0.75, dt);
        const Tensor wgrad = cross_entropy_backward(logits, targets, dy, r);
        // dlogits = (p - [k == t]) g: p within (k + 4) u relative, |g| <= 1 (or 0.75 / divisor).
        const double g = r == Reduction::none ? 1.0 : (r == Reduction::mean ? 0.75 / rows : 0.75);
        const double atol_g = (k + 6) * kU * g;
        for (const auto& [layout, lg] : layouts(logits)) {
          const std::string extra = std::string(" reduction ") + reduction_name(r);
          const Tensor tg = on_gpu(targets);
          check_close(cross_entropy(lg, tg, r), want, what("cross_entropy", shape, dt, layout, extra), 2.0, atol);
          check_close(cross_entropy_backward(lg, tg, on_gpu(dy), r), wgrad,
                      what("cross_entropy backward", shape, dt, layout, extra), 2.0, atol_g);
        }
      }
    }
}

TEST_CASE("cuda cross_entropy names the first out-of-range target, as the CPU does", "[cuda]") {
  MT_REQUIRE_GPU();
  const Tensor logits = on_gpu(random({12, 5}, DType::f32, 1));
  std::vector<int64_t> t = {0, 1, 2, 3, 4, 7, 0, 1, -1, 2, 3, 4};
  const Tensor targets = on_gpu(from_vector(t, {12}));
  const std::string msg = "cross_entropy: target 7 (at position 5) is out of range for 5 classes";
  // The check waits on the device until the host reads it anyway (Note [Deferred device checks]):
  // the op itself does not synchronize, the next read throws, naming the op.
  const uint64_t syncs = cuda::runtime_counters().host_syncs;
  const Tensor loss = cross_entropy(logits, targets);
  CHECK(cuda::runtime_counters().host_syncs == syncs);
  REQUIRE_THROWS_WITH(loss.item(), Catch::Contains(msg));
  REQUIRE_THROWS_WITH(on_cpu(cross_entropy(logits, targets, Reduction::none)), Catch::Contains(msg));
  REQUIRE_THROWS_WITH(on_cpu(cross_entropy_backward(logits, targets, on_gpu(full({}, 1.0)), Reduction::mean)),
                      Catch::Contains(msg));
  {
    const Tensor pending = cross_entropy(logits, targets);
    REQUIRE_THROWS_WITH(cuda::synchronize(0), Catch::Contains(msg));  // synchronize() reads it too
  }
  t[5] = 4;
  REQUIRE_THROWS_WITH(cross_entropy(logits, on_gpu(from_vector(t, {12}))).item(),
                      Catch::Contains("target -1 (at position 8)"));
  t[8] = 0;
  CHECK(std::isfinite(cross_entropy(logits, on_gpu(from_vector(t, {12}))).item()));
}

TEST_CASE("cuda BCE with logits and MSE match the CPU, forward and backward", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 4000;
  const std::vector<Shape> shapes = {{1}, {7}, {31}, {33}, {1000}, {4097}, {100003}, {33, 31}, {3, 7, 5}};
  for (const Shape& shape : shapes)
    for (DType dt : kDtypes) {
      const Tensor x = random(shape, dt, ++seed, -6.0, 6.0);
      const Tensor t = random(shape, dt, ++seed, 0.0, 1.0);
      const double n = double(x.numel());
      for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
        const std::string extra = std::string(" reduction ") + reduction_name(r);
        const Tensor dy = r == Reduction::none ? random(shape, dt, ++seed) : full({}, 0.5, dt);
        // BCE: each loss max(x,0) - x t + log1p(exp(-|x|)) <= 7 in magnitude; expf and log1pf
        // are within 2 ulp, 3 more roundings: <= 8 u * 8 per element. Reduced: the f64 sum adds
        // the elements' errors (sum: n of them; mean: divided by n again).
        const double elem = 64 * kU;
        const double atol_bce = r == Reduction::sum ? elem * n : elem;
        const Tensor wb = binary_cross_entropy_with_logits(x, t, r);
        const LossGrads wbg = binary_cross_entropy_with_logits_backward(x, t, dy, r, true, true);
        // MSE: the per-element formula is the CPU's (bit-identical unreduced); reduced, both sum
        // the same fp32 values in f64 in different orders: the rounding of the result dominates.
        const Tensor wm = mse_loss(x, t, r);
        const LossGrads wmg = mse_loss_backward(x, t, dy, r, true, true);
        for (const auto& [layout, xg] : layouts(x)) {
          const Tensor tg = like_layout(t, layout);
          const Tensor dyg = r == Reduction::none ? like_layout(dy, layout) : on_gpu(dy);
          check_close(binary_cross_entropy_with_logits(xg, tg, r), wb, what("bce", shape, dt, layout, extra), 2.0,
                      atol_bce);
          const LossGrads gb = binary_cross_entropy_with_logits_backward(xg, tg, dyg, r, true, true);
          // dx = (sigmoid(x) - t) g, |g| <= 1: expf's 2 ulp and the CPU's 0.5 on e <= 1, then
          // 1 + e and the division (a rounding each, both sides) keep sigmoid within 7 u; the
          // subtraction of t rounds once more on each side: 16 u covers it. dt = -x g is the
          // CPU's formula (bit-identical).
          check_close(gb.da, wbg.da, what("bce dlogits", shape, dt, layout, extra), 2.0, 16 * kU);
          require_bit_identical(gb.db, wbg.db, what("bce dtargets", shape, dt, layout, extra));
          const LossGrads only_dx = binary_cross_entropy_with_logits_backward(xg, tg, dyg, r, true, false);
          CHECK_FALSE(only_dx.db.defined());
          check_close(only_dx.da, wbg.da, what("bce dlogits only", shape, dt, layout, extra), 2.0, 16 * kU);

          if (r == Reduction::none)
            require_bit_identical(mse_loss(xg, tg, r), wm, what("mse", shape, dt, layout, extra));
          else check_close(mse_loss(xg, tg, r), wm, what("mse", shape, dt, layout, extra), 2.0);
          const LossGrads gm = mse_loss_backward(xg, tg, dyg, r, true, true);
          require_bit_identical(gm.da, wmg.da, what("mse da", shape, dt, layout, extra));
          require_bit_identical(gm.db, wmg.db, what("mse db", shape, dt, layout, extra));
          const LossGrads only_db = mse_loss_backward(xg, tg, dyg, r, false, true);
          CHECK_FALSE(only_db.da.defined());
          require_bit_identical(only_db.db, wmg.db, what("mse db only", shape, dt, layout, extra));
        }
      }
    }
}
