// Tolerance for results accumulated in fp32 on both devices in different orders (GEMM, conv), used
// by test_gemm.cpp and test_conv.cpp, and require_gpu_fp32_accumulated, which runs one op on both
// devices and on the bound's inputs.
//
// Note [GEMM tolerance]
// Each output is x = sum of K products. The CPU (OpenBLAS sgemm) and the GPU (Tensor Cores or FMA
// tiles, split-K) sum in different orders; each fp32 sum has error <= K * u * S with u = 2^-24
// and S = sum |a_k| |b_k| (the classic gamma_K bound), so the two fp32 results differ by at most
// 2 (K + 2) u S (+2: the bias add and a split-K pass). Each is then rounded once to the output
// dtype (error <= eps * |x| each, eps = unit roundoff of the dtype), giving
//   |got - want| <= (2 (K + 2) u + extra) S (1 + eps) + 2 eps |want| + tiny,
// with `extra` the relative error per product of a reduced-precision multiply (TF32: inputs
// rounded to 10 mantissa bits, error <= 2^-10 each even if truncated, so 2^-9 per product; 0
// otherwise) and `tiny` the subnormal spacing of f16 (2^-24) for results near 0. S is computed by
// running the same op in f64 on |inputs| on the CPU.
// For long sums the worst case K u S grows past the signal itself (K = 36864: 4e-3 S against a
// typical |x| ~ S / sqrt(K)), so K is replaced by K_eff = min(K, 16 sqrt(K)): rounding errors of a
// sum behave like a random walk, and the probabilistic bound lambda sqrt(K) u S (Higham and Mary,
// "A new approach to probabilistic rounding error analysis", SISC 2019) fails with probability
// about exp(-lambda^2 / 2); lambda = 16 is far out in that tail, and blocked or split sums (BLAS,
// GPU tiles) are tighter still. `extra` is scaled the same way (independent product errors). Up to
// K = 256 the rigorous bound is used as is. A tiling bug (a missing or doubled K tile, a wrong
// element) gives errors of order sqrt(tile) |a||b| or more, above these bounds.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mixtape.h"
#include "tests/cuda/cuda_test.h"

namespace mixtape::cuda_test {

inline void require_fp32_accumulated(const Tensor& got, const Tensor& want, const Tensor& abs_bound, int64_t K,
                                     const std::string& what, double extra = 0.0) {
  INFO(what << ": got " << got.meta() << ", want " << want.meta() << ", K = " << K);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(abs_bound.shape() == want.shape());
  const std::vector<double> g = on_cpu(got).to_vector(), w = on_cpu(want).to_vector(),
                            s = on_cpu(abs_bound).to_vector();
  const double u = std::ldexp(1.0, -24), eps = eps_of(got.dtype());
  const double tiny = got.dtype() == DType::f16 ? std::ldexp(1.0, -24) : 1e-38;
  size_t bad = 0, first = 0;
  double worst = 0.0;
  const double k_eff = std::min(double(K), 16.0 * std::sqrt(double(K)));
  const double extra_eff = K > 0 ? extra * k_eff / double(K) : extra;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = (2.0 * (k_eff + 2.0) * u + extra_eff) * s[i] * (1.0 + eps) + 2.0 * eps * std::fabs(w[i]) + tiny;
    const double err = std::fabs(g[i] - w[i]);
    const bool ok = err <= tol;  // false for NaN
    worst = std::max(worst, err / tol);
    if (!ok && bad++ == 0) first = i;
  }
  INFO("worst error / tolerance " << worst);
  if (bad) {
    INFO(bad << " of " << g.size() << " elements out of tolerance; first at " << first << ": got " << g[first]
             << ", want " << w[first] << ", sum|a||b| " << s[first]);
    CHECK(bad == 0);
  }
}

// |t| in f64 on the CPU (for the bound S).
inline Tensor abs64(const Tensor& t) { return abs(on_cpu(t).to(DType::f64)); }

// One GEMM-like op written once and checked on the GPU: `op` maps a list of tensors to its
// result and runs three times, on the GPU copies of `inputs` (each in the layout it has on the
// CPU: a transposed or strided input stays so), on `inputs` themselves (the CPU reference), and on
// |inputs| in f64 (the bound S); the first two are compared by require_fp32_accumulated with K
// products per output. An undefined input (no bias) stays undefined in all three.
template <class Op>
void require_gpu_fp32_accumulated(const Op& op, const std::vector<Tensor>& inputs, int64_t K, const std::string& what,
                                  double extra = 0.0) {
  std::vector<Tensor> on_device, magnitudes;
  for (const Tensor& t : inputs) {
    on_device.push_back(t.defined() ? same_layout_on(t, gpu()) : Tensor());
    magnitudes.push_back(t.defined() ? abs64(t) : Tensor());
  }
  require_fp32_accumulated(op(on_device), op(inputs), op(magnitudes), K, what, extra);
}

}  // namespace mixtape::cuda_test
