#include "support/op_cases.h"

#include <algorithm>
#include <numeric>

namespace mixtape::test {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

CaseRun run_case(const OpCase& c, const std::vector<Tensor>& inputs,
                 const std::function<ScaledGrad(const Tensor& out)>& seed) {
  CaseRun r;
  std::vector<Variable> vs;
  for (const Tensor& t : inputs) vs.emplace_back(t, is_floating(t.dtype()));
  {
    Tape tape;
    Variable out = c.fn(vs);
    for (const auto& n : tape.nodes()) r.ops.insert(n->op);
    r.out = out.data();
    if (out.requires_grad()) tape.backward(out, seed(out.data()));
  }
  for (const Variable& v : vs) r.grads.push_back(v.grad());
  return r;
}

Tensor rand_input(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return uniform(shape, lo, hi, g, DType::f64).to(dtype);
}

Tensor rand_noncontig(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  const size_t n = shape.size();
  Shape swapped = shape;
  std::swap(swapped[n - 1], swapped[n - 2]);
  // Store the transpose contiguously, then view it back: same logical values as rand_input.
  Tensor base = rand_input(shape, DType::f64, seed, lo, hi).transpose(int64_t(n) - 1, int64_t(n) - 2).contiguous();
  return base.to(dtype).transpose(int64_t(n) - 1, int64_t(n) - 2);
}

Tensor rand_away_from_zero(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  Tensor mag = uniform(shape, lo, hi, g, DType::f64);
  Tensor sign = bernoulli(shape, 0.5, g, DType::f64);
  for (int64_t i = 0; i < mag.numel(); ++i) mag.flat_set(i, mag.flat_get(i) * (sign.flat_get(i) > 0 ? 1.0 : -1.0));
  return mag.to(dtype);
}

Tensor rand_distinct(const Shape& shape, DType dtype, uint64_t seed) {
  const int64_t n = numel_of(shape);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  Generator g(seed);
  Tensor u = uniform({n}, 0.0, 1.0, g, DType::f64);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return u.flat_get(a) < u.flat_get(b); });
  // Multiples of 1/16 centred on 0 stay exact in bf16 while |k| <= 256.
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(perm[size_t(i)] - n / 2) / 16.0;
  return from_vector(v, shape, DType::f64).to(dtype);
}

Tensor rand_labels(const Shape& shape, int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor u = uniform(shape, 0.0, double(n), g, DType::f64);
  std::vector<int64_t> v(static_cast<size_t>(u.numel()));
  for (int64_t i = 0; i < u.numel(); ++i) v[size_t(i)] = std::min<int64_t>(n - 1, int64_t(u.flat_get(i)));
  return from_vector(v, shape);
}

}  // namespace mixtape::test
