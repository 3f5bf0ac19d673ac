// The three CPU suites over every registered op case (tests/support/op_cases.h); the device
// suite is tests/cuda/test_op_cases.cpp.
#include "support/catch.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "support/op_cases.h"

using namespace mixtape;
using mixtape::test::op_cases;
using mixtape::test::OpCase;
using mixtape::test::run_case;
using Run = mixtape::test::CaseRun;

namespace {

std::vector<Variable> make_vars(const std::vector<Tensor>& ins) {
  std::vector<Variable> vs;
  for (const Tensor& t : ins) vs.emplace_back(t, is_floating(t.dtype()));
  return vs;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.flat_get(i) * b.flat_get(i);
  return s;
}

}  // namespace

TEST_CASE("every differentiable op passes the f64 central-difference gradient check", "[autograd][gradcheck]") {
  std::set<OpId> covered;
  for (const OpCase& c : op_cases()) {
    INFO("case: " << c.name);
    std::vector<Tensor> ins = c.inputs(DType::f64);
    Tensor r;
    Run run = run_case(c, ins, [&](const Tensor& out) {
      r = test::rand_input(out.shape(), DType::f64, 9001);
      return ScaledGrad{r, 1.0f};
    });
    covered.insert(run.ops.begin(), run.ops.end());
    NoGrad no_grad;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!is_floating(ins[i].dtype())) continue;
      INFO("input " << i << " " << ins[i].meta());
      REQUIRE(run.grads[i].has_value());
      const Tensor& g = run.grads[i]->g;
      REQUIRE(g.shape() == ins[i].shape());
      Tensor x = ins[i];
      double worst = 0.0;
      for (int64_t j = 0; j < x.numel(); ++j) {
        const double orig = x.flat_get(j);
        x.flat_set(j, orig + c.fd_step);
        const double fp = dot(c.fn(make_vars(ins)).data(), r);
        x.flat_set(j, orig - c.fd_step);
        const double fm = dot(c.fn(make_vars(ins)).data(), r);
        x.flat_set(j, orig);
        const double numeric = (fp - fm) / (2.0 * c.fd_step);
        const double analytic = g.flat_get(j) / double(run.grads[i]->scale);
        const double err = std::abs(analytic - numeric) / (1.0 + std::abs(numeric));
        worst = std::max(worst, err);
        if (err > c.fd_tol) {
          INFO("element " << j << ": analytic " << analytic << " numeric " << numeric);
          CHECK(err <= c.fd_tol);
        }
      }
      CHECK(worst <= c.fd_tol);
    }
  }
  std::vector<std::string> missing;
  for (size_t k = 0; k < kNumOps; ++k)
    if (!covered.count(OpId(k))) missing.push_back(kOpNames[k]);
  std::printf("gradcheck: %zu of %zu differentiable ops covered in f64 by %zu cases\n", covered.size(), kNumOps,
              op_cases().size());
  std::string list;
  for (const auto& m : missing) list += m + " ";
  INFO("ops without a gradient check: " << list);
  CHECK(missing.empty());
}

TEST_CASE("a power-of-two loss scale S multiplies every gradient by exactly S", "[autograd][scale]") {
  const float S = 1024.0f;
  for (DType dt : {DType::f32, DType::f64}) {
    for (const OpCase& c : op_cases()) {
      INFO("case: " << c.name << " dtype " << dtype_name(dt));
      const std::vector<Tensor> ins = c.inputs(dt);
      Tensor r;
      Run plain = run_case(c, ins, [&](const Tensor& out) {
        r = test::rand_input(out.shape(), dt, 4242);
        return ScaledGrad{r, 1.0f};
      });
      Run scaled = run_case(c, ins, [&](const Tensor& out) {
        return ScaledGrad{test::rand_input(out.shape(), dt, 4242) * double(S), S};
      });
      for (size_t i = 0; i < ins.size(); ++i) {
        if (!is_floating(ins[i].dtype())) continue;
        REQUIRE(plain.grads[i].has_value());
        REQUIRE(scaled.grads[i].has_value());
        CHECK(plain.grads[i]->scale == 1.0f);
        CHECK(scaled.grads[i]->scale == S);
        const Tensor& g1 = plain.grads[i]->g;
        const Tensor& gs = scaled.grads[i]->g;
        int64_t mismatches = 0;
        for (int64_t j = 0; j < g1.numel(); ++j)
          if (gs.flat_get(j) != double(S) * g1.flat_get(j)) ++mismatches;
        INFO("input " << i << ": " << mismatches << " of " << g1.numel() << " elements differ from S * g");
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("f16 and bf16 forward and backward match the f64 reference", "[autograd][lowp]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    for (const OpCase& c : op_cases()) {
      if (!c.check16) continue;
      INFO("case: " << c.name << " dtype " << dtype_name(dt));
      const std::vector<Tensor> ins = c.inputs(dt);
      std::vector<Tensor> ref_ins;
      for (const Tensor& t : ins) ref_ins.push_back(is_floating(t.dtype()) ? t.to(DType::f64) : t);
      Tensor seed16;
      Run low = run_case(c, ins, [&](const Tensor& out) {
        seed16 = test::rand_input(out.shape(), dt, 77);
        return ScaledGrad{seed16, 1.0f};
      });
      Run ref = run_case(c, ref_ins, [&](const Tensor&) { return ScaledGrad{seed16.to(DType::f64), 1.0f}; });
      REQUIRE(low.out.dtype() == dt);
      const double eps = dtype_eps(dt);
      auto compare = [&](const Tensor& got, const Tensor& want, const char* what) {
        REQUIRE(got.shape() == want.shape());
        const double scale = max_abs(want);
        int64_t bad = 0;
        double worst = 0.0;
        for (int64_t j = 0; j < want.numel(); ++j) {
          const double a = got.flat_get(j), b = want.flat_get(j);
          const double tol = c.tol16 * eps * (std::abs(b) + scale);
          worst = std::max(worst, std::abs(a - b) / (eps * (std::abs(b) + scale) + 1e-300));
          if (!(std::abs(a - b) <= tol)) ++bad;
        }
        INFO(what << ": " << bad << " of " << want.numel() << " elements outside tolerance; worst error " << worst
                  << " eps-units (allowed " << c.tol16 << ")");
        CHECK(bad == 0);
      };
      compare(low.out, ref.out, "forward");
      for (size_t i = 0; i < ins.size(); ++i) {
        if (!is_floating(ins[i].dtype())) continue;
        REQUIRE(low.grads[i].has_value());
        REQUIRE(low.grads[i]->g.dtype() == dt);
        compare(low.grads[i]->g, ref.grads[i]->g, "gradient");
      }
    }
  }
}
