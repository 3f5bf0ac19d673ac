// The fused update kernels (tensor/ops/optim.h) on plain tensors: strided operands, f32 against
// the f64 reference, and argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tensor/ops.h"
#include "tensor/ops/optim.h"

using namespace mixtape;

namespace {

// max |a - b| / max(1, |b|) over all elements.
double max_rel_err(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double e = 0.0;
  for (size_t i = 0; i < x.size(); ++i) e = std::max(e, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  return e;
}

}  // namespace

TEST_CASE("update kernels in f32 track the f64 reference on strided tensors", "[optim]") {
  Generator gen(3);
  const Tensor p64 = normal({4, 3}, 0.0, 1.0, gen, DType::f64);
  std::vector<Tensor> g64;
  for (int t = 0; t < 5; ++t) g64.push_back(normal({4, 3}, 0.0, 0.5, gen, DType::f64));

  for (bool adam : {false, true}) {
    INFO((adam ? "adam" : "sgd"));
    // The f64 run on contiguous tensors; the f32 run on a transposed parameter and gradient.
    Tensor a = p64.clone(), a_m = zeros_like(a), a_v = zeros_like(a);
    Tensor b_store = p64.t().contiguous().to(DType::f32);  // [3, 4]
    Tensor b = b_store.t();                                // [4, 3] view, non-contiguous
    Tensor b_m = zeros({3, 4}).t(), b_v = zeros({3, 4}).t();
    for (int t = 0; t < 5; ++t) {
      const Tensor g32 = g64[size_t(t)].t().contiguous().to(DType::f32).t();
      if (adam) {
        adam_update_(a, g64[size_t(t)], a_m, a_v, 1e-2, 0.9, 0.99, 1e-8, 0.1, true, t + 1);
        adam_update_(b, g32, b_m, b_v, 1e-2, 0.9, 0.99, 1e-8, 0.1, true, t + 1);
      } else {
        sgd_update_(a, g64[size_t(t)], a_m, 0.1, 0.9, 0.0, 1e-2, true, t + 1);
        sgd_update_(b, g32, b_m, 0.1, 0.9, 0.0, 1e-2, true, t + 1);
      }
    }
    CHECK(max_rel_err(a, p64) > 1e-3);  // it moved
    CHECK(max_rel_err(b, a) < 1e-6);
    CHECK(max_rel_err(b_m, a_m) < 1e-6);
  }
}

TEST_CASE("sgd_update_ without momentum needs no buffer", "[optim]") {
  Tensor p = from_vector(std::vector<double>{1.0, 2.0}, {2}, DType::f32);
  Tensor none;
  sgd_update_(p, from_vector(std::vector<double>{0.5, -0.5}, {2}), none, 0.5, 0.0, 0.0, 0.0, false, 1);
  CHECK(p.to_vector() == std::vector<double>{0.75, 2.25});
}

TEST_CASE("update kernels reject bad arguments with clear messages", "[optim]") {
  Tensor p = zeros({3}), g = zeros({3}), m = zeros({3}), v = zeros({3});
  Tensor h = zeros({3}, DType::bf16);
  CHECK_THROWS_WITH(adam_update_(h, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.0, false, 1),
                    Catch::Contains("adam_update_") && Catch::Contains("must be f32 or f64") &&
                        Catch::Contains("master weights"));
  Tensor g16 = zeros({3}, DType::f16);
  CHECK_THROWS_WITH(sgd_update_(p, g16, m, 0.1, 0.9, 0.0, 0.0, false, 1),
                    Catch::Contains("gradient f16[3]") && Catch::Contains("must be f32"));
  Tensor g4 = zeros({4});
  CHECK_THROWS_WITH(sgd_update_(p, g4, m, 0.1, 0.0, 0.0, 0.0, false, 1), Catch::Contains("does not match parameter"));
  Tensor m64 = zeros({3}, DType::f64);
  CHECK_THROWS_WITH(adam_update_(p, g, m64, v, 0.1, 0.9, 0.999, 1e-8, 0.0, true, 1),
                    Catch::Contains("adamw_update_: exp_avg f64[3]"));
  Tensor bcast = zeros({1}).expand({3});
  CHECK_THROWS_WITH(sgd_update_(bcast, g, m, 0.1, 0.0, 0.0, 0.0, false, 1), Catch::Contains("broadcast view"));
  Tensor none;
  CHECK_THROWS_WITH(sgd_update_(p, g, none, 0.1, 0.9, 0.0, 0.0, false, 1), Catch::Contains("momentum buffer is undefined"));
  CHECK_THROWS_WITH(sgd_update_(p, g, m, 0.1, 0.9, 0.0, 0.0, false, 0), Catch::Contains("step counts updates from 1"));
  CHECK_THROWS_WITH(adam_update_(p, g, m, v, 0.1, 0.9, 1.0, 1e-8, 0.0, false, 1), Catch::Contains("beta2"));
  CHECK_THROWS_WITH(sgd_update_(p, g, m, -0.1, 0.0, 0.0, 0.0, false, 1), Catch::Contains("learning rate"));
}
