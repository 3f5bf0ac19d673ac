// Checks against PyTorch reference values printed by the tests' reference scripts
// (tests/tensor/*_reference.py, which import tests/tensor/torch_reference_inputs.py for the same
// inputs): inputs exact in every dtype, and the comparison of an op's output and gradients with
// the printed f64 values, so the tests themselves need no torch.
#pragma once

#include "support/catch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "mixtape.h"

namespace mixtape::test {

// x[i] = ((i * 37) % 23 - 11) / 8 and dy[i] = ((i * 11) % 7 - 3) / 4 over the row-major
// positions i, as in the reference scripts.
inline Tensor ref_input(const Shape& s, DType dt = DType::f64) {
  std::vector<double> v(size_t(numel_of(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(int64_t(i * 37 % 23) - 11) / 8.0;
  return from_vector(v, s, dt);
}
inline Tensor ref_grad(const Shape& s, DType dt = DType::f64) {
  std::vector<double> v(size_t(numel_of(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(int64_t(i * 11 % 7) - 3) / 4.0;
  return from_vector(v, s, dt);
}

// Every element of `got` within tol * (1 + |want|) of want; reports how many differ and the worst.
inline void check_values(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(size_t(got.numel()) == want.size());
  const std::vector<double> g = got.to_vector();
  int64_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - want[i]);
    worst = std::max(worst, err);
    if (!(err <= tol * (1.0 + std::abs(want[i])))) ++bad;
  }
  INFO(bad << " of " << g.size() << " elements differ; worst abs error " << worst);
  CHECK(bad == 0);
}

// Same shape, dtype and values (NaN equal to NaN).
inline bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// Runs f on the reference inputs of `shapes` (f64, requiring gradients), backward from the
// reference dy, and compares the output (shape out_shape) and every input's gradient with the
// PyTorch values want[0] (output), want[1 + i] (gradient of input i), within 1e-12 relative.
inline void check_against_torch(const std::vector<Shape>& shapes,
                                const std::function<Variable(const std::vector<Variable>&)>& f, const Shape& out_shape,
                                const std::vector<std::vector<double>>& want) {
  REQUIRE(want.size() == shapes.size() + 1);
  std::vector<Variable> vs;
  for (const Shape& s : shapes) vs.emplace_back(ref_input(s), true);
  Tape tape;
  Variable y = f(vs);
  REQUIRE(y.shape() == out_shape);
  check_values(y.data(), want[0], 1e-12, "output");
  tape.backward(y, ScaledGrad{ref_grad(y.shape()), 1.0f});
  for (size_t i = 0; i < vs.size(); ++i) {
    REQUIRE(vs[i].grad().has_value());
    check_values(vs[i].grad()->unscaled(), want[i + 1], 1e-12, "gradient of input " + std::to_string(i));
  }
}

}  // namespace mixtape::test
