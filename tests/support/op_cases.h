// A registry of op test cases shared by four suites:
//   1. central-difference gradient check in f64 (and the count of differentiable ops covered),
//   2. loss-scale exactness: gradients seeded with {S * r, S} equal S x those seeded with {r, 1},
//   3. f16 and bf16 forward and backward against the f64 reference on the same (rounded) inputs
//      (these three: tests/autograd/test_op_cases.cpp),
//   4. on a CUDA device: forward and gradients in f32, f16 and bf16 against the CPU on the same
//      inputs, in the same layouts (tests/cuda/test_op_cases.cpp).
//
// A case builds its inputs for a requested dtype (same values for every dtype, up to rounding;
// i64 inputs such as class labels stay i64) and a function of Variables. The inputs are CPU
// tensors; suite 4 copies them to the device, so a case function that makes tensors of its own
// (batch-norm running statistics) makes them on its inputs' device. Register with
//   MT_OP_CASE("conv2d stride 2", { ...case fields... });
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mixtape.h"
#include "tensor/tensor.h"

namespace mixtape::test {

struct OpCase {
  std::string name;
  // Leaf inputs at `dtype` (floating inputs take the dtype; index inputs stay i64).
  std::function<std::vector<Tensor>(DType dtype)> inputs;
  std::function<Variable(const std::vector<Variable>&)> fn;
  // 16-bit tolerance: |out - ref| <= tol16 * eps(dtype) * (|ref| + ref_scale), where ref_scale is
  // the largest |ref| of that output (an absolute floor, since cancellation is allowed).
  double tol16 = 4.0;
  bool check16 = true;    // some ops (e.g. dropout masks) are compared elsewhere
  double fd_step = 1e-6;  // central-difference step
  double fd_tol = 1e-6;   // |analytic - numeric| <= fd_tol * (1 + |numeric|)
  bool on_device = true;  // false: the case makes f64 tensors, which stay on the CPU (suite 4 skips it)
};

std::vector<OpCase>& op_cases();

struct RegisterOpCase {
  RegisterOpCase(OpCase c) { op_cases().push_back(std::move(c)); }
};

#define MT_OP_CASE_CAT2(a, b) a##b
#define MT_OP_CASE_CAT(a, b) MT_OP_CASE_CAT2(a, b)
#define MT_OP_CASE(...) \
  static ::mixtape::test::RegisterOpCase MT_OP_CASE_CAT(mt_op_case_, __LINE__)(::mixtape::test::OpCase{__VA_ARGS__})

// One forward and backward run of a case: the output, each input's gradient (nullopt for inputs
// that are not floating), and the ops the tape recorded.
struct CaseRun {
  Tensor out;
  std::vector<std::optional<ScaledGrad>> grads;
  std::set<OpId> ops;
};

// Runs c.fn on `inputs` (floating ones require a gradient) under a tape; when the output requires
// a gradient, backward starts from seed(output).
CaseRun run_case(const OpCase& c, const std::vector<Tensor>& inputs,
                 const std::function<ScaledGrad(const Tensor& out)>& seed);

// ---- input makers (deterministic: same seed -> same values, for every dtype) ----

// Uniform values in [lo, hi), generated in f64 and rounded to `dtype`.
Tensor rand_input(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Same values as rand_input, but stored transposed so the returned tensor is non-contiguous
// (last two dims swapped in memory). Needs at least 2 dims.
Tensor rand_noncontig(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Values bounded away from zero in magnitude: sign * [lo, hi) (for log, div, abs kinks...).
Tensor rand_away_from_zero(const Shape& shape, DType dtype, uint64_t seed, double lo = 0.5, double hi = 1.5);
// Distinct values (a shuffled grid), so maxima are unique and 16-bit rounding keeps the order.
Tensor rand_distinct(const Shape& shape, DType dtype, uint64_t seed);
// Integer labels in [0, n).
Tensor rand_labels(const Shape& shape, int64_t n, uint64_t seed);

}  // namespace mixtape::test
