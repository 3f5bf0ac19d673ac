// Op cases for elementwise ops, reductions and views (see support/op_cases.h).
#include "support/op_cases.h"

namespace {
using namespace mixtape;
using namespace mixtape::test;
using V = std::vector<Variable>;

// Unary op on a non-contiguous [3, 4] input in (lo, hi) magnitude, away from kinks.
OpCase unary_case(const char* name, std::function<Variable(const Variable&)> f, double lo = 0.2, double hi = 1.5,
                  bool positive = false) {
  return OpCase{name,
                [=](DType dt) {
    Tensor t = positive ? rand_input({3, 4}, dt, 11, lo, hi) : rand_away_from_zero({3, 4}, dt, 11, lo, hi);
    // non-contiguous copy of the same values
    Tensor nc = t.t().contiguous().t();
    return std::vector<Tensor>{nc};
                },
                [f](const V& v) { return f(v[0]); }};
}

MT_OP_CASE(unary_case("neg", [](const Variable& x) { return -x; }));
MT_OP_CASE(unary_case("exp", [](const Variable& x) { return exp(x); }));
MT_OP_CASE(unary_case(
    "log", [](const Variable& x) { return log(x); }, 0.2, 2.0, true));
MT_OP_CASE(unary_case(
    "sqrt", [](const Variable& x) { return sqrt(x); }, 0.2, 2.0, true));
MT_OP_CASE(unary_case("pow 3", [](const Variable& x) { return pow(x, 3.0); }));
MT_OP_CASE(unary_case(
    "pow 0.5", [](const Variable& x) { return pow(x, 0.5); }, 0.2, 2.0, true));
MT_OP_CASE(unary_case("abs", [](const Variable& x) { return abs(x); }));
MT_OP_CASE(unary_case(
    "clamp", [](const Variable& x) { return clamp(x, -1.0, 1.0); }, 0.1, 1.9));
MT_OP_CASE(unary_case("relu", [](const Variable& x) { return relu(x); }));
MT_OP_CASE(unary_case("leaky_relu", [](const Variable& x) { return leaky_relu(x, 0.1); }));
MT_OP_CASE(unary_case("sigmoid", [](const Variable& x) { return sigmoid(x); }));
MT_OP_CASE(unary_case("tanh", [](const Variable& x) { return tanh(x); }));
MT_OP_CASE(unary_case("gelu", [](const Variable& x) { return gelu(x); }));
MT_OP_CASE(unary_case("gelu tanh approximation", [](const Variable& x) { return gelu(x, "tanh"); }));
MT_OP_CASE(unary_case("silu", [](const Variable& x) { return silu(x); }));
MT_OP_CASE(unary_case("elu", [](const Variable& x) { return elu(x, 0.7); }));
MT_OP_CASE(unary_case("softplus", [](const Variable& x) { return softplus(x); }));
// beta x in +-(0.4, 3) against threshold 2: both branches (x where 2x > 2, the log1p form elsewhere).
MT_OP_CASE(unary_case("softplus beta 2 threshold 2", [](const Variable& x) { return softplus(x, 2.0, 2.0); }));
MT_OP_CASE(unary_case(
    "hardtanh", [](const Variable& x) { return hardtanh(x, -1.0, 1.25); }, 0.1, 1.9));
MT_OP_CASE(unary_case("scalar arithmetic", [](const Variable& x) { return ((x + 0.5) * 2.0 - 1.0) / 4.0; }));
MT_OP_CASE(unary_case("reverse scalar arithmetic", [](const Variable& x) { return 2.0 / x + (1.0 - x); }));

OpCase binary_case(const char* name, Shape sa, Shape sb, std::function<Variable(const Variable&, const Variable&)> f) {
  return OpCase{name,
                [=](DType dt) {
    return std::vector<Tensor>{rand_away_from_zero(sa, dt, 21), rand_away_from_zero(sb, dt, 22)};
                },
                [f](const V& v) { return f(v[0], v[1]); }};
}

MT_OP_CASE(binary_case("add broadcast", {3, 4}, {4}, [](auto& a, auto& b) { return a + b; }));
MT_OP_CASE(binary_case("sub broadcast", {3, 1}, {2, 3, 4}, [](auto& a, auto& b) { return a - b; }));
MT_OP_CASE(binary_case("mul broadcast", {2, 1, 4}, {3, 1}, [](auto& a, auto& b) { return a * b; }));
MT_OP_CASE(binary_case("div broadcast", {3, 4}, {3, 1}, [](auto& a, auto& b) { return a / b; }));
MT_OP_CASE(binary_case("mul same shape, used twice (branch)", {3, 4}, {3, 4},
                       [](auto& a, auto& b) { return a * b + a; }));
MT_OP_CASE(OpCase{"mul non-contiguous",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({4, 5}, dt, 1), rand_noncontig({4, 5}, dt, 2)};
                  },
                  [](const V& v) { return v[0] * v[1]; }});

// Reductions
OpCase reduce_case(const char* name, std::function<Variable(const Variable&)> f, bool distinct = false) {
  return OpCase{name,
                [=](DType dt) {
    Tensor t = distinct ? rand_distinct({2, 3, 4}, dt, 31) : rand_input({2, 3, 4}, dt, 31);
    return std::vector<Tensor>{t.permute({2, 0, 1})};  // non-contiguous [4, 2, 3]
                },
                [f](const V& v) { return f(v[0]); }, 8.0};
}
MT_OP_CASE(reduce_case("sum all", [](const Variable& x) { return sum(x); }));
MT_OP_CASE(reduce_case("sum dims {0, 2} keepdim", [](const Variable& x) { return sum(x, {0, 2}, true); }));
MT_OP_CASE(reduce_case("mean dim -1", [](const Variable& x) { return mean(x, {-1}); }));
MT_OP_CASE(reduce_case("mean all", [](const Variable& x) { return mean(x); }));
MT_OP_CASE(reduce_case(
    "max dim 1", [](const Variable& x) { return max(x, {1}); }, true));
MT_OP_CASE(reduce_case(
    "amax dims {0, 1}",
    [](const Variable& x) {
  return amax(x, {0, 1}, true);
    },
    true));
// min, var and std (inputs [4, 2, 3], non-contiguous; var/std also of a broadcast input)
MT_OP_CASE(reduce_case(
    "min dim 0", [](const Variable& x) { return min(x, {0}); }, true));
MT_OP_CASE(reduce_case(
    "min all keepdim", [](const Variable& x) { return min(x, {}, true); }, true));
MT_OP_CASE(reduce_case("var dims {0, 2}, unbiased", [](const Variable& x) { return var(x, {0, 2}); }));
MT_OP_CASE(reduce_case("var all, correction 0, keepdim", [](const Variable& x) { return var(x, {}, 0.0, true); }));
MT_OP_CASE(reduce_case("std dim 1, unbiased", [](const Variable& x) { return mixtape::std(x, {1}); }));
MT_OP_CASE(reduce_case("std dim -1, correction 0, keepdim",
                       [](const Variable& x) { return mixtape::std(x, {-1}, 0.0, true); }));
MT_OP_CASE(OpCase{"var and std of a broadcast input",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({3, 4}, dt, 33)};
                  },
                  [](const V& v) {
  const Variable x = expand(reshape(v[0], {3, 1, 4}), {3, 2, 4});  // stride 0 along dim 1
  return var(x, {0, 1}) + mixtape::std(x, {0});                    // [4] + [2, 4]
}});

// Views
MT_OP_CASE(OpCase{"views: reshape, transpose, permute, slice, expand, contiguous",
                  [](DType dt) {
  return std::vector<Tensor>{rand_noncontig({2, 3, 4}, dt, 41)};
                  },
                  [](const V& v) {
  Variable x = permute(v[0], {2, 0, 1});  // [4, 2, 3]
  x = slice(x, 0, 1, 4, 2);               // [2, 2, 3]
  x = transpose(x, 1, 2);                 // [2, 3, 2]
  x = contiguous(x);
  x = reshape(x, {6, 2});
  x = expand(unsqueeze(x, 0), {3, 6, 2});  // [3, 6, 2]
  return x * x;
}});
MT_OP_CASE(OpCase{"views: select, narrow, flatten, squeeze",
                  [](DType dt) {
  return std::vector<Tensor>{rand_input({3, 1, 4}, dt, 43)};
                  },
                  [](const V& v) {
  Variable x = squeeze(v[0], 1);             // [3, 4]
  Variable a = select(x, 0, 2);              // [4]
  Variable b = flatten(narrow(x, 1, 1, 2));  // [6]
  return sum(a) * b;                         // a used through a broadcast of a scalar
}});
}  // namespace
