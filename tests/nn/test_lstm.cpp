// LSTM module: forward against a hand-unrolled computation with the lstm_cell op, layouts,
// states, dropout modes and validation.
#include "support/catch.h"

#include <cmath>

#include "mixtape.h"
#include "nn/nn.h"

using namespace mixtape;
using Catch::Contains;

namespace {

Tensor randn(const Shape& s, uint64_t seed, DType dt = DType::f64) {
  Generator g(seed);
  return normal(s, 0.0, 1.0, g, dt);
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double d = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::abs(a.flat_get(i) - b.flat_get(i)));
  return d;
}

struct Unrolled {
  Tensor output;  // [T, B, H]
  Tensor h_n, c_n;
};

// The textbook recurrence, one step at a time on plain tensors: per layer and step,
// gates = x_t W_ih^T + b_ih + h W_hh^T + b_hh, then (c, h) = lstm_cell(gates, c).
Unrolled unroll(const nn::LSTM& lstm, const Tensor& x_tbi, const Tensor& h0, const Tensor& c0) {
  const int64_t T = x_tbi.size(0), L = lstm.options().num_layers;
  Tensor in = x_tbi;
  std::vector<Tensor> hs, cs;
  for (int64_t l = 0; l < L; ++l) {
    const auto& p = lstm.layers()[size_t(l)];
    Tensor h = h0.select(0, l).contiguous(), c = c0.select(0, l).contiguous();
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor gates = linear(in.select(0, t).contiguous(), p.weight_ih.data(), p.bias_ih.data()) +
                           linear(h, p.weight_hh.data(), p.bias_hh.data());
      LstmCellResult<Tensor> r = lstm_cell(gates, c);
      c = r.c;
      h = r.h;
      outs.push_back(h);
    }
    hs.push_back(h);
    cs.push_back(c);
    in = stack(outs, 0);
  }
  return {in, stack(hs, 0), stack(cs, 0)};
}

}  // namespace

TEST_CASE("LSTM forward equals the hand-unrolled lstm_cell recurrence", "[nn][lstm]") {
  Generator gen(17);
  const int64_t T = 4, B = 3, I = 5, H = 6, L = 2;
  nn::LSTM lstm(I, H, L, true, false, 0.0, false, gen);
  lstm.to(DType::f64);
  const Tensor x = randn({T, B, I}, 1);
  const Tensor h0 = randn({L, B, H}, 2), c0 = randn({L, B, H}, 3);

  SECTION("time-major with an initial state") {
    auto [out, state] = lstm(Variable(x), nn::LSTMState{Variable(h0), Variable(c0)});
    const Unrolled ref = unroll(lstm, x, h0, c0);
    CHECK(max_diff(out.data(), ref.output) < 1e-13);
    CHECK(max_diff(state.h.data(), ref.h_n) < 1e-13);
    CHECK(max_diff(state.c.data(), ref.c_n) < 1e-13);
    // h_n of the last layer is the last output step.
    CHECK(max_diff(state.h.data().select(0, L - 1), out.data().select(0, T - 1)) == 0.0);
  }
  SECTION("zero initial state by default") {
    auto [out, state] = lstm(Variable(x));
    const Unrolled ref = unroll(lstm, x, zeros({L, B, H}, DType::f64), zeros({L, B, H}, DType::f64));
    CHECK(max_diff(out.data(), ref.output) < 1e-13);
    CHECK(max_diff(state.c.data(), ref.c_n) < 1e-13);
  }
  SECTION("batch_first gives the transposed layout and the same numbers") {
    nn::LSTM bf(I, H, L, true, true, 0.0, false, gen);
    bf.to(DType::f64);
    bf.load_state_dict(lstm.state_dict());
    auto [out, state] = bf(Variable(x.transpose(0, 1).contiguous()), nn::LSTMState{Variable(h0), Variable(c0)});
    const Unrolled ref = unroll(lstm, x, h0, c0);
    CHECK(out.shape() == Shape{B, T, H});
    CHECK(max_diff(out.data().transpose(0, 1), ref.output) < 1e-13);
    CHECK(max_diff(state.h.data(), ref.h_n) < 1e-13);
  }
  SECTION("carrying the state over two chunks equals one pass over the whole sequence") {
    auto [full, s_full] = lstm(Variable(x));
    auto [first, s1] = lstm(Variable(x.narrow(0, 0, 2)));
    auto [second, s2] = lstm(Variable(x.narrow(0, 2, 2)), s1);
    CHECK(max_diff(second.data(), full.data().narrow(0, 2, 2)) < 1e-13);
    CHECK(max_diff(s2.c.data(), s_full.c.data()) < 1e-13);
  }
}

TEST_CASE("LSTM parameters follow torch's names and shapes", "[nn][lstm]") {
  nn::LSTM lstm(3, 4, 2);
  std::vector<std::string> names;
  for (const auto& [n, p] : lstm.named_parameters()) names.push_back(n + shape_str(p.shape()));
  CHECK(names == std::vector<std::string>{"weight_ih_l0[16, 3]", "weight_hh_l0[16, 4]", "bias_ih_l0[16]",
                                          "bias_hh_l0[16]", "weight_ih_l1[16, 4]", "weight_hh_l1[16, 4]",
                                          "bias_ih_l1[16]", "bias_hh_l1[16]"});
  CHECK(nn::LSTM(3, 4, 1, false, false).parameters().size() == 2);
  // torch.nn.LSTM's positional order: bias, then batch_first, dropout, bidirectional.
  CHECK(nn::LSTM(3, 4, 1, false).parameters().size() == 2);
  CHECK(nn::LSTM(3, 4, 1, true, true).options().batch_first);
  CHECK(nn::LSTM(3, 4, 1, true, false, 0.0, true).parameters().size() == 8);
}

TEST_CASE("LSTM dropout acts between layers in training only", "[nn][lstm]") {
  Generator gen(5);
  nn::LSTM lstm(3, 8, 2, true, false, 0.5, false, gen);
  const Variable x(randn({4, 2, 3}, 9, DType::f32));
  lstm.eval();
  const Tensor e1 = lstm(x).output.data(), e2 = lstm(x).output.data();
  CHECK(max_diff(e1, e2) == 0.0);
  lstm.train();
  const Tensor t1 = lstm(x).output.data();
  CHECK(max_diff(t1, e1) > 1e-3);
  // Replaying the dropout generator replays the masks.
  lstm.set_dropout_seed(77);
  const Tensor r1 = lstm(x).output.data();
  lstm.set_dropout_seed(77);
  CHECK(max_diff(lstm(x).output.data(), r1) == 0.0);
  // A one-layer LSTM has no inter-layer dropout.
  nn::LSTM one(3, 8, 1, true, false, 0.5, false, gen);
  const Tensor o1 = one(x).output.data();
  CHECK(max_diff(one(x).output.data(), o1) == 0.0);
}

TEST_CASE("LSTM in 16 bits casts its parameters and state and sends fp32 gradients to the masters",
          "[nn][lstm][mixed]") {
  Generator gen(8);
  nn::LSTM lstm(3, 4, 1, true, true, 0.0, false, gen);
  const Tensor x = randn({2, 5, 3}, 4, DType::f32);
  const Tensor ref = lstm(Variable(x)).output.data();
  Tape tape;
  auto [out, state] =
      lstm(Variable(x.to(DType::bf16)), nn::LSTMState{Variable(zeros({1, 2, 4})), Variable(zeros({1, 2, 4}))});
  CHECK(out.dtype() == DType::bf16);
  CHECK(state.c.dtype() == DType::bf16);
  CHECK(max_diff(out.data().to(DType::f32), ref) < 0.05);
  tape.backward(sum(cast(out, DType::f32)));
  for (const Variable& p : lstm.parameters()) {
    REQUIRE(p.grad().has_value());
    CHECK(p.grad()->g.dtype() == DType::f32);
  }
}

TEST_CASE("LSTM validates its input and state shapes", "[nn][lstm][errors]") {
  nn::LSTM lstm(3, 4, 2, true, true);
  CHECK_THROWS_WITH(lstm(Variable(zeros({2, 5, 4}))), Contains("LSTM(3, 4, num_layers=2, batch_first=true): "
                                                               "expected input [B, T, 3], got f32[2, 5, 4]"));
  CHECK_THROWS_WITH(lstm(Variable(zeros({5, 3}))), Contains("expected input [B, T, 3]"));
  CHECK_THROWS_WITH(
      lstm(Variable(zeros({2, 5, 3})), nn::LSTMState{Variable(zeros({2, 5, 4})), Variable(zeros({2, 2, 4}))}),
      Contains("the initial state must be two [2, 2, 4] tensors") && Contains("f32[2, 5, 4]"));
  CHECK_THROWS_WITH(lstm(Variable(zeros({2, 5, 3})), nn::LSTMState{Variable(zeros({2, 2, 4})), Variable()}),
                    Contains("an undefined Variable"));
}

namespace {

// A rule that answers 1 everywhere: with it, nn::LSTM records the unrolled graph, and in f32 and
// f64 the gradients are those of plain backward (no 16-bit param_grad path is involved).
struct IdentityRule : ScalingRule {
  float gemm_beta(const GemmGradQuery&) override { return 1.0f; }
  float cast_beta(const CastGradQuery&) override { return 1.0f; }
  float param_beta(const ParamGradQuery&) override { return 1.0f; }
};

struct LstmRun {
  Tensor out, dx;
  std::vector<Tensor> grads;  // one per parameter
  size_t nodes = 0;           // recorded on the tape
};

LstmRun run_lstm(nn::LSTM& lstm, const Tensor& x, const Tensor& seed, bool unrolled) {
  lstm.zero_grad();
  IdentityRule rule;
  Variable xv(x, true);
  Tape tape;
  if (unrolled) tape.set_scaling_rule(&rule);
  auto [out, state] = lstm(xv);
  LstmRun r{out.data(), {}, {}, tape.size()};
  // out and both final states reach the loss, so every output of the layer node has a gradient.
  Variable loss = sum(out * Variable(seed)) + sum(state.h) + sum(state.c * state.c);
  tape.backward(loss);
  r.dx = xv.grad()->g;
  for (const Variable& p : lstm.parameters()) r.grads.push_back(p.grad()->g);
  return r;
}

}  // namespace

TEST_CASE("LSTM layer node: the unrolled graph's forward and gradients, with one node per layer",
          "[nn][lstm][autograd]") {
  // Note [LSTM layer node]: same ops forward and for every activation gradient; the weight and
  // bias gradients of W_hh are one sum over all steps instead of T partial sums.
  for (DType dt : {DType::f64, DType::f32}) {
    for (bool batch_first : {true, false}) {
      INFO(dtype_name(dt) << (batch_first ? " batch first" : " time major"));
      Generator gen(31);
      nn::LSTM lstm(nn::LSTMOptions{.input_size = 5, .hidden_size = 6, .num_layers = 2, .batch_first = batch_first},
                    gen);
      if (dt == DType::f64) lstm.to(DType::f64);
      const Shape xs = batch_first ? Shape{3, 7, 5} : Shape{7, 3, 5};
      const Shape os = batch_first ? Shape{3, 7, 6} : Shape{7, 3, 6};
      const Tensor x = randn(xs, 41, dt), seed = randn(os, 42, dt);
      const LstmRun fused = run_lstm(lstm, x, seed, false), unrolled = run_lstm(lstm, x, seed, true);
      CHECK(fused.nodes < unrolled.nodes / 4);
      CHECK(max_diff(fused.out, unrolled.out) == 0.0);  // bit for bit
      // Activation gradients follow the same ops; the input gradient sums dG W_ih over the same
      // dG, so it is bit-identical too.
      CHECK(max_diff(fused.dx, unrolled.dx) == 0.0);
      const auto names = lstm.named_parameters();
      REQUIRE(fused.grads.size() == unrolled.grads.size());
      for (size_t i = 0; i < fused.grads.size(); ++i) {
        INFO(names[i].first);
        const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
        double scale = 0.0;
        for (double v : unrolled.grads[i].to_vector()) scale = std::max(scale, std::abs(v));
        CHECK(max_diff(fused.grads[i], unrolled.grads[i]) <= tol * scale);
        // W_ih and b_ih of the first layer see the same dG rows and one GEMM either way.
        if (names[i].first == "weight_ih_l0" || names[i].first == "bias_ih_l0")
          CHECK(max_diff(fused.grads[i], unrolled.grads[i]) == 0.0);
      }
    }
  }
}

TEST_CASE("LSTM layer node in 16 bits: the forward is the unrolled graph's, bit for bit", "[nn][lstm][mixed]") {
  Generator gen(12);
  nn::LSTM lstm(nn::LSTMOptions{.input_size = 4, .hidden_size = 8, .num_layers = 1, .batch_first = true}, gen);
  const Tensor x = randn({2, 9, 4}, 13, DType::f32);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    IdentityRule rule;
    Tensor fused, unrolled;
    {
      Tape tape;
      fused = lstm(Variable(x.to(dt))).output.data();
    }
    {
      Tape tape;
      tape.set_scaling_rule(&rule);
      unrolled = lstm(Variable(x.to(dt))).output.data();
    }
    CHECK(fused.to_vector() == unrolled.to_vector());
  }
}

TEST_CASE("LSTM layer node refuses a scaling rule set after its forward", "[nn][lstm][errors]") {
  Generator gen(3);
  nn::LSTM lstm(3, 4, 1, true, false, 0.0, false, gen);
  IdentityRule rule;
  Tape tape;
  Variable out = lstm(Variable(randn({2, 2, 3}, 5, DType::f32))).output;
  tape.set_scaling_rule(&rule);
  CHECK_THROWS_WITH(tape.backward(sum(out)), Contains("lstm_layer: recorded without a gradient-scaling rule"));
}
