// GRU module: forward against a hand-unrolled computation with the gru_cell op, layouts, states,
// dropout modes, 16 bits and validation; bidirectional GRU and LSTM against their directions run
// as one-directional modules. (Values and gradients against PyTorch: test_torch_reference.cpp.)
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

// The textbook recurrence on plain tensors: per layer and step, gx = x_t W_ih^T + b_ih,
// gh = h W_hh^T + b_hh, h = gru_cell(gx, gh, h). Returns {output [T, B, H], h_n}.
std::pair<Tensor, Tensor> unroll(const nn::GRU& gru, const Tensor& x_tbi, const Tensor& h0) {
  const int64_t T = x_tbi.size(0), L = gru.options().num_layers;
  Tensor in = x_tbi;
  std::vector<Tensor> hs;
  for (int64_t l = 0; l < L; ++l) {
    const auto& p = gru.layers()[size_t(l)];
    Tensor h = h0.select(0, l).contiguous();
    std::vector<Tensor> outs;
    for (int64_t t = 0; t < T; ++t) {
      h = gru_cell(linear(in.select(0, t).contiguous(), p.weight_ih.data(), p.bias_ih.data()),
                   linear(h, p.weight_hh.data(), p.bias_hh.data()), h);
      outs.push_back(h);
    }
    hs.push_back(h);
    in = stack(outs, 0);
  }
  return {in, stack(hs, 0)};
}

Tensor flip_time(const Tensor& x, int64_t tdim) {
  std::vector<Tensor> steps;
  for (int64_t t = x.size(tdim) - 1; t >= 0; --t) steps.push_back(x.narrow(tdim, t, 1));
  return concat(steps, tdim);
}

}  // namespace

TEST_CASE("GRU forward equals the hand-unrolled gru_cell recurrence", "[nn][gru]") {
  Generator gen(17);
  const int64_t T = 4, B = 3, I = 5, H = 6, L = 2;
  nn::GRU gru(I, H, L, true, false, 0.0, false, gen);
  gru.to(DType::f64);
  const Tensor x = randn({T, B, I}, 1), h0 = randn({L, B, H}, 2);

  SECTION("time-major with an initial state") {
    auto [out, h_n] = gru(Variable(x), Variable(h0));
    const auto [ref_out, ref_h] = unroll(gru, x, h0);
    CHECK(max_diff(out.data(), ref_out) < 1e-13);
    CHECK(max_diff(h_n.data(), ref_h) < 1e-13);
    CHECK(max_diff(h_n.data().select(0, L - 1), out.data().select(0, T - 1)) == 0.0);
  }
  SECTION("zero initial state by default") {
    auto [out, h_n] = gru(Variable(x));
    const auto [ref_out, ref_h] = unroll(gru, x, zeros({L, B, H}, DType::f64));
    CHECK(max_diff(out.data(), ref_out) < 1e-13);
    CHECK(max_diff(h_n.data(), ref_h) < 1e-13);
  }
  SECTION("batch_first gives the transposed layout and the same numbers") {
    nn::GRU bf(I, H, L, true, true, 0.0, false, gen);
    bf.to(DType::f64);
    bf.load_state_dict(gru.state_dict());
    auto [out, h_n] = bf(Variable(x.transpose(0, 1).contiguous()), Variable(h0));
    const auto [ref_out, ref_h] = unroll(gru, x, h0);
    CHECK(out.shape() == Shape{B, T, H});
    CHECK(max_diff(out.data().transpose(0, 1), ref_out) < 1e-13);
    CHECK(max_diff(h_n.data(), ref_h) < 1e-13);
  }
  SECTION("carrying the state over two chunks equals one pass over the whole sequence") {
    auto [full, h_full] = gru(Variable(x));
    auto [first, h1] = gru(Variable(x.narrow(0, 0, 2)));
    auto [second, h2] = gru(Variable(x.narrow(0, 2, 2)), h1);
    CHECK(max_diff(second.data(), full.data().narrow(0, 2, 2)) < 1e-13);
    CHECK(max_diff(h2.data(), h_full.data()) < 1e-13);
  }
}

TEST_CASE("GRU and bidirectional LSTM parameters follow torch's names, shapes and order", "[nn][gru][lstm]") {
  auto names_of = [](const nn::Module& m) {
    std::vector<std::string> names;
    for (const auto& [n, p] : m.named_parameters()) names.push_back(n + shape_str(p.shape()));
    return names;
  };
  CHECK(names_of(nn::GRU(3, 4, 2)) ==
        std::vector<std::string>{"weight_ih_l0[12, 3]", "weight_hh_l0[12, 4]", "bias_ih_l0[12]", "bias_hh_l0[12]",
                                 "weight_ih_l1[12, 4]", "weight_hh_l1[12, 4]", "bias_ih_l1[12]", "bias_hh_l1[12]"});
  CHECK(nn::GRU(3, 4, 1, false, false).parameters().size() == 2);
  // torch.nn.GRU's positional order: bias, then batch_first, dropout, bidirectional.
  CHECK(nn::GRU(3, 4, 1, false).parameters().size() == 2);
  CHECK(nn::GRU(3, 4, 1, true, true).options().batch_first);
  CHECK(nn::GRU(3, 4, 1, true, false, 0.0, true).parameters().size() == 8);
  CHECK(names_of(nn::GRU(nn::GRUOptions{
            .input_size = 3, .hidden_size = 4, .num_layers = 2, .bias = false, .bidirectional = true})) ==
        std::vector<std::string>{"weight_ih_l0[12, 3]", "weight_hh_l0[12, 4]", "weight_ih_l0_reverse[12, 3]",
                                 "weight_hh_l0_reverse[12, 4]", "weight_ih_l1[12, 8]", "weight_hh_l1[12, 4]",
                                 "weight_ih_l1_reverse[12, 8]", "weight_hh_l1_reverse[12, 4]"});
  CHECK(names_of(nn::LSTM(nn::LSTMOptions{.input_size = 3, .hidden_size = 4, .bidirectional = true})) ==
        std::vector<std::string>{"weight_ih_l0[16, 3]", "weight_hh_l0[16, 4]", "bias_ih_l0[16]", "bias_hh_l0[16]",
                                 "weight_ih_l0_reverse[16, 3]", "weight_hh_l0_reverse[16, 4]", "bias_ih_l0_reverse[16]",
                                 "bias_hh_l0_reverse[16]"});
  CHECK(nn::GRU(nn::GRUOptions{.input_size = 3, .hidden_size = 4, .bidirectional = true}).str() ==
        "GRU(3, 4, bidirectional=true)");
  // U(-1/sqrt(H), 1/sqrt(H)) as torch: H = 4 -> bound 0.5, and the draws spread over it.
  double lo = 1.0, hi = -1.0;
  for (const Variable& p : nn::GRU(3, 4, 2).parameters())
    for (double v : p.data().to_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  CHECK(lo >= -0.5);
  CHECK(hi <= 0.5);
  CHECK(hi - lo > 0.9);
}

TEST_CASE("GRU dropout acts between layers in training only", "[nn][gru]") {
  Generator gen(5);
  nn::GRU gru(3, 8, 2, true, false, 0.5, false, gen);
  const Variable x(randn({4, 2, 3}, 9, DType::f32));
  gru.eval();
  const Tensor e1 = gru(x).output.data();
  CHECK(max_diff(gru(x).output.data(), e1) == 0.0);
  gru.train();
  CHECK(max_diff(gru(x).output.data(), e1) > 1e-3);
  gru.set_dropout_seed(77);
  const Tensor r1 = gru(x).output.data();
  gru.set_dropout_seed(77);
  CHECK(max_diff(gru(x).output.data(), r1) == 0.0);
}

TEST_CASE("GRU in 16 bits casts its parameters and state and sends fp32 gradients to the masters", "[nn][gru][mixed]") {
  Generator gen(8);
  nn::GRU gru(3, 4, 1, true, true, 0.0, false, gen);
  const Tensor x = randn({2, 5, 3}, 4, DType::f32);
  const Tensor ref = gru(Variable(x)).output.data();
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    gru.zero_grad();
    Tape tape;
    auto [out, h_n] = gru(Variable(x.to(dt)), Variable(zeros({1, 2, 4})));
    CHECK(out.dtype() == dt);
    CHECK(h_n.dtype() == dt);
    CHECK(max_diff(out.data().to(DType::f32), ref) < (dt == DType::bf16 ? 0.05 : 0.01));
    tape.backward(sum(cast(out, DType::f32)));
    for (const Variable& p : gru.parameters()) {
      REQUIRE(p.grad().has_value());
      CHECK(p.grad()->g.dtype() == DType::f32);
    }
  }
}

TEST_CASE("GRU validates its input and state shapes", "[nn][gru][errors]") {
  nn::GRU gru(3, 4, 2, true, true);
  CHECK_THROWS_WITH(gru(Variable(zeros({2, 5, 4}))), Contains("GRU(3, 4, num_layers=2, batch_first=true): "
                                                              "expected input [B, T, 3], got f32[2, 5, 4]"));
  CHECK_THROWS_WITH(gru(Variable(zeros({2, 5, 3})), Variable(zeros({2, 5, 4}))),
                    Contains("the initial state must be [2, 2, 4] (num_layers, batch, hidden), got f32[2, 5, 4]"));
  nn::GRU bi(nn::GRUOptions{.input_size = 3, .hidden_size = 4, .bidirectional = true});
  CHECK_THROWS_WITH(bi(Variable(zeros({5, 2, 3})), Variable(zeros({1, 2, 4}))),
                    Contains("must be [2, 2, 4] (num_layers * 2, batch, hidden)"));
  nn::LSTM bl(nn::LSTMOptions{.input_size = 3, .hidden_size = 4, .bidirectional = true});
  CHECK_THROWS_WITH(
      bl(Variable(zeros({5, 2, 3})), nn::LSTMState{Variable(zeros({1, 2, 4})), Variable(zeros({1, 2, 4}))}),
      Contains("two [2, 2, 4] tensors (num_layers * 2, batch, hidden)"));
  CHECK_THROWS_WITH(nn::GRU(0, 4), Contains("GRU: input_size and hidden_size must be positive"));
  CHECK_THROWS_WITH(nn::GRU(3, 4, 1, true, false, 1.0), Contains("GRU: dropout must be in [0, 1)"));
  CHECK_THROWS_WITH(gru_cell(zeros({2, 9}), zeros({2, 8}), zeros({2, 3})),
                    Contains("gru_cell: gx f32[2, 9] and gh f32[2, 8] must both be [2, 9]"));
  CHECK_THROWS_WITH(gru_cell(zeros({2, 9}), zeros({2, 9}), zeros({2, 3}, DType::f64)), Contains("gru_cell"));
}

TEST_CASE("a bidirectional layer's reverse direction is a one-directional layer over the reversed sequence",
          "[nn][gru][lstm]") {
  // One layer, so the directions are independent: the forward half of the output and of h_n is a
  // one-directional module with the forward parameters, the reverse half the same module with the
  // _reverse parameters run over the time-reversed input and reversed back.
  const int64_t T = 5, B = 2, I = 3, H = 4;
  const Tensor x = randn({B, T, I}, 31), h0 = randn({2, B, H}, 32), c0 = randn({2, B, H}, 33);
  auto half = [&](const nn::Module& bi, nn::Module& uni, const std::string& suffix) {
    TensorDict sd;
    for (const auto& [name, p] : bi.named_parameters())
      if (name.ends_with("_l0" + suffix)) sd.add(name.substr(0, name.size() - suffix.size()), p.data());
    uni.load_state_dict(sd);
  };
  Generator gen(34);
  nn::GRU bi(nn::GRUOptions{.input_size = I, .hidden_size = H, .batch_first = true, .bidirectional = true}, gen);
  nn::GRU fwd(nn::GRUOptions{.input_size = I, .hidden_size = H, .batch_first = true}, gen);
  nn::GRU rev(nn::GRUOptions{.input_size = I, .hidden_size = H, .batch_first = true}, gen);
  for (nn::Module* m : std::vector<nn::Module*>{&bi, &fwd, &rev}) m->to(DType::f64);
  half(bi, fwd, "");
  half(bi, rev, "_reverse");
  auto [out, h_n] = bi(Variable(x), Variable(h0));
  auto [of, hf] = fwd(Variable(x), Variable(h0.narrow(0, 0, 1)));
  auto [orv, hr] = rev(Variable(flip_time(x, 1)), Variable(h0.narrow(0, 1, 1)));
  CHECK(out.shape() == Shape{B, T, 2 * H});
  CHECK(max_diff(out.data().narrow(2, 0, H), of.data()) == 0.0);
  CHECK(max_diff(out.data().narrow(2, H, H), flip_time(orv.data(), 1)) == 0.0);
  CHECK(max_diff(h_n.data(), concat({hf.data(), hr.data()}, 0)) == 0.0);

  nn::LSTM lbi(nn::LSTMOptions{.input_size = I, .hidden_size = H, .batch_first = true, .bidirectional = true}, gen);
  nn::LSTM lf(nn::LSTMOptions{.input_size = I, .hidden_size = H, .batch_first = true}, gen);
  nn::LSTM lr(nn::LSTMOptions{.input_size = I, .hidden_size = H, .batch_first = true}, gen);
  for (nn::Module* m : std::vector<nn::Module*>{&lbi, &lf, &lr}) m->to(DType::f64);
  half(lbi, lf, "");
  half(lbi, lr, "_reverse");
  auto [lout, ls] = lbi(Variable(x), nn::LSTMState{Variable(h0), Variable(c0)});
  auto [lof, lsf] = lf(Variable(x), nn::LSTMState{Variable(h0.narrow(0, 0, 1)), Variable(c0.narrow(0, 0, 1))});
  auto [lor, lsr] =
      lr(Variable(flip_time(x, 1)), nn::LSTMState{Variable(h0.narrow(0, 1, 1)), Variable(c0.narrow(0, 1, 1))});
  CHECK(max_diff(lout.data().narrow(2, 0, H), lof.data()) == 0.0);
  CHECK(max_diff(lout.data().narrow(2, H, H), flip_time(lor.data(), 1)) == 0.0);
  CHECK(max_diff(ls.h.data(), concat({lsf.h.data(), lsr.h.data()}, 0)) == 0.0);
  CHECK(max_diff(ls.c.data(), concat({lsf.c.data(), lsr.c.data()}, 0)) == 0.0);
}
