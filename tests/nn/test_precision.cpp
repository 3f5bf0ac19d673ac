// nn/precision.h: policy names and dtypes, every entry of the fp32 allow-list (Note [The fp32
// allow-list]) checked by what its rule promises, and apply_precision.
//
// The accumulate entries are checked on inputs built so that "computed exactly, rounded once"
// and "accumulated in the 16-bit format" give different answers. With p = 11 for f16 and p = 8
// for bf16 the spacing of the format at 2^p is 2, so
//   2^p + 1 + 1 + 1 accumulated left to right in 16 bits: each 2^p + 1 is a tie, rounds to 2^p;
//   the exact 2^p + 3 rounded once: a tie between 2^p + 2 and 2^p + 4, rounds to 2^p + 4.
// Every product and partial sum of these inputs is exact in fp32, so an fp32 accumulator gives
// the exact value and the op must match the exact result rounded once bit for bit.
#include "support/catch.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mixtape;

namespace {

const DType k16[] = {DType::f16, DType::bf16};

// A double rounded once to the 16-bit format (RNE), as a double.
double round_once(double v, DType dt) {
  return dt == DType::f16 ? double(to_float(round_to_half_f64(v))) : double(to_float(round_to_bf16_f64(v)));
}

// The exponent at which the spacing of `dt` is 2 (see the file comment).
int spacing2_exp(DType dt) { return dt == DType::f16 ? 11 : 8; }

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> b(size_t(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.raw_data(), b.size());
  return b;
}

// The node of `op` on the tape whose first input is x, or nullptr.
const Node* find_node(const Tape& tape, OpId op, const Variable& x) {
  for (const auto& n : tape.nodes())
    if (n->op == op && !n->inputs.empty() && n->inputs[0] == x.ptr()) return n.get();
  return nullptr;
}

bool has_node(const Tape& tape, OpId op) {
  for (const auto& n : tape.nodes())
    if (n->op == op) return true;
  return false;
}

// ---- cast_input entries ---------------------------------------------------------------------

// f(x) on a 16-bit leaf x must: cast x to f32 with a `cast` node on the tape, return f32, and
// equal f on x's values in f32 exactly (the cast to f32 is exact, so nothing else may differ).
// A scalar result is also differentiated: x's gradient comes back in x's dtype, the f32
// gradient rounded once.
void check_cast_input(OpId op, const std::function<Variable(const Variable&)>& f, const Tensor& x32) {
  for (DType dt : k16) {
    INFO(op_name(op) << " on " << dtype_name(dt));
    Variable x(x32.to(dt), true, "x");
    Variable ref_x(x.data().to(DType::f32), true, "ref_x");
    Variable out, ref;
    {
      Tape tape;
      out = f(x);
      const Node* cast_node = find_node(tape, OpId::cast, x);
      REQUIRE(cast_node != nullptr);
      CHECK(cast_node->output_dtypes.at(0) == DType::f32);
      CHECK(has_node(tape, op));
      CHECK(out.dtype() == DType::f32);
      if (out.numel() == 1) tape.backward(out);
    }
    {
      Tape tape;
      ref = f(ref_x);
      CHECK_FALSE(has_node(tape, OpId::cast));  // f32 passes through fp32_input unchanged
      if (ref.numel() == 1) tape.backward(ref);
    }
    CHECK(bytes_of(out.data()) == bytes_of(ref.data()));
    if (out.numel() == 1) {
      REQUIRE(x.grad().has_value());
      REQUIRE(ref_x.grad().has_value());
      CHECK(x.grad()->g.dtype() == dt);
      CHECK(bytes_of(x.grad()->g) == bytes_of(ref_x.grad()->g.to(dt)));
    }
  }
}

// ---- accumulate entries ---------------------------------------------------------------------

// A [M, K] x B [K, N] product whose first entry separates rounding once from 16-bit
// accumulation (file comment); the other entries are ordinary small values.
struct Gemm {
  int64_t M = 3, K = 4, N = 2;
  std::vector<double> a, b;  // row-major
  explicit Gemm(DType dt) {
    const double big = std::ldexp(1.0, spacing2_exp(dt));
    a = {big, 1,     1, 1,    //
         0.5, -0.25, 3, 1.5,  //
         1,   1,     1, big};
    b = {1, 1,    //
         1, 0.5,  //
         1, 0.5,  //
         1, 0.5};
  }
  double exact(int64_t m, int64_t n, double bias = 0.0) const {
    double s = bias;
    for (int64_t k = 0; k < K; ++k) s += a[size_t(m * K + k)] * b[size_t(k * N + n)];
    return s;
  }
  // The products summed left to right with every partial sum rounded to `dt`.
  double naive(int64_t m, int64_t n, DType dt) const {
    double s = 0.0;
    for (int64_t k = 0; k < K; ++k) s = round_once(s + a[size_t(m * K + k)] * b[size_t(k * N + n)], dt);
    return s;
  }
  std::vector<double> b_transposed() const {  // [N, K], a Linear weight
    std::vector<double> t(size_t(N * K));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) t[size_t(n * K + k)] = b[size_t(k * N + n)];
    return t;
  }
};

// y [M, N] (any shape with M * N elements in row-major order m, n) equals the exact product
// (plus bias) rounded once, and differs from 16-bit accumulation at (0, 0).
void check_gemm_result(const Tensor& y, const Gemm& g, DType dt, const std::vector<double>& bias = {}) {
  REQUIRE(y.dtype() == dt);
  REQUIRE(y.numel() == g.M * g.N);
  const std::vector<double> got = y.to_vector();
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      const double want = round_once(g.exact(m, n, bias.empty() ? 0.0 : bias[size_t(n)]), dt);
      INFO("(" << m << ", " << n << ")");
      CHECK(got[size_t(m * g.N + n)] == want);
    }
  // What 16-bit accumulation (and a bias added after the rounding) would have given instead.
  const double b0 = bias.empty() ? 0.0 : bias[0];
  CHECK(g.naive(0, 0, dt) == std::ldexp(1.0, spacing2_exp(dt)));
  CHECK(got[0] != round_once(g.naive(0, 0, dt) + b0, dt));
}

}  // namespace

TEST_CASE("precision names round-trip and an unknown name lists the choices", "[precision]") {
  const std::vector<std::pair<nn::Precision, std::string>> all = {
      {nn::Precision::fp32, "fp32"},           {nn::Precision::fp16, "fp16"},           {nn::Precision::bf16, "bf16"},
      {nn::Precision::fp16_pure, "fp16-pure"}, {nn::Precision::bf16_pure, "bf16-pure"}, {nn::Precision::fp8, "fp8"}};
  for (const auto& [p, name] : all) {
    CHECK(std::string(nn::precision_name(p)) == name);
    CHECK(nn::precision_from_name(name) == p);
  }
  for (const char* bad : {"e4m3", "FP16", "bf16_pure", ""}) {
    INFO(bad);
    CHECK_THROWS_WITH(nn::precision_from_name(bad),
                      Catch::Contains("unknown precision policy '" + std::string(bad) + "'") &&
                          Catch::Contains("fp32, fp16, bf16, fp16-pure, bf16-pure, fp8"));
  }
}

TEST_CASE("each policy has its compute and parameter dtypes", "[precision]") {
  struct Row {
    nn::Precision p;
    DType compute, params;
    bool pure, is16;
  };
  for (const Row& r : {Row{nn::Precision::fp32, DType::f32, DType::f32, false, false},
                       Row{nn::Precision::fp16, DType::f16, DType::f32, false, true},
                       Row{nn::Precision::bf16, DType::bf16, DType::f32, false, true},
                       Row{nn::Precision::fp16_pure, DType::f16, DType::f16, true, true},
                       Row{nn::Precision::bf16_pure, DType::bf16, DType::bf16, true, true}}) {
    INFO(nn::precision_name(r.p));
    CHECK(nn::compute_dtype(r.p) == r.compute);
    CHECK(nn::param_dtype(r.p) == r.params);
    CHECK(nn::is_pure(r.p) == r.pure);
    CHECK(nn::is_16bit(r.p) == r.is16);
  }
}

TEST_CASE("fp32_input casts 16-bit inputs of cast_input entries only", "[precision]") {
  Variable x16(from_vector(std::vector<double>{1, -2, 3}, {3}, DType::f16), true);
  Variable x32(from_vector(std::vector<double>{1, -2, 3}, {3}, DType::f32), true);
  Tape tape;
  CHECK(nn::fp32_input(OpId::cross_entropy, x32).same(x32));
  CHECK(tape.size() == 0);
  const Variable c = nn::fp32_input(OpId::mse_loss, x16);
  CHECK(c.dtype() == DType::f32);
  CHECK(find_node(tape, OpId::cast, x16) != nullptr);
  // Not on the list, or on it with another rule: the cast is not what keeps them in fp32.
  for (OpId op : {OpId::relu, OpId::linear, OpId::sum, OpId::batch_norm}) {
    INFO(op_name(op));
    CHECK_THROWS_WITH(nn::fp32_input(op, x16), Catch::Contains(std::string("'") + op_name(op) +
                                                               "' is not an op whose input the fp32 allow-list casts"));
  }
  CHECK_FALSE(nn::on_fp32_allow_list(OpId::relu));
  CHECK_THROWS_WITH(nn::fp32_input(OpId::softmax, Variable()), Catch::Contains("undefined"));
}

TEST_CASE("every entry of the fp32 allow-list keeps its op in fp32", "[precision]") {
  // One check per entry; an entry added to the list without a check here fails below.
  std::map<OpId, std::function<void()>> checks;

  // cast_input: the loss modules and nn::Softmax / nn::LogSoftmax.
  Generator gen(3);
  const Tensor logits = normal({4, 5}, 0.0, 2.0, gen);
  const Tensor labels = from_vector(std::vector<int64_t>{0, 4, 2, 2}, {4});
  const Tensor probs = uniform({4, 5}, 0.0, 1.0, gen);
  checks[OpId::softmax] = [&] {
    nn::Softmax m(1);
    check_cast_input(
        OpId::softmax, [&](const Variable& x) { return m(x); }, logits);
  };
  checks[OpId::log_softmax] = [&] {
    nn::LogSoftmax m(-1);
    check_cast_input(
        OpId::log_softmax, [&](const Variable& x) { return m(x); }, logits);
  };
  checks[OpId::cross_entropy] = [&] {
    nn::CrossEntropyLoss loss;
    check_cast_input(
        OpId::cross_entropy, [&](const Variable& x) { return loss(x, labels); }, logits);
  };
  checks[OpId::bce_with_logits] = [&] {
    nn::BCEWithLogitsLoss loss;
    check_cast_input(
        OpId::bce_with_logits, [&](const Variable& x) { return loss(x, probs); }, logits);
  };
  checks[OpId::mse_loss] = [&] {
    nn::MSELoss loss;
    check_cast_input(
        OpId::mse_loss, [&](const Variable& x) { return loss(x, probs); }, logits);
  };
  checks[OpId::nll_loss] = [&] {
    nn::NLLLoss loss(Reduction::mean, {from_vector(std::vector<double>{1, 2, 1, 0.5, 1}, {5}), 4, 0.0});
    check_cast_input(
        OpId::nll_loss, [&](const Variable& x) { return loss(x, labels); }, log_softmax(logits, 1));
  };
  checks[OpId::binary_cross_entropy] = [&] {
    nn::BCELoss loss;
    check_cast_input(
        OpId::binary_cross_entropy, [&](const Variable& x) { return loss(x, probs); },
        uniform({4, 5}, 0.01, 0.99, gen));
  };
  checks[OpId::l1_loss] = [&] {
    nn::L1Loss loss;
    check_cast_input(
        OpId::l1_loss, [&](const Variable& x) { return loss(x, probs); }, logits);
  };
  checks[OpId::smooth_l1_loss] = [&] {
    nn::SmoothL1Loss loss(Reduction::sum, 0.5);
    check_cast_input(
        OpId::smooth_l1_loss, [&](const Variable& x) { return loss(x, probs); }, logits);
  };

  // accumulate: sum and mean of 4096 ones and the values k 2^-10, k = 1..1000 (as the format
  // holds them). Accumulated in 16 bits the ones alone stall at 2^p (2048 in f16, 256 in bf16),
  // where + 1 is a tie that rounds back down; the op must give the exact sum rounded once.
  auto reduction_input = [](DType dt) {
    std::vector<double> v(4096, 1.0);
    for (int k = 1; k <= 1000; ++k) v.push_back(k * std::ldexp(1.0, -10));
    return from_vector(v, {int64_t(v.size())}, dt);
  };
  auto naive_sum = [](const std::vector<double>& v, DType dt) {
    double s = 0.0;
    for (double x : v) s = round_once(s + x, dt);
    return s;
  };
  auto check_reduction = [&](OpId op, bool is_mean) {
    for (DType dt : k16) {
      INFO(op_name(op) << " on " << dtype_name(dt));
      Variable x(reduction_input(dt), true);
      const std::vector<double> v = x.data().to_vector();
      double exact = 0.0;  // exact in f64: every value is a multiple of 2^-17 below 2^13
      for (double e : v) exact += e;
      if (is_mean) exact /= double(v.size());
      Tape tape;
      const Variable y = is_mean ? mean(x) : sum(x);
      CHECK(has_node(tape, op));
      REQUIRE(y.dtype() == dt);
      CHECK(y.item() == round_once(exact, dt));
      const double naive = is_mean ? round_once(naive_sum(v, dt) / double(v.size()), dt) : naive_sum(v, dt);
      CHECK(naive != round_once(exact, dt));
    }
  };
  checks[OpId::sum] = [&] { check_reduction(OpId::sum, false); };
  checks[OpId::mean] = [&] { check_reduction(OpId::mean, true); };

  // var and std of the same values: two passes in f64 and one rounding (Note [Variance] in
  // tensor/cpu/reduce.h). The same two passes in 16 bits lose the mean to the stalled running
  // sum above, and the variance with it.
  auto check_variance = [&](OpId op, bool take_sqrt) {
    for (DType dt : k16) {
      INFO(op_name(op) << " on " << dtype_name(dt));
      Variable x(reduction_input(dt), true);
      const std::vector<double> v = x.data().to_vector();
      const double n = double(v.size());
      double sum = 0.0, m2 = 0.0;
      for (double e : v) sum += e;
      for (double e : v) m2 += (e - sum / n) * (e - sum / n);
      const double exact = take_sqrt ? std::sqrt(m2 / (n - 1.0)) : m2 / (n - 1.0);
      Tape tape;
      const Variable y = take_sqrt ? mixtape::std(x) : var(x);
      CHECK(has_node(tape, op));
      REQUIRE(y.dtype() == dt);
      CHECK(y.item() == round_once(exact, dt));
      const double naive_mean = round_once(naive_sum(v, dt) / n, dt);
      double naive_m2 = 0.0;
      for (double e : v) {
        const double d = round_once(e - naive_mean, dt);
        naive_m2 = round_once(naive_m2 + round_once(d * d, dt), dt);
      }
      double naive = round_once(naive_m2 / (n - 1.0), dt);
      if (take_sqrt) naive = round_once(std::sqrt(naive), dt);
      CHECK(naive != round_once(exact, dt));
    }
  };
  checks[OpId::var] = [&] { check_variance(OpId::var, false); };
  checks[OpId::std] = [&] { check_variance(OpId::std, true); };

  // batch_norm: f32 running statistics equal to the f32 computation on the same values. Channel
  // 2 holds +-2000: 64 x 2000^2 = 2.56e8 would overflow an f16 sum of squares.
  checks[OpId::batch_norm] = [&] {
    const int64_t N = 64, C = 3;
    std::vector<double> v(size_t(N * C));
    for (int64_t i = 0; i < N; ++i) {
      v[size_t(i * C + 0)] = 300.0 + 0.25 * double(i);             // large mean, small spread
      v[size_t(i * C + 1)] = std::ldexp(double(i % 7) - 3.0, -9);  // small values
      v[size_t(i * C + 2)] = (i % 2 ? 2000.0 : -2000.0) + double(i % 5);
    }
    for (DType dt : k16) {
      INFO("batch_norm on " << dtype_name(dt));
      const Tensor x16 = from_vector(v, {N, C}, dt);
      const Tensor x32 = x16.to(DType::f32);  // the same values
      nn::BatchNorm1d bn16(C), bn32(C);
      Variable y16, y32;
      {
        Tape tape;
        Variable in(x16, true);
        y16 = bn16(in);
        CHECK(has_node(tape, OpId::batch_norm));
      }
      y32 = bn32(x32);
      REQUIRE(y16.dtype() == dt);
      REQUIRE(bn16.running_mean().dtype() == DType::f32);
      REQUIRE(bn16.running_var().dtype() == DType::f32);
      CHECK(bn16.weight.dtype() == DType::f32);
      // The hand-computed running statistics after one step from (0, 1) with momentum 0.1.
      const std::vector<double> rm16 = bn16.running_mean().to_vector(), rv16 = bn16.running_var().to_vector();
      const std::vector<double> rm32 = bn32.running_mean().to_vector(), rv32 = bn32.running_var().to_vector();
      const std::vector<double> xs = x32.to_vector();
      for (int64_t c = 0; c < C; ++c) {
        INFO("channel " << c);
        double m = 0.0, ss = 0.0;
        for (int64_t i = 0; i < N; ++i) m += xs[size_t(i * C + c)];
        m /= double(N);
        for (int64_t i = 0; i < N; ++i) ss += (xs[size_t(i * C + c)] - m) * (xs[size_t(i * C + c)] - m);
        const double want_mean = 0.1 * m, want_var = 0.9 + 0.1 * ss / double(N - 1);
        CHECK(rm16[size_t(c)] == rm32[size_t(c)]);
        CHECK(rv16[size_t(c)] == rv32[size_t(c)]);
        CHECK(std::abs(rm16[size_t(c)] - want_mean) <= 1e-6 * std::abs(want_mean) + 1e-12);
        CHECK(std::abs(rv16[size_t(c)] - want_var) <= 1e-6 * want_var);
      }
      // The normalized output: the f32 result rounded once.
      CHECK(bytes_of(y16.data()) == bytes_of(y32.data().to(dt)));
    }
  };

  // layer_norm and group_norm through their modules: groups of a large mean and a small spread
  // (a 16-bit sum would lose the spread) and of +-2000 (16 x 2000^2 overflows an f16 sum of
  // squares). y must be the f32 computation on the same values rounded once, and the f32
  // parameters' gradients must come back in f32.
  auto check_norm = [&](OpId op, nn::UnaryModule& m16, nn::UnaryModule& m32, const Shape& shape) {
    std::vector<double> v(size_t(numel_of(shape)));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = i < v.size() / 2 ? 300.0 + 0.25 * double(i % 8) : (i % 2 ? 2000.0 : -2000.0) + double(i % 5);
    for (DType dt : k16) {
      INFO(op_name(op) << " on " << dtype_name(dt));
      const Tensor x16 = from_vector(v, shape, dt);
      Variable y16;
      {
        Tape tape;
        y16 = m16(Variable(x16, true));
        CHECK(has_node(tape, op));
        tape.backward(sum(y16 * y16));
      }
      const Variable y32 = m32(Variable(x16.to(DType::f32)));
      REQUIRE(y16.dtype() == dt);
      CHECK(bytes_of(y16.data()) == bytes_of(y32.data().to(dt)));
      for (const Variable& p : m16.parameters()) {
        REQUIRE(p.grad().has_value());
        CHECK(p.grad()->g.dtype() == DType::f32);
      }
      m16.zero_grad();
    }
  };
  checks[OpId::layer_norm] = [&] {
    nn::LayerNorm m16({16}), m32({16});
    check_norm(OpId::layer_norm, m16, m32, {4, 16});
  };
  checks[OpId::group_norm] = [&] {
    nn::GroupNorm m16(2, 4), m32(2, 4);
    check_norm(OpId::group_norm, m16, m32, {4, 4, 2, 2});
  };

  // The GEMM-like ops on the Gemm inputs, each through its differentiable op.
  checks[OpId::matmul] = [&] {
    for (DType dt : k16) {
      INFO("matmul on " << dtype_name(dt));
      const Gemm g(dt);
      Variable a(from_vector(g.a, {g.M, g.K}, dt), true), b(from_vector(g.b, {g.K, g.N}, dt), true);
      Tape tape;
      const Variable y = matmul(a, b);
      CHECK(has_node(tape, OpId::matmul));
      check_gemm_result(y.data(), g, dt);
    }
  };
  checks[OpId::bmm] = [&] {
    for (DType dt : k16) {
      INFO("bmm on " << dtype_name(dt));
      const Gemm g(dt);
      Variable a(from_vector(g.a, {1, g.M, g.K}, dt), true), b(from_vector(g.b, {1, g.K, g.N}, dt), true);
      Tape tape;
      const Variable y = bmm(a, b);
      CHECK(has_node(tape, OpId::bmm));
      check_gemm_result(y.data(), g, dt);
    }
  };
  checks[OpId::linear] = [&] {
    // nn::Linear with f32 parameters on a 16-bit input (the mixed policies' path): the weights
    // are cast to the input's dtype and the bias is added before the one rounding.
    for (DType dt : k16) {
      INFO("linear on " << dtype_name(dt));
      const Gemm g(dt);
      const std::vector<double> bias = {2.0, -1.0};
      nn::Linear lin(g.K, g.N);
      lin.weight.set_data(from_vector(g.b_transposed(), {g.N, g.K}, DType::f32));
      lin.bias.set_data(from_vector(bias, {g.N}, DType::f32));
      Tape tape;
      const Variable y = lin(from_vector(g.a, {g.M, g.K}, dt));
      CHECK(has_node(tape, OpId::linear));
      check_gemm_result(y.data(), g, dt, bias);
    }
  };
  checks[OpId::conv2d] = [&] {
    // 1x1 kernels over K channels: out[m, n] = sum_k x[m, k] w[n, k].
    for (DType dt : k16) {
      INFO("conv2d on " << dtype_name(dt));
      const Gemm g(dt);
      Variable x(from_vector(g.a, {g.M, g.K, 1, 1}, dt), true),
          w(from_vector(g.b_transposed(), {g.N, g.K, 1, 1}, dt), true);
      Tape tape;
      const Variable y = conv2d(x, w);
      CHECK(has_node(tape, OpId::conv2d));
      check_gemm_result(y.data(), g, dt);
    }
  };
  checks[OpId::conv_transpose2d] = [&] {
    // w [IC = K, OC = N, 1, 1]: out[m, n] = sum_k x[m, k] w[k, n].
    for (DType dt : k16) {
      INFO("conv_transpose2d on " << dtype_name(dt));
      const Gemm g(dt);
      Variable x(from_vector(g.a, {g.M, g.K, 1, 1}, dt), true), w(from_vector(g.b, {g.K, g.N, 1, 1}, dt), true);
      Tape tape;
      const Variable y = conv_transpose2d(x, w);
      CHECK(has_node(tape, OpId::conv_transpose2d));
      check_gemm_result(y.data(), g, dt);
    }
  };

  std::set<OpId> listed;
  for (const nn::Fp32ListEntry& e : nn::kFp32AllowList) {
    INFO("allow-list entry " << op_name(e.op));
    CHECK(nn::on_fp32_allow_list(e.op));
    listed.insert(e.op);
    const auto it = checks.find(e.op);
    REQUIRE(it != checks.end());
    // The rule decides what fp32_input does with the op.
    if (e.rule == nn::Fp32Rule::cast_input) CHECK_NOTHROW(nn::fp32_input(e.op, Variable(zeros({2}, DType::f16))));
    else CHECK_THROWS(nn::fp32_input(e.op, Variable(zeros({2}, DType::f16))));
    it->second();
  }
  CHECK(listed.size() == checks.size());  // no check for an op the list does not name
}

TEST_CASE("apply_precision: pure policies store parameters in 16 bits, batch-norm buffers stay f32", "[precision]") {
  auto make = [] {
    Generator gen(1);
    return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 6, true, gen),
                                            std::make_shared<nn::BatchNorm1d>(6), std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(6, 2, true, gen));
  };
  for (nn::Precision p : {nn::Precision::fp32, nn::Precision::fp16, nn::Precision::bf16, nn::Precision::fp16_pure,
                          nn::Precision::bf16_pure}) {
    INFO(nn::precision_name(p));
    auto model = make();
    const std::vector<Variable> before = model->parameters();
    std::vector<std::vector<double>> values;
    for (const Variable& v : before) values.push_back(v.data().to_vector());
    std::vector<std::vector<uint8_t>> bytes;
    for (const Variable& v : before) bytes.push_back(bytes_of(v.data()));

    nn::apply_precision(*model, p);
    const std::vector<Variable> after = model->parameters();
    REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      INFO(after[i].name());
      CHECK(after[i].same(before[i]));  // the optimizer's Variables stay valid
      CHECK(after[i].dtype() == nn::param_dtype(p));
      if (nn::is_pure(p)) {
        std::vector<double> want = values[i];
        for (double& w : want) w = round_once(w, nn::param_dtype(p));
        CHECK(after[i].data().to_vector() == want);
      } else {
        CHECK(bytes_of(after[i].data()) == bytes[i]);  // mixed and fp32: the model is left as it is
      }
    }
    for (const auto& [name, t] : model->named_buffers()) {
      INFO(name);
      CHECK(t.dtype() == (name.find("num_batches_tracked") != std::string::npos ? DType::i64 : DType::f32));
    }
  }
}

TEST_CASE("BCELoss on 16-bit probabilities: the overflow of Note [BCE on probabilities] and its remedy",
          "[precision]") {
  // A confident wrong discriminator: p = sigmoid(-8) = 3.4e-4 for a real sample (t = 1), 64
  // samples, loss scale 2^16. dL/dp = -1 / (64 p) x 2^16 = -3.0e6: beyond f16's 65504.
  const double S = 65536.0;
  const Tensor logits32 = full({64, 1}, -8.0, DType::f32), real = ones({64, 1});
  nn::BCELoss loss;
  {  // 16-bit sigmoid, then BCELoss: the gradient into the sigmoid overflows when rounded to f16
    Variable z(logits32.to(DType::f16), true);
    Tape tape;
    const Variable l = loss(sigmoid(z), real);
    CHECK(l.dtype() == DType::f32);
    tape.backward(l, ScaledGrad{full({}, S), float(S)});
    REQUIRE(z.grad().has_value());
    CHECK(std::isinf(z.grad()->g.flat_get(0)));
  }
  {  // the remedy: the sigmoid in fp32 too (cast first); what crosses the cast is (p - t) g
    Variable z(logits32.to(DType::f16), true);
    Tape tape;
    const Variable l = loss(sigmoid(cast(z, DType::f32)), real);
    tape.backward(l, ScaledGrad{full({}, S), float(S)});
    REQUIRE(z.grad().has_value());
    const double want = (1.0 / (1.0 + std::exp(8.0)) - 1.0) / 64.0 * S;  // (p - 1) / n x S
    CHECK(z.grad()->g.flat_get(0) == Approx(want).epsilon(2e-3));
  }
}
