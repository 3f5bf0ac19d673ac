// f64 central-difference gradient checks of whole modules: every parameter and the input.
#include "support/catch.h"

#include <cmath>
#include <functional>

#include "mixtape.h"
#include "nn/nn.h"

using namespace mixtape;

namespace {

Tensor rand_f64(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  return uniform(s, lo, hi, g, DType::f64);
}

// f(leaves) returns outputs; the checked scalar is sum_k <out_k, r_k> with fixed random r_k.
// `before_eval` runs before every evaluation (replays random state such as dropout masks).
void gradcheck(
    const std::vector<Variable>& leaves, const std::function<std::vector<Variable>()>& f,
    const std::function<void()>& before_eval = [] {}, double step = 1e-6, double tol = 1e-7) {
  std::vector<Tensor> rs;
  auto objective = [&](const std::vector<Variable>& outs) {
    if (rs.empty())
      for (size_t k = 0; k < outs.size(); ++k) rs.push_back(rand_f64(outs[k].shape(), 500 + k));
    Variable total;
    for (size_t k = 0; k < outs.size(); ++k) {
      REQUIRE(outs[k].dtype() == DType::f64);
      const Variable term = sum(outs[k] * Variable(rs[k]));
      total = total.defined() ? total + term : term;
    }
    return total;
  };
  for (const Variable& v : leaves) {
    REQUIRE(v.requires_grad());
    REQUIRE(v.dtype() == DType::f64);
    v.impl().grad.reset();
  }
  {
    Tape tape;
    before_eval();
    tape.backward(objective(f()));
  }
  NoGrad no_grad;
  for (const Variable& v : leaves) {
    INFO("leaf " << (v.name().empty() ? std::string("(input)") : v.name()) << " " << v.data().meta());
    REQUIRE(v.grad().has_value());
    const Tensor g = v.grad()->unscaled();
    REQUIRE(g.shape() == v.shape());
    Tensor x = v.data();
    double worst = 0.0;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = x.flat_get(j);
      x.flat_set(j, orig + step);
      before_eval();
      const double fp = objective(f()).item();
      x.flat_set(j, orig - step);
      before_eval();
      const double fm = objective(f()).item();
      x.flat_set(j, orig);
      const double numeric = (fp - fm) / (2.0 * step);
      worst = std::max(worst, std::abs(g.flat_get(j) - numeric) / (1.0 + std::abs(numeric)));
    }
    CHECK(worst <= tol);
  }
}

std::vector<Variable> with_params(const nn::Module& m, std::vector<Variable> extra) {
  std::vector<Variable> all = m.parameters();
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

}  // namespace

TEST_CASE("gradcheck: Conv2d module", "[nn][gradcheck]") {
  Generator gen(1);
  nn::Conv2d conv(
      nn::Conv2dOptions{
          .in_channels = 2, .out_channels = 3, .kernel_size = {3, 2}, .stride = 2, .padding = 1, .dilation = {1, 2}},
      gen);
  conv.to(DType::f64);
  const Variable x(rand_f64({2, 2, 5, 6}, 2), true);
  gradcheck(with_params(conv, {x}), [&] { return std::vector<Variable>{conv(x)}; });
}

TEST_CASE("gradcheck: ConvTranspose2d module", "[nn][gradcheck]") {
  Generator gen(2);
  nn::ConvTranspose2d up(2, 3, 3, 2, 1, 1, 1, true, gen);
  up.to(DType::f64);
  const Variable x(rand_f64({2, 2, 3, 3}, 3), true);
  gradcheck(with_params(up, {x}), [&] { return std::vector<Variable>{up(x)}; });
}

TEST_CASE("gradcheck: BatchNorm2d module in training and eval mode", "[nn][gradcheck]") {
  nn::BatchNorm2d bn(3);
  bn.to(DType::f64);
  Generator gen(3);
  nn::init::uniform_(bn.weight, gen, 0.5, 1.5);
  nn::init::uniform_(bn.bias, gen, -0.5, 0.5);
  const Variable x(rand_f64({3, 3, 2, 2}, 4), true);
  gradcheck(with_params(bn, {x}), [&] { return std::vector<Variable>{bn(x)}; });
  bn.eval();
  gradcheck(with_params(bn, {x}), [&] { return std::vector<Variable>{bn(x)}; });
}

TEST_CASE("gradcheck: two-layer batch-first LSTM with an initial state and dropout", "[nn][gradcheck][lstm]") {
  Generator gen(4);
  nn::LSTM lstm(
      nn::LSTMOptions{.input_size = 3, .hidden_size = 2, .num_layers = 2, .batch_first = true, .dropout = 0.3}, gen);
  lstm.to(DType::f64);
  const Variable x(rand_f64({2, 3, 3}, 5), true);   // [B, T, in]
  const Variable h0(rand_f64({2, 2, 2}, 6), true);  // [L, B, H]
  const Variable c0(rand_f64({2, 2, 2}, 7), true);
  // Every evaluation replays the same dropout masks.
  auto replay = [&] { lstm.set_dropout_seed(1234); };
  gradcheck(
      with_params(lstm, {x, h0, c0}),
      [&] {
    auto [out, state] = lstm(x, nn::LSTMState{h0, c0});
    return std::vector<Variable>{out, state.h, state.c};
      },
      replay);
}

TEST_CASE("gradcheck: two-layer batch-first GRU with an initial state and dropout", "[nn][gradcheck][gru]") {
  Generator gen(14);
  nn::GRU gru(nn::GRUOptions{.input_size = 3, .hidden_size = 2, .num_layers = 2, .batch_first = true, .dropout = 0.3},
              gen);
  gru.to(DType::f64);
  const Variable x(rand_f64({2, 3, 3}, 15), true);   // [B, T, in]
  const Variable h0(rand_f64({2, 2, 2}, 16), true);  // [L, B, H]
  auto replay = [&] { gru.set_dropout_seed(4321); };
  gradcheck(
      with_params(gru, {x, h0}),
      [&] {
    auto [out, h_n] = gru(x, h0);
    return std::vector<Variable>{out, h_n};
      },
      replay);
}

TEST_CASE("gradcheck: two-layer bidirectional LSTM and GRU", "[nn][gradcheck][lstm][gru]") {
  Generator gen(24);
  nn::LSTM lstm(nn::LSTMOptions{.input_size = 3, .hidden_size = 2, .num_layers = 2, .bidirectional = true}, gen);
  lstm.to(DType::f64);
  const Variable x(rand_f64({3, 2, 3}, 25), true);   // [T, B, in]
  const Variable h0(rand_f64({4, 2, 2}, 26), true);  // [L * 2, B, H]
  const Variable c0(rand_f64({4, 2, 2}, 27), true);
  gradcheck(with_params(lstm, {x, h0, c0}), [&] {
    auto [out, state] = lstm(x, nn::LSTMState{h0, c0});
    return std::vector<Variable>{out, state.h, state.c};
  });
  nn::GRU gru(nn::GRUOptions{.input_size = 3, .hidden_size = 2, .num_layers = 2, .bidirectional = true}, gen);
  gru.to(DType::f64);
  gradcheck(with_params(gru, {x, h0}), [&] {
    auto [out, h_n] = gru(x, h0);
    return std::vector<Variable>{out, h_n};
  });
}

TEST_CASE("gradcheck: Linear + Embedding + loss modules", "[nn][gradcheck]") {
  Generator gen(5);
  nn::Embedding emb(4, 3, gen);
  nn::Linear lin(3, 5, gen);
  emb.to(DType::f64);
  lin.to(DType::f64);
  const Tensor idx = from_vector(std::vector<int64_t>{3, 1, 3}, {3});
  const Tensor labels = from_vector(std::vector<int64_t>{0, 4, 2}, {3});
  const Tensor target = rand_f64({3, 5}, 8, 0.0, 1.0);
  nn::CrossEntropyLoss ce;
  nn::BCEWithLogitsLoss bce;
  nn::MSELoss mse;
  gradcheck(with_params(emb, lin.parameters()), [&] {
    const Variable logits = lin(emb(idx));
    return std::vector<Variable>{ce(logits, labels), bce(logits, target), mse(logits, target)};
  });
}
