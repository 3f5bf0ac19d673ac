// The fused update kernels (tensor/ops/optim.h) on plain tensors: strided operands, f32 against
// the f64 reference, and argument checks.
#include "support/catch.h"

#include <cmath>
#include <vector>

#include "support/test_util.h"
#include "tensor/cpu/convert.h"
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

TEST_CASE("rmsprop, adagrad and amsgrad kernels in f32 track the f64 reference on strided tensors", "[optim]") {
  Generator gen(4);
  const Tensor p64 = normal({4, 3}, 0.0, 1.0, gen, DType::f64);
  std::vector<Tensor> g64;
  for (int t = 0; t < 5; ++t) g64.push_back(normal({4, 3}, 0.0, 0.5, gen, DType::f64));
  for (int rule = 0; rule < 3; ++rule) {  // 0: centered RMSprop with momentum, 1: Adagrad, 2: AMSGrad
    INFO("rule " << rule);
    // The f64 run on contiguous tensors; the f32 run on transposed views, every buffer too.
    Tensor a = p64.clone();
    std::vector<Tensor> as = {zeros_like(a), zeros_like(a), full({4, 3}, 0.1, DType::f64)};
    Tensor b = p64.t().contiguous().to(DType::f32).t();
    std::vector<Tensor> bs = {zeros({3, 4}).t(), zeros({3, 4}).t(), full({3, 4}, 0.1).t()};
    auto step = [&](Tensor& p, const Tensor& g, std::vector<Tensor>& s, int64_t t) {
      if (rule == 0) rmsprop_update_(p, g, s[0], s[1], s[2], 1e-2, 0.9, 1e-8, 0.1, 0.9, true);
      else if (rule == 1) adagrad_update_(p, g, s[2], 1e-1, 0.1, 1e-10, 0.1, t);
      else adam_update_(p, g, s[0], s[1], 1e-2, 0.9, 0.5, 1e-8, 0.1, false, t, nullptr, &s[2]);
    };
    for (int t = 0; t < 5; ++t) {
      step(a, g64[size_t(t)], as, t + 1);
      step(b, g64[size_t(t)].t().contiguous().to(DType::f32).t(), bs, t + 1);
    }
    CHECK(max_rel_err(a, p64) > 1e-3);  // it moved
    CHECK(max_rel_err(b, a) < 1e-5);
    for (size_t k = 0; k < 3; ++k) CHECK(max_rel_err(bs[k], as[k]) < 1e-5);
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
  CHECK_THROWS_WITH(
      adam_update_(h, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.0, false, 1),
      Catch::Contains("adam_update_") && Catch::Contains("must be f32 or f64") && Catch::Contains("master weights"));
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
  CHECK_THROWS_WITH(sgd_update_(p, g, none, 0.1, 0.9, 0.0, 0.0, false, 1),
                    Catch::Contains("momentum buffer is undefined"));
  CHECK_THROWS_WITH(sgd_update_(p, g, m, 0.1, 0.9, 0.0, 0.0, false, 0), Catch::Contains("step counts updates from 1"));
  CHECK_THROWS_WITH(adam_update_(p, g, m, v, 0.1, 0.9, 1.0, 1e-8, 0.0, false, 1), Catch::Contains("beta2"));
  CHECK_THROWS_WITH(sgd_update_(p, g, m, -0.1, 0.0, 0.0, 0.0, false, 1), Catch::Contains("learning rate"));
}

TEST_CASE("the rounded copy written in the update's pass equals copy_ after the update", "[optim][mixed]") {
  // Note [Fused master copy]: one RNE rounding of the same fp32 value, so the bits must agree.
  Generator gen(11);
  for (DType low : {DType::f16, DType::bf16})
    for (int rule = 0; rule < 4; ++rule) {  // sgd, sgd + Nesterov momentum, adam (L2), adamw
      INFO(dtype_name(low) << " rule " << rule);
      const Tensor p0 = normal({5, 7}, 0.0, 1.0, gen);
      Tensor fused = p0.clone(), plain = p0.clone();
      Tensor fm = zeros({5, 7}), fv = zeros({5, 7}), pm = zeros({5, 7}), pv = zeros({5, 7});
      // The copy is a transposed view, as a model parameter may be; its storage is [7, 5].
      Tensor copy_store = p0.t().contiguous().to(low);
      Tensor copy = copy_store.t();
      Tensor plain_copy = p0.to(low);
      for (int64_t step = 1; step <= 3; ++step) {
        const Tensor g = normal({5, 7}, 0.0, 0.3, gen);
        switch (rule) {
          case 0:
            sgd_update_(fused, g, fm, 0.1, 0.0, 0.0, 1e-2, false, step, &copy);
            sgd_update_(plain, g, pm, 0.1, 0.0, 0.0, 1e-2, false, step);
            break;
          case 1:
            sgd_update_(fused, g, fm, 0.1, 0.9, 0.0, 1e-2, true, step, &copy);
            sgd_update_(plain, g, pm, 0.1, 0.9, 0.0, 1e-2, true, step);
            break;
          default:
            adam_update_(fused, g, fm, fv, 1e-2, 0.9, 0.999, 1e-8, 1e-2, rule == 3, step, &copy);
            adam_update_(plain, g, pm, pv, 1e-2, 0.9, 0.999, 1e-8, 1e-2, rule == 3, step);
        }
        plain_copy.copy_(plain);
        REQUIRE(fused.to_vector() == plain.to_vector());  // the master is untouched by the copy
        REQUIRE(copy.to_vector() == plain_copy.to_vector());
      }
      CHECK(copy.to_vector() != p0.to(low).to_vector());  // it moved
    }
}

TEST_CASE("a bad rounded copy is rejected before anything is written", "[optim][mixed]") {
  Tensor p = from_vector(std::vector<double>{1.0, 2.0, 3.0}, {3}), g = ones({3}), m = zeros({3}), v = zeros({3});
  Tensor none;
  Tensor f32_copy = zeros({3});
  CHECK_THROWS_WITH(sgd_update_(p, g, none, 0.1, 0.0, 0.0, 0.0, false, 1, &f32_copy),
                    Catch::Contains("sgd_update_: the rounded copy f32[3] must be bf16 or f16"));
  Tensor short_copy = zeros({2}, DType::bf16);
  CHECK_THROWS_WITH(adam_update_(p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.0, true, 1, &short_copy),
                    Catch::Contains("adamw_update_: the rounded copy bf16[2]") &&
                        Catch::Contains("shape and device of parameter f32[3]"));
  Tensor bcast = zeros({1}, DType::f16).expand({3});
  CHECK_THROWS_WITH(sgd_update_(p, g, none, 0.1, 0.0, 0.0, 0.0, false, 1, &bcast), Catch::Contains("broadcast view"));
  Tensor p64 = zeros({3}, DType::f64), g64 = zeros({3}, DType::f64), copy = zeros({3}, DType::f16);
  CHECK_THROWS_WITH(sgd_update_(p64, g64, none, 0.1, 0.0, 0.0, 0.0, false, 1, &copy),
                    Catch::Contains("needs an f32 master parameter"));
  Tensor undefined;
  CHECK_THROWS_WITH(sgd_update_(p, g, none, 0.1, 0.0, 0.0, 0.0, false, 1, &undefined),
                    Catch::Contains("the rounded copy is undefined"));
  CHECK(p.to_vector() == std::vector<double>{1.0, 2.0, 3.0});
}

TEST_CASE("adam_update gives the same bits on every conversion path", "[optim]") {
  // Note [Vector Adam]: the AVX-512 rows against the scalar loop. Adam (L2) and AdamW, beta1 on
  // both sides of lerp's switch (1 - beta1 below and above 0.5), with and without the bf16 and
  // f16 copies, on a contiguous tensor with a ragged tail (37 x 19) and on a transposed one (the
  // scalar loop), gradients of every magnitude, a few steps each.
  for (DType low : {DType::f32, DType::bf16, DType::f16})
    for (double beta1 : {0.9, 0.3})
      for (bool decoupled : {false, true})
        for (bool transposed : {false, true}) {
          INFO("copy " << dtype_name(low) << " beta1 " << beta1 << (decoupled ? " adamw" : " adam")
                       << (transposed ? " transposed" : ""));
          std::vector<std::vector<double>> outs;
          for (const std::string& path : cpu::conversion_paths()) {
            test::ConversionPathScope scope(path);
            Generator gen(5);
            const Tensor base = normal({37, 19}, 0.0, 1.0, gen);
            Tensor p = transposed ? base.t().contiguous().t() : base.clone();
            Tensor m = zeros_like(p), v = zeros_like(p);
            Tensor copy = p.to(low == DType::f32 ? DType::bf16 : low);
            for (int64_t step = 1; step <= 3; ++step) {
              const Tensor g = normal({37, 19}, 0.0, std::pow(10.0, 3.0 * double(step) - 6.0), gen);
              adam_update_(p, g, m, v, 1e-2, beta1, 0.999, 1e-8, 1e-2, decoupled, step,
                           low == DType::f32 ? nullptr : &copy);
            }
            for (const Tensor& t : {p, m, v, copy}) outs.push_back(t.to_vector());
          }
          for (size_t i = 4; i < outs.size(); ++i) CHECK(outs[i] == outs[i % 4]);
        }
}
