// cross_entropy with class weights, ignore_index and label smoothing, nll_loss, binary_cross_entropy
// on probabilities, l1_loss and smooth_l1_loss on the GPU against the CPU kernels
// (tensor/cpu/loss.cpp): f32, f16, bf16, contiguous and strided, long rows, every reduction, the
// clamps and the ignore-aware target check.
//
// Tolerances as in test_loss.cpp: the GPU sums a row's exponentials in fp32 in a tree, the CPU in
// f64 (a few fp32 ulps of the O(1) losses and gradients), and the class-weight and loss totals
// are f64 sums in another order; the pointwise losses are the same formulas
// (tensor/core/loss_formulas.h) on both devices, within an ulp of the host's and the device's log.
#include "tests/cuda/cuda_test.h"

#include <cmath>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// |got - want| <= 4 ulps of the dtype relative, plus atol (fp32 sum differences) scaled by the
// largest ordinary |want|.
void check_close_to(const Tensor& got, const Tensor& want, const std::string& what, double atol_rel = 1e-5) {
  double scale = 0.0;
  for (double v : want.to_vector())
    if (std::fabs(v) < 1e6) scale = std::max(scale, std::fabs(v));  // not BCE's 1e12 at p = 0 or 1
  require_close(host_view(got), want, what, 4.0, atol_rel * (scale + 1.0));
}

Tensor targets_with_ignored(int64_t n, int64_t C, uint64_t seed, int64_t ignore) {
  std::vector<double> u = random({n}, DType::f64, seed, 0.0, double(C)).to_vector();
  std::vector<int64_t> t;
  for (size_t i = 0; i < u.size(); ++i) t.push_back(i % 4 == 1 ? ignore : std::min<int64_t>(int64_t(u[i]), C - 1));
  return from_vector(t, {n});
}

}  // namespace

TEST_CASE("cuda cross_entropy and nll_loss with weights, ignore_index and smoothing match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 7000;
  const std::vector<Shape> shapes = {{1, 3}, {33, 10}, {5, 1000}, {2, 7, 3}};
  for (const Shape& shape : shapes)
    for (DType dt : kDtypes)
      for (int variant = 0; variant < 4; ++variant) {
        ++seed;
        const int64_t C = shape[1];
        const bool weighted = variant % 2 == 1, nll = variant == 3;
        const double eps = nll ? 0.0 : (variant >= 2 ? 0.15 : 0.0);
        const int64_t ignore = variant == 1 ? 0 : -100;
        Shape ts = shape;
        ts.erase(ts.begin() + 1);
        const Tensor t = targets_with_ignored(numel_of(ts), C, seed, ignore).reshape(ts);
        Tensor x = random(shape, dt, seed + 1, -4.0, 4.0);
        if (nll) x = log_softmax(x.to(DType::f32), 1).to(dt);
        const Tensor w = weighted ? random({C}, dt, seed + 2, 0.25, 2.0) : Tensor();
        const ClassLossOptions o{w, ignore, eps}, og{weighted ? on_gpu(w) : Tensor(), ignore, eps};
        for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
          const std::string what = std::string(nll ? "nll_loss " : "cross_entropy ") + dtype_name(dt) + " " +
                                   shape_str(shape) + (weighted ? " weighted" : "") + " eps " + std::to_string(eps) +
                                   " ignore " + std::to_string(ignore) + " " + reduction_name(r);
          const Tensor dy = r == Reduction::none ? random(ts, dt, seed + 3) : full({}, 0.75, dt);
          const Tensor want = nll ? nll_loss(x, t, r, o) : cross_entropy(x, t, r, o);
          const Tensor gwant = nll ? nll_loss_backward(x, t, dy, r, o) : cross_entropy_backward(x, t, dy, r, o);
          for (bool strided : {false, true}) {
            const Tensor xg = gpu_input(x, strided), tg = on_gpu(t);
            const Tensor got = nll ? nll_loss(xg, tg, r, og) : cross_entropy(xg, tg, r, og);
            const Tensor ggot =
                nll ? nll_loss_backward(xg, tg, on_gpu(dy), r, og) : cross_entropy_backward(xg, tg, on_gpu(dy), r, og);
            check_close_to(got, want, what + " " + layout_name(strided));
            check_close_to(ggot, gwant, what + " backward " + layout_name(strided));
          }
        }
      }
}

TEST_CASE("cuda cross_entropy's target check lets ignore_index through and names the first bad target", "[cuda]") {
  MT_REQUIRE_GPU();
  const Tensor logits = on_gpu(random({6, 4}, DType::f32, 1));
  const Tensor ok = on_gpu(from_vector(std::vector<int64_t>{0, -5, 3, -5, 1, 2}, {6}));
  CHECK(std::isfinite(cross_entropy(logits, ok, Reduction::mean, {Tensor(), -5, 0.0}).item()));
  REQUIRE_THROWS_WITH(cross_entropy(logits, ok).item(),
                      Catch::Contains("cross_entropy: target -5 (at position 1) is out of range for 4 classes"));
  REQUIRE_THROWS_WITH(nll_loss(logits, ok, Reduction::sum, {Tensor(), 3, 0.0}).item(),
                      Catch::Contains("nll_loss: target -5 (at position 1) is out of range for 4 classes (input "));
  // Every target ignored: 0 / 0, as on the CPU.
  const Tensor all = on_gpu(from_vector(std::vector<int64_t>{-100, -100}, {2}));
  CHECK(std::isnan(cross_entropy(on_gpu(random({2, 4}, DType::f32, 2)), all).item()));
}

TEST_CASE("cuda binary_cross_entropy refuses probabilities outside [0, 1] at the next read, as the CPU does",
          "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    const Tensor t = on_gpu(full({2, 3}, 1.0, dt));
    const Tensor ok = on_gpu(from_vector(std::vector<double>{0, 1, 0.5, NAN, 0.25, 1}, {2, 3}).to(dt));
    CHECK(std::isnan(binary_cross_entropy(ok, t).item()));  // NaN passes on
    const Tensor bad = on_gpu(from_vector(std::vector<double>{0, 1, 0.5, -2, 4, 1}, {2, 3}).to(dt));
    REQUIRE_THROWS_WITH(
        binary_cross_entropy(bad, t).item(),
        Catch::Contains("binary_cross_entropy: probability -2 (at position 3) is outside [0, 1] (probs " +
                        std::string(dtype_name(dt)) + "[2, 3]"));
  }
}

TEST_CASE("cuda binary_cross_entropy, l1_loss and smooth_l1_loss match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 8000;
  const std::vector<Shape> shapes = {{1}, {7}, {33}, {4097}, {100003}, {33, 31}};
  for (const Shape& shape : shapes)
    for (DType dt : kDtypes) {
      Tensor p = random(shape, dt, ++seed, 0.0, 1.0);
      if (p.numel() > 3) {  // the clamps: probabilities 0 and 1
        p.flat_set(0, 0.0);
        p.flat_set(1, 1.0);
      }
      const Tensor t = random(shape, dt, ++seed, 0.0, 1.0);
      const Tensor a = random(shape, dt, ++seed, -3.0, 3.0), b = random(shape, dt, ++seed, -1.0, 1.0);
      for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
        const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape) + " " + reduction_name(r);
        const Tensor dy = r == Reduction::none ? random(shape, dt, seed + 9) : full({}, 0.5, dt);
        for (bool strided : {false, true}) {
          const std::string w = what + " " + layout_name(strided);
          const Tensor pg = gpu_input(p, strided), tg = gpu_input(t, strided), dyg = on_gpu(dy);
          check_close_to(binary_cross_entropy(pg, tg, r), binary_cross_entropy(p, t, r), "bce " + w);
          const LossGrads gb = binary_cross_entropy_backward(p, t, dy, r, true, true);
          const LossGrads gg = binary_cross_entropy_backward(pg, tg, dyg, r, true, true);
          check_close_to(gg.da, gb.da, "bce dprobs " + w);
          check_close_to(gg.db, gb.db, "bce dtargets " + w);
          const Tensor ag = gpu_input(a, strided), bg = gpu_input(b, strided);
          check_close_to(l1_loss(ag, bg, r), l1_loss(a, b, r), "l1 " + w);
          check_close_to(l1_loss_backward(ag, bg, dyg, r, true, true).db, l1_loss_backward(a, b, dy, r, true, true).db,
                         "l1 backward " + w);
          for (double beta : {0.0, 0.5, 1.0}) {
            const std::string wb = w + " beta " + std::to_string(beta);
            check_close_to(smooth_l1_loss(ag, bg, r, beta), smooth_l1_loss(a, b, r, beta), "smooth_l1 " + wb);
            check_close_to(smooth_l1_loss_backward(ag, bg, dyg, r, beta, true, false).da,
                           smooth_l1_loss_backward(a, b, dy, r, beta, true, false).da, "smooth_l1 backward " + wb);
          }
        }
      }
    }
}
