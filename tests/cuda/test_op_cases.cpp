// Every op case of the registry (tests/support/op_cases.h) on the GPU against the CPU: the case's
// inputs copied over in the same layout (a strided or permuted input stays strided on the device),
// the same seed gradient, and the forward output and every input gradient compared, in f32, f16
// and bf16. A new op that registers its case in tests/autograd/cases_*.cpp is run here on the
// device with no further test code; the other files in this folder test each kernel family in
// depth (ragged sizes, special values, tolerances derived for the kernel).
//
// Tolerance: |gpu - cpu| <= kTol * eps(dtype) * (|cpu| + max|cpu|), eps the unit roundoff of the
// result's dtype (eps_of) and max|cpu| the largest finite magnitude of that result (an absolute
// floor, as in the 16-bit suite: a difference in an intermediate value may survive a
// cancellation). inf and NaN must sit in the same places. Both devices compute each op in fp32
// from the same inputs and round its output once; they may differ by the order of fp32 sums
// (GEMMs, reductions, batch-norm statistics; the cases are small, sums of a few dozen terms at
// most), by libdevice against glibc in exp, log and pow (up to 2 fp32 ulps, CUDA Programming
// Guide), and for 16-bit results by a rounding boundary that one device's fp32 value falls on one
// side of and the other's on the other (one ulp of the format, at most 2 in these units, carried
// through a backward formula). The test prints the worst error of each dtype: on the emulated
// device (whose exp, log and pow are the host's) f32 reaches 3.0 (softmax backward: sums in a
// different order) and f16 and bf16 0, every result bit for bit. kTol = 8 leaves room for the
// libm differences of a GPU, where this has not run yet, and stays far below what a wrong index,
// a missing term or a wrong scale gives (errors of the order of max|cpu| itself: 1 / (2 eps) and
// more in these units, 128 for bf16).
#include "tests/cuda/cuda_test.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "mixtape.h"
#include "support/op_cases.h"

using namespace mixtape;
using namespace mixtape::cuda_test;
using mixtape::test::CaseRun;
using mixtape::test::OpCase;

namespace {

constexpr double kTol = 8.0;

// Worst |got - want| / (eps (|want| + max|want|)) over the elements; infinity when shapes, dtypes
// or the positions of inf and NaN differ.
double worst_error(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) return INFINITY;
  const std::vector<double> g = on_cpu(got).to_vector(), w = on_cpu(want).to_vector();
  double scale = 0.0;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  const double eps = eps_of(want.dtype());
  double worst = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || !std::isfinite(g[i])) {
      const bool same = (std::isnan(w[i]) && std::isnan(g[i])) || g[i] == w[i];
      if (!same) return INFINITY;
      continue;
    }
    const double denom = eps * (std::fabs(w[i]) + scale);
    const double err = std::fabs(g[i] - w[i]);
    worst = std::max(worst, denom > 0.0 ? err / denom : (err > 0.0 ? INFINITY : 0.0));
  }
  return worst;
}

}  // namespace

TEST_CASE("cuda every op case's forward and gradients match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  std::set<OpId> covered;
  size_t cases = 0;
  std::string report;  // the worst error of each dtype, and where
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    double worst_here = 0.0;
    std::string worst_where = "-";
    for (const OpCase& c : mixtape::test::op_cases()) {
      if (!c.on_device) continue;
      cases += dt == DType::f32;
      const std::string name = c.name + " " + dtype_name(dt);
      INFO("case: " << name);
      const std::vector<Tensor> ins = c.inputs(dt);
      std::vector<Tensor> gins;
      for (const Tensor& t : ins) gins.push_back(same_layout_on(t, gpu()));  // strided inputs stay strided
      Tensor seed;
      const CaseRun want = mixtape::test::run_case(c, ins, [&](const Tensor& out) {
        seed = mixtape::test::rand_input(out.shape(), out.dtype(), 77);
        return ScaledGrad{seed, 1.0f};
      });
      const CaseRun got = mixtape::test::run_case(c, gins, [&](const Tensor&) {
        return ScaledGrad{on_gpu(seed), 1.0f};
      });
      covered.insert(got.ops.begin(), got.ops.end());
      CHECK(got.ops == want.ops);
      REQUIRE(got.out.device() == gpu());

      auto compare = [&](const Tensor& g, const Tensor& w, const std::string& what) {
        const double worst = worst_error(g, w);
        INFO(what << ": got " << g.meta() << ", want " << w.meta() << "; worst error " << worst << " (allowed " << kTol
                  << ")");
        CHECK(worst <= kTol);
        if (worst > worst_here) worst_here = worst, worst_where = c.name + ", " + what;
      };
      compare(got.out, want.out, "forward");
      REQUIRE(got.grads.size() == want.grads.size());
      for (size_t i = 0; i < ins.size(); ++i) {
        if (!is_floating(ins[i].dtype())) continue;
        REQUIRE(want.grads[i].has_value());
        REQUIRE(got.grads[i].has_value());
        CHECK(got.grads[i]->scale == want.grads[i]->scale);
        CHECK(got.grads[i]->g.device() == gpu());
        compare(got.grads[i]->g, want.grads[i]->g, "gradient of input " + std::to_string(i));
      }
    }
    char line[64];
    std::snprintf(line, sizeof line, "; %s worst %.2f (", dtype_name(dt), worst_here);
    report += line + worst_where + ")";
  }
  std::printf(
      "cuda op cases: %zu of %zu differentiable ops run on the device by %zu cases in f32, f16 and bf16; "
      "errors in units of eps (|cpu| + max|cpu|), allowed %g%s\n",
      covered.size(), kNumOps, cases, kTol, report.c_str());
  std::vector<std::string> missing;
  for (size_t k = 0; k < kNumOps; ++k)
    if (!covered.count(OpId(k))) missing.push_back(kOpNames[k]);
  std::string list;
  for (const auto& m : missing) list += m + " ";
  INFO("ops no case ran on the device: " << list);
  CHECK(missing.empty());
}
