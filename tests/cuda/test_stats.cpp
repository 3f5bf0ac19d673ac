// cuda/stats.cu against the CPU kernels: grad_stats (and its one-read-back vector form and
// check_grads on GPU gradients), grad_telemetry, tensor_moments and log_abs_moments, on tensors
// holding inf, NaN, subnormals, signed zeros and values spread over the whole exponent range.
#include "tests/cuda/cuda_test.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mixtape.h"
#include "optim/optim.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// n values sign * 2^e * (1 + f), e uniform in [-160, 20] (so, in each dtype, some underflow to 0,
// some are subnormal, some overflow to inf), with planted specials: NaN, +-inf, +-0 and the
// smallest subnormals of f32 and f16. `clean` leaves out the inf and NaN.
Tensor special_values(const Shape& shape, DType dt, uint64_t seed, bool clean = false) {
  const int64_t n = numel_of(shape);
  const std::vector<double> u = random({n}, DType::f64, seed, 0.0, 1.0).to_vector();
  const std::vector<double> w = random({n}, DType::f64, seed + 1, -1.0, 1.0).to_vector();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::floor(-160.0 + 180.0 * u[size_t(i)]);
    v[size_t(i)] = std::ldexp(std::copysign(1.0 + std::fabs(w[size_t(i)]), w[size_t(i)]), int(e));
    if (i % 13 == 5) v[size_t(i)] = 0.0;
    if (i % 17 == 3) v[size_t(i)] = -0.0;
    if (i % 29 == 7) v[size_t(i)] = std::ldexp(1.0, -149);   // f32's smallest subnormal
    if (i % 31 == 11) v[size_t(i)] = -std::ldexp(3.0, -24);  // an f16 subnormal
    if (i % 37 == 2) v[size_t(i)] = std::ldexp(1.5, -8);     // ordinary
    if (clean) continue;
    if (i % 97 == 13) v[size_t(i)] = nan;
    if (i % 101 == 17) v[size_t(i)] = inf;
    if (i % 103 == 19) v[size_t(i)] = -inf;
  }
  return from_vector(v, shape, dt);
}

const std::vector<Shape> kShapes = {{1}, {7}, {31}, {33}, {1000}, {4097}, {100003}, {33, 31}, {3, 7, 257}};

std::string what(const char* op, const Shape& s, DType dt, const char* layout) {
  return std::string(op) + " of " + shape_str(s) + " " + dtype_name(dt) + " (" + layout + ")";
}

// f64 sums in a different order: relative error n * 2^-53 of the sum of magnitudes, here well
// below 1e-9 of it.
void check_sum(double got, double want, double magnitude, const std::string& w) {
  INFO(w << ": got " << got << ", want " << want);
  CHECK(std::fabs(got - want) <= 1e-9 * magnitude + 1e-300);
}

}  // namespace

TEST_CASE("cuda grad_stats finds inf/NaN and the finite max exactly as the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 5000;
  for (const Shape& shape : kShapes)
    for (DType dt : kDtypes)
      for (bool clean : {false, true}) {
        const Tensor g = special_values(shape, dt, seed += 2, clean);
        const GradStats want = grad_stats(g);
        for (const auto& [layout, gg] : layouts(g)) {
          INFO(what("grad_stats", shape, dt, layout) << (clean ? " without inf/NaN" : ""));
          const GradStats got = grad_stats(gg);
          CHECK(got.has_inf_nan == want.has_inf_nan);
          CHECK(got.max_abs == want.max_abs);  // a max picks an element: exact
        }
      }
  const GradStats z = grad_stats(on_gpu(zeros({0}, DType::f32)));
  CHECK_FALSE(z.has_inf_nan);
  CHECK(z.max_abs == 0.0);
  const GradStats zeros_only = grad_stats(on_gpu(from_vector(std::vector<double>{-0.0, 0.0, -0.0}, {3}, DType::f16)));
  CHECK_FALSE(zeros_only.has_inf_nan);
  CHECK(zeros_only.max_abs == 0.0);
}

TEST_CASE("cuda grad_stats of many tensors reads back once and equals the per-tensor results", "[cuda]") {
  MT_REQUIRE_GPU();
  std::vector<Tensor> cpu_gs, gpu_gs;
  uint64_t seed = 6000;
  for (const Shape& shape : kShapes)
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const bool clean = (seed / 2) % 3 != 0;
      cpu_gs.push_back(special_values(shape, dt, seed += 2, clean));
      gpu_gs.push_back(cpu_gs.back().dim() >= 2 ? strided_on_gpu(cpu_gs.back()) : on_gpu(cpu_gs.back()));
    }
  cpu_gs.push_back(zeros({0}, DType::f32));
  gpu_gs.push_back(on_gpu(cpu_gs.back()));
  const std::vector<GradStats> got = grad_stats(gpu_gs);
  REQUIRE(got.size() == cpu_gs.size());
  int with_inf = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const GradStats want = grad_stats(cpu_gs[i]);
    INFO("tensor " << i << " " << cpu_gs[i].meta());
    CHECK(got[i].has_inf_nan == want.has_inf_nan);
    CHECK(got[i].max_abs == want.max_abs);
    with_inf += want.has_inf_nan;
  }
  CHECK(with_inf > 0);
  CHECK(with_inf < int(got.size()));
}

TEST_CASE("cuda check_grads agrees with the CPU on GPU gradients", "[cuda]") {
  MT_REQUIRE_GPU();
  auto param = [](const std::vector<double>& g, float scale, DType dt, Device dev) {
    Variable p(zeros({int64_t(g.size())}, DType::f32, dev), true, "p");
    p.set_grad(ScaledGrad{from_vector(g, {int64_t(g.size())}, dt).to(dev), scale});
    return p;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (Device dev : {Device::cpu(), gpu()}) {
    Variable a = param({16.0, -48.0}, 16.0f, DType::f16, dev);
    Variable b = param({1024.0, 5120.0}, 1024.0f, DType::f16, dev);
    Variable c = param({1.0, -inf}, 1.0f, DType::f32, dev);
    Variable none(zeros({2}, DType::f32, dev), true, "no grad");
    const GradCheck clean = check_grads({a, b, none});
    INFO("device " << dev.str());
    CHECK_FALSE(clean.found_inf);
    CHECK(clean.max_abs == 5.0);
    CHECK(clean.grads == 2);
    const GradCheck bad = check_grads({a, c, b});
    CHECK(bad.found_inf);
    CHECK(bad.grads == 3);
  }
}

TEST_CASE("cuda grad_telemetry counts and histograms exactly as the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 7000;
  for (const Shape& shape : kShapes)
    for (DType dt : kDtypes) {
      const Tensor x = special_values(shape, dt, seed += 2);
      for (DType format : {DType::f16, DType::bf16})
        for (const auto& [lo, hi, hist] : {std::tuple<int64_t, int64_t, bool>{kExpHistLo, kExpHistHi, true},
                                           std::tuple<int64_t, int64_t, bool>{-10, 5, true},  // clamped bins
                                           std::tuple<int64_t, int64_t, bool>{0, 0, false}}) {
          const GradTelemetry want = grad_telemetry(x, format, hist, lo, hi);
          for (const auto& [layout, xg] : layouts(x)) {
            INFO(what("grad_telemetry", shape, dt, layout) << " to " << dtype_name(format) << " bins [" << lo << ", "
                                                           << hi << "]" << (hist ? "" : " without histogram"));
            const GradTelemetry got = grad_telemetry(xg, format, hist, lo, hi);
            CHECK(got.numel == want.numel);
            CHECK(got.nonzero == want.nonzero);
            CHECK(got.underflow == want.underflow);
            CHECK(got.subnormal == want.subnormal);
            CHECK(got.overflow == want.overflow);
            CHECK(got.max_abs == want.max_abs);
            CHECK(got.hist == want.hist);
          }
        }
    }
}

TEST_CASE("cuda tensor_moments and log_abs_moments match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  uint64_t seed = 8000;
  for (const Shape& shape : kShapes)
    for (DType dt : kDtypes)
      for (bool spread : {true, false}) {
        // spread: the special values (sums dominated by a few large ones); else uniform [-3, 3].
        const Tensor x = spread ? special_values(shape, dt, seed += 2) : random(shape, dt, seed += 2, -3.0, 3.0);
        const TensorMoments tm = tensor_moments(x);
        const LogAbsMoments lm = log_abs_moments(x);
        for (const auto& [layout, xg] : layouts(x)) {
          const TensorMoments gt = tensor_moments(xg);
          const LogAbsMoments gl = log_abs_moments(xg);
          const std::string w = what("moments", shape, dt, layout);
          CHECK(gt.count == tm.count);
          CHECK(gt.nonfinite == tm.nonfinite);
          CHECK(gt.max_abs == tm.max_abs);
          // mean and rms come from f64 sums; scale: the rms (sqrt of the mean square) bounds |mean|.
          check_sum(gt.mean, tm.mean, tm.rms + tm.max_abs, w + " mean");
          check_sum(gt.rms, tm.rms, tm.rms, w + " rms");
          check_sum(gt.std, tm.std, tm.rms, w + " std");
          CHECK(gl.count == lm.count);
          CHECK(gl.nonfinite == lm.nonfinite);
          CHECK(gl.max_abs == lm.max_abs);
          // ln|x| in f64 on the device is within 1-2 ulp of the CPU's: relative 1e-9 of the
          // magnitude (|mu| + sigma, at least 1) is far above that and far below any real error.
          const double mag = std::fabs(lm.mu) + lm.sigma + 1.0;
          check_sum(gl.mu, lm.mu, mag, w + " log mu");
          check_sum(gl.sigma, lm.sigma, mag, w + " log sigma");
        }
      }
  const TensorMoments empty_m = tensor_moments(on_gpu(zeros({0}, DType::f32)));
  CHECK(empty_m.count == 0);
  CHECK(empty_m.max_abs == 0.0);
}
