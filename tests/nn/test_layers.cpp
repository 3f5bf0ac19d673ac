// Layers: shapes, hand-computed values, train/eval behaviour, mixed-precision casts, losses,
// argument validation.
#include "support/catch.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "mixtape.h"
#include "nn/nn.h"
#include "support/test_util.h"

using namespace mixtape;
using Catch::Contains;
using mixtape::test::error_of;

namespace {

Tensor randn(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Generator g(seed);
  return normal(s, 0.0, 1.0, g, dt);
}

void set_values(const Variable& v, const std::vector<double>& vals) {
  Tensor t = v.data();
  t.copy_(from_vector(vals, v.shape(), v.dtype()));
}

}  // namespace

TEST_CASE("every layer produces the documented output shape", "[nn][layers]") {
  Generator gen(1);
  const Variable img(randn({2, 3, 8, 8}, 1));
  CHECK(nn::Conv2d(3, 4, 3, 2, 1, 1, true, gen)(img).shape() == Shape{2, 4, 4, 4});
  CHECK(
      nn::Conv2d(nn::Conv2dOptions{.in_channels = 3, .out_channels = 5, .kernel_size = {3, 1}, .dilation = 2}, gen)(img)
          .shape() == Shape{2, 5, 4, 8});
  CHECK(nn::ConvTranspose2d(3, 6, 4, 2, 1, 0, 1, true, gen)(img).shape() == Shape{2, 6, 16, 16});
  CHECK(nn::ConvTranspose2d(3, 6, 3, 2, 1, 1, 1, false, gen)(img).shape() == Shape{2, 6, 16, 16});
  CHECK(nn::BatchNorm2d(3)(img).shape() == Shape{2, 3, 8, 8});
  CHECK(nn::BatchNorm1d(5)(Variable(randn({4, 5}, 2))).shape() == Shape{4, 5});
  CHECK(nn::BatchNorm1d(5)(Variable(randn({4, 5, 7}, 2))).shape() == Shape{4, 5, 7});
  CHECK(nn::MaxPool2d(2)(img).shape() == Shape{2, 3, 4, 4});
  CHECK(nn::MaxPool2d(3, 2, 1)(img).shape() == Shape{2, 3, 4, 4});
  CHECK(nn::AvgPool2d(2, 1)(img).shape() == Shape{2, 3, 7, 7});
  CHECK(nn::Flatten()(img).shape() == Shape{2, 192});
  CHECK(nn::Flatten(2)(img).shape() == Shape{2, 3, 64});
  CHECK(nn::Linear(8, 5, gen)(img).shape() == Shape{2, 3, 8, 5});
  for (auto m : std::vector<std::shared_ptr<nn::UnaryModule>>{
           std::make_shared<nn::ReLU>(), std::make_shared<nn::LeakyReLU>(0.2), std::make_shared<nn::Sigmoid>(),
           std::make_shared<nn::Tanh>(), std::make_shared<nn::Dropout>(0.5, gen)})
    CHECK((*m)(img).shape() == img.shape());
  nn::Embedding emb(10, 4, gen);
  CHECK(emb(from_vector(std::vector<int64_t>{1, 2, 3, 9, 0, 0}, {2, 3})).shape() == Shape{2, 3, 4});
  auto [out, state] = nn::LSTM(8, 6, 2, true, false, 0.0, false, gen)(Variable(randn({5, 3, 8}, 3)));
  CHECK(out.shape() == Shape{5, 3, 6});
  CHECK(state.h.shape() == Shape{2, 3, 6});
  CHECK(state.c.shape() == Shape{2, 3, 6});
  CHECK(
      nn::CrossEntropyLoss()(Variable(randn({4, 3}, 4)), from_vector(std::vector<int64_t>{0, 1, 2, 1}, {4})).shape() ==
      Shape{});
  CHECK(nn::MSELoss(Reduction::none)(Variable(randn({4, 3}, 4)), randn({4, 3}, 5)).shape() == Shape{4, 3});
}

TEST_CASE("Linear and Conv2d compute the hand-worked values", "[nn][layers]") {
  nn::Linear lin(2, 3);
  set_values(lin.weight, {1, 2, 3, 4, 5, 6});  // [3, 2]
  set_values(lin.bias, {0.5, -1, 0});
  const Tensor y = lin(from_vector(std::vector<double>{1, -1, 2, 0.5}, {2, 2})).data();
  // [1, -1] -> [1-2+0.5, 3-4-1, 5-6] ; [2, 0.5] -> [2+1+0.5, 6+2-1, 10+3]
  CHECK(y.to_vector() == std::vector<double>{-0.5, -2, -1, 3.5, 7, 13});

  nn::Conv2d conv(1, 1, 2);
  set_values(conv.weight, {1, 1, 1, 1});
  set_values(conv.bias, {0.5});
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  CHECK(conv(x).data().to_vector() == std::vector<double>{12.5, 16.5, 24.5, 28.5});

  // ConvTranspose2d with stride 2 and a 1x1 kernel spreads the input over every other pixel.
  nn::ConvTranspose2d up(1, 1, 1, 2, 0, 1);
  set_values(up.weight, {2});
  set_values(up.bias, {1});
  const Tensor u = up(from_vector(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2})).data();
  CHECK(u.shape() == Shape{1, 1, 4, 4});
  CHECK(u.to_vector() == std::vector<double>{3, 1, 5, 1, 1, 1, 1, 1, 7, 1, 9, 1, 1, 1, 1, 1});
}

TEST_CASE("Dropout drops in training, is the identity in eval, and is reproducible", "[nn][layers][dropout]") {
  nn::Dropout drop(0.25, uint64_t(42));
  const Tensor x = ones({64, 64});
  const Tensor y = drop(x).data();
  int64_t zeros_count = 0;
  for (double v : y.to_vector()) {
    if (v == 0.0) ++zeros_count;
    else CHECK(v == Approx(1.0 / 0.75).epsilon(1e-6));
  }
  const double frac = double(zeros_count) / double(x.numel());
  CHECK(frac == Approx(0.25).margin(0.03));
  // A second call draws a fresh mask; re-seeding replays the first.
  CHECK(drop(x).data().to_vector() != y.to_vector());
  drop.set_seed(42);
  CHECK(drop(x).data().to_vector() == y.to_vector());

  drop.eval();
  const Variable xv(x);
  CHECK(drop(xv).same(xv));  // no node, no copy
  // Seeds drawn from a generator differ between layers built one after the other.
  Generator gen(9);
  nn::Dropout d1(0.5, gen), d2(0.5, gen);
  CHECK(d1.generator().seed() != d2.generator().seed());
  CHECK_THROWS_WITH(nn::Dropout(1.0), Contains("Dropout: p must be in [0, 1)"));
}

TEST_CASE("BatchNorm uses batch statistics in training and running statistics in eval", "[nn][layers][batchnorm]") {
  nn::BatchNorm1d bn(2);
  // Channel 0: {1, 3, 5, 7} mean 4, biased var 5, unbiased 20/3; channel 1: {2, 2, 4, 4} mean 3, var 1, unbiased 4/3.
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 2, 5, 4, 7, 4}, {4, 2});
  set_values(bn.weight, {2, 1});
  set_values(bn.bias, {0, 10});
  const Tensor y = bn(x).data();
  const double s0 = 1.0 / std::sqrt(5.0 + 1e-5), s1 = 1.0 / std::sqrt(1.0 + 1e-5);
  const std::vector<double> want = {2 * -3 * s0, 10 - s1, 2 * -1 * s0, 10 - s1,
                                    2 * 1 * s0,  10 + s1, 2 * 3 * s0,  10 + s1};
  for (int64_t i = 0; i < 8; ++i) CHECK(y.flat_get(i) == Approx(want[size_t(i)]).epsilon(1e-6));
  CHECK(bn.running_mean().to_vector()[0] == Approx(0.4).epsilon(1e-6));
  CHECK(bn.running_mean().to_vector()[1] == Approx(0.3).epsilon(1e-6));
  CHECK(bn.running_var().to_vector()[0] == Approx(0.9 + 0.1 * 20.0 / 3.0).epsilon(1e-6));
  CHECK(bn.running_var().to_vector()[1] == Approx(0.9 + 0.1 * 4.0 / 3.0).epsilon(1e-6));
  CHECK(bn.num_batches_tracked().item() == 1.0);

  bn.eval();
  const Tensor ye = bn(x).data();
  const std::vector<double> rm = bn.running_mean().to_vector(), rv = bn.running_var().to_vector();
  for (int64_t i = 0; i < 8; ++i) {
    const size_t c = size_t(i % 2);
    const double w = c == 0 ? 2.0 : 1.0, b = c == 0 ? 0.0 : 10.0;
    CHECK(ye.flat_get(i) == Approx((x.flat_get(i) - rm[c]) / std::sqrt(rv[c] + 1e-5) * w + b).epsilon(1e-6));
  }
  CHECK(bn.num_batches_tracked().item() == 1.0);  // eval does not count
  CHECK(bn.running_mean().to_vector() == rm);     // nor update

  // Without running statistics both modes normalize with the batch.
  nn::BatchNorm1d free_bn(nn::BatchNormOptions{.num_features = 2, .affine = false, .track_running_stats = false});
  CHECK(free_bn.named_buffers().empty());
  CHECK(free_bn.parameters().empty());
  free_bn.eval();
  CHECK(free_bn(x).data().flat_get(0) == Approx(-3 * s0).epsilon(1e-6));
  CHECK(free_bn.str() == "BatchNorm1d(2, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)");
}

TEST_CASE("layers cast fp32 parameters to a 16-bit input and gradients reach the fp32 masters", "[nn][layers][mixed]") {
  Generator gen(3);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO(dtype_name(dt));
    nn::Linear lin(4, 3, gen);
    nn::Conv2d conv(2, 3, 3, 1, 1, 1, true, gen);
    nn::BatchNorm2d bn(3);
    const Tensor x32 = randn({2, 2, 5, 5}, 7);
    Tape tape;
    const Variable h = bn(conv(Variable(x32.to(dt))));
    CHECK(h.dtype() == dt);
    const Variable y = lin(Variable(randn({6, 4}, 8).to(dt)));
    CHECK(y.dtype() == dt);
    const Variable loss = nn::MSELoss()(h, zeros(h.shape())) + nn::MSELoss()(y, zeros(y.shape()));
    CHECK(loss.dtype() == DType::f32);  // losses run in fp32
    tape.backward(loss);
    for (const Variable& p : {conv.weight, conv.bias, bn.weight, bn.bias, lin.weight, lin.bias}) {
      INFO(p.name());
      REQUIRE(p.grad().has_value());
      CHECK(p.grad()->g.dtype() == DType::f32);
      CHECK(p.grad()->g.shape() == p.shape());
    }
    // BatchNorm's statistics stay f32.
    CHECK(bn.running_mean().dtype() == DType::f32);
  }
  // Same dtype: no cast node is recorded.
  nn::Linear lin(4, 3, gen);
  Tape tape;
  lin(Variable(randn({2, 4}, 1)));
  CHECK(tape.size() == 1);
}

TEST_CASE("Embedding gathers rows and casts the gathered rows on request", "[nn][layers]") {
  Generator gen(4);
  nn::Embedding emb(5, 3, gen);
  const Tensor idx = from_vector(std::vector<int64_t>{4, 0, 4}, {3});
  const Tensor rows = emb(idx).data();
  const Tensor w = emb.weight.data();
  for (int64_t j = 0; j < 3; ++j) {
    CHECK(rows.flat_get(j) == w.flat_get(4 * 3 + j));
    CHECK(rows.flat_get(3 + j) == w.flat_get(j));
  }
  Tape tape;
  const Variable r16 = emb(idx, DType::bf16);
  CHECK(r16.dtype() == DType::bf16);
  tape.backward(sum(cast(r16, DType::f32)));
  REQUIRE(emb.weight.grad().has_value());
  const Tensor g = emb.weight.grad()->unscaled();
  CHECK(g.dtype() == DType::f32);
  CHECK(g.flat_get(4 * 3) == 2.0);  // row 4 used twice
  CHECK(g.flat_get(0) == 1.0);
  CHECK(g.flat_get(3) == 0.0);
  CHECK_THROWS_WITH(emb(from_vector(std::vector<double>{1}, {1})), Contains("expected i64 indices"));
}

TEST_CASE("loss modules compute the hand-worked values in fp32", "[nn][layers][loss]") {
  const Tensor logits = from_vector(std::vector<double>{0, 0, std::log(2.0), 0}, {2, 2});
  const Tensor labels = from_vector(std::vector<int64_t>{1, 0}, {2});
  // row 0: uniform -> log 2; row 1: p(class 0) = 2/3 -> log(3/2)
  const double ce = 0.5 * (std::log(2.0) + std::log(1.5));
  CHECK(nn::CrossEntropyLoss()(Variable(logits), labels).item() == Approx(ce).epsilon(1e-6));
  CHECK(nn::CrossEntropyLoss(Reduction::sum)(Variable(logits), labels).item() == Approx(2 * ce).epsilon(1e-6));
  const Variable ce16 = nn::CrossEntropyLoss()(Variable(logits.to(DType::f16)), labels);
  CHECK(ce16.dtype() == DType::f32);
  CHECK(ce16.item() == Approx(ce).epsilon(1e-3));

  const Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3});
  const Tensor b = from_vector(std::vector<double>{1, 0, 0}, {3});
  CHECK(nn::MSELoss()(Variable(a), b).item() == Approx(13.0 / 3.0));
  // BCE with logit 0 is log 2 for any target; logit x, target 1: log(1 + e^-x).
  const Tensor z = from_vector(std::vector<double>{0, 2}, {2});
  const Tensor t = from_vector(std::vector<double>{0.3, 1}, {2});
  CHECK(nn::BCEWithLogitsLoss(Reduction::sum)(Variable(z), t).item() ==
        Approx(std::log(2.0) + std::log(1.0 + std::exp(-2.0))).epsilon(1e-6));
  CHECK(nn::BCEWithLogitsLoss()(Variable(z.to(DType::bf16)), t).dtype() == DType::f32);
}

TEST_CASE("BCELoss and BCEWithLogitsLoss with a weight agree with PyTorch", "[nn][layers]") {
  // torch.nn.BCELoss(weight=w) / BCEWithLogitsLoss(weight=w) in f64 (PyTorch 1.13), w broadcast
  // over the rows; the gradients are with respect to the input.
  const Tensor p = from_vector(std::vector<double>{0.1, 0.7, 0.99, 0.5, 0.02, 0.6}, {2, 3}, DType::f64);
  const Tensor t = from_vector(std::vector<double>{0, 1, 1, 0.3, 0, 1}, {2, 3}, DType::f64);
  const Tensor w = from_vector(std::vector<double>{2.0, 0.5, 1.5}, {3}, DType::f64);
  const auto loss_and_grad = [&](const std::function<Variable(const Variable&)>& f, const Tensor& x) {
    Tape tape;
    Variable v(x, true);
    const Variable l = f(v);
    tape.backward(l);
    return std::pair<double, std::vector<double>>{l.item(), v.grad()->unscaled().to_vector()};
  };
  const auto close = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
  };
  auto [mean, gmean] = loss_and_grad([&](const Variable& x) { return nn::BCELoss(Reduction::mean, w)(x, t); }, p);
  CHECK(mean == Approx(0.42779469291548455).epsilon(1e-12));
  close(gmean, {0.3703703703703703, -0.11904761904761905, -0.2525252525252525, 0.26666666666666666, 0.08503401360544217,
                -0.4166666666666667});
  auto [sum, gsum] = loss_and_grad([&](const Variable& x) { return nn::BCELoss(Reduction::sum, w)(x, t); }, p);
  CHECK(sum == Approx(2.5667681574929073).epsilon(1e-12));
  close(gsum, {2.222222222222222, -0.7142857142857143, -1.515151515151515, 1.6, 0.5102040816326531, -2.5});
  close(nn::BCELoss(Reduction::none, w)(Variable(p), t).data().to_vector(),
        {0.21072103131565256, 0.17833747196936622, 0.015075503780252176, 1.3862943611198906, 0.010101353658759733,
         0.7662384356489861});
  const Tensor z = from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.0, 3.0, -2.5}, {2, 3}, DType::f64);
  auto [logits, glogits] =
      loss_and_grad([&](const Variable& x) { return nn::BCEWithLogitsLoss(Reduction::mean, w)(x, t); }, z);
  CHECK(logits == Approx(1.5956832445048947).epsilon(1e-12));
  close(glogits, {0.20748644373395153, -0.06092154821916707, -0.02980073050552942, 0.06666666666666667,
                  0.07938117723520279, -0.2310354549946891});
  CHECK(nn::BCELoss(Reduction::mean, w).str() == "BCELoss(reduction=mean, weight=f64[3])");
  CHECK_THAT(error_of([&] {
               nn::BCELoss(Reduction::mean, from_vector(std::vector<double>{1, 2}, {2}, DType::f64))(Variable(p), t);
             }),
             Contains("binary_cross_entropy: weight f64[2] does not broadcast to the input's shape f64[2, 3]"));
  // pos_weight, one per class (the last dim): torch's formula (1 - t) x + (1 + (p - 1) t)
  // (log1p(exp(-|x|)) + max(-x, 0)), times w, evaluated in numpy f64; the gradient
  // ((1 - t) - (1 + (p - 1) t) sigmoid(-x)) w / n. The module and the function agree.
  const Tensor pw = from_vector(std::vector<double>{3.0, 0.25, 1.0}, {3}, DType::f64);
  auto [pos, gpos] =
      loss_and_grad([&](const Variable& x) { return nn::BCEWithLogitsLoss(Reduction::mean, w, pw)(x, t); }, z);
  CHECK(pos == Approx(1.652233825146995).epsilon(1e-12));
  close(gpos, {0.20748644373395153, -0.015230387054791768, -0.029800730505529383, -0.03333333333333336,
               0.07938117723520277, -0.23103545499468914});
  CHECK(binary_cross_entropy_with_logits(Variable(z), t, Reduction::mean, {.weight = w, .pos_weight = pw}).item() ==
        pos);
  CHECK(nn::BCEWithLogitsLoss(Reduction::sum, {}, pw).str() == "BCEWithLogitsLoss(reduction=sum, pos_weight=f64[3])");
  CHECK_THAT(error_of([&] { binary_cross_entropy(Variable(p), t, Reduction::mean, {.pos_weight = pw}); }),
             Contains("pos_weight is binary_cross_entropy_with_logits's option"));
  CHECK_THAT(error_of([&] {
               binary_cross_entropy_with_logits(Variable(z), t, Reduction::mean,
                                                {.pos_weight = zeros({2}, DType::f64)});
             }),
             Contains("pos_weight f64[2] does not broadcast"));
  CHECK_THAT(error_of([&] { nn::BCEWithLogitsLoss(Reduction::mean, zeros({3}, DType::i64)); }),
             Contains("BCEWithLogitsLoss: weight must be a floating tensor, got i64[3]"));
}

TEST_CASE("layers reject bad arguments and bad inputs with clear messages", "[nn][layers][errors]") {
  Generator gen(5);
  CHECK_THROWS_WITH(nn::Linear(0, 3), Contains("Linear: in_features and out_features must be positive"));
  CHECK_THROWS_WITH(nn::Linear(3, 4, gen)(Variable(zeros({2, 5}))),
                    Contains("Linear(3, 4): expected input [..., 3], got f32[2, 5]"));
  CHECK_THROWS_WITH(nn::Conv2d(3, 4, 0), Contains("kernel_size must be positive"));
  CHECK_THROWS_WITH(nn::Conv2d(3, 4, 3, 0), Contains("stride must be positive"));
  CHECK_THROWS_WITH(nn::Conv2d(3, 4, 3)(Variable(zeros({1, 2, 5, 5}))),
                    Contains("Conv2d(3, 4, kernel=3, stride=1, padding=0): expected input [N, 3, H, W], got "
                             "f32[1, 2, 5, 5]"));
  CHECK_THROWS_WITH(nn::ConvTranspose2d(3, 4, 3, 2, 1, 2), Contains("output_padding [2, 2] must be >= 0 and smaller"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(0), Contains("num_features must be positive"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(3, -1.0), Contains("eps must be positive"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(3, 1e-5, 2.0), Contains("momentum must be in [0, 1]"));
  CHECK_THROWS_WITH(nn::BatchNorm2d(3)(Variable(zeros({2, 3, 4}))),
                    Contains("BatchNorm2d(3, eps=1e-05, momentum=0.1): expected input [N, 3, H, W]"));
  CHECK_THROWS_WITH(nn::BatchNorm1d(3)(Variable(zeros({2, 4}))), Contains("expected input [N, 3] or [N, 3, L]"));
  CHECK_THROWS_WITH(nn::MaxPool2d(2, 2, 2), Contains("at most half the kernel"));
  CHECK_THROWS_WITH(nn::AvgPool2d(2)(Variable(zeros({2, 4}))), Contains("expected input [N, C, H, W]"));
  CHECK_THROWS_WITH(nn::Embedding(0, 2), Contains("must be positive"));
  CHECK_THROWS_WITH(nn::LSTM(3, 0), Contains("hidden_size must be positive"));
  CHECK_THROWS_WITH(nn::LSTM(3, 4, 1, true, false, 1.5), Contains("dropout must be in [0, 1)"));
  // A failed batch-norm call does not count as a tracked batch.
  nn::BatchNorm1d bn(2);
  CHECK_THROWS(bn(Variable(zeros({1, 2}))));  // one value per channel cannot train
  CHECK(bn.num_batches_tracked().item() == 0.0);
}

TEST_CASE("GELU, SiLU, ELU, Softplus and Hardtanh compute PyTorch's values and gradients", "[nn][layers]") {
  // torch.nn.GELU(), GELU(approximate="tanh"), SiLU(), ELU(0.7), Softplus(2.0, 4.0),
  // Hardtanh(-0.5, 2.0) at x (f64, torch 1.13): y and d(sum y)/dx.
  const std::vector<double> xs = {-2.0, -0.5, 0.25, 1.5, 3.0};
  struct Expect {
    std::shared_ptr<nn::UnaryModule> m;
    std::string repr;
    std::vector<double> y, dx;
  };
  const std::vector<Expect> cases = {
      {std::make_shared<nn::GELU>(),
       "approximate=none",
       {-0.04550026389635842, -0.15426876936299344, 0.14967658142073093, 1.399789198096713, 2.99595030590511},
       {-0.08523180107819692, 0.13250487534383712, 0.695373354883636, 1.1274691922299795, 1.011945647204184}},
      {std::make_shared<nn::GELU>("tanh"),
       "approximate=tanh",
       {-0.04540230591222494, -0.15428599017485606, 0.149675350701685, 1.3995715769802328, 2.996362607918227},
       {-0.0860992566236183, 0.13263009646535764, 0.6953540951510604, 1.127710793151433, 1.0115841666309695}},
      {std::make_shared<nn::SiLU>(),
       "",
       {-0.2384058440442351, -0.1887703343990727, 0.14054412522144952, 1.2263617142904655, 2.8577223804672998},
       {-0.09078424878489547, 0.2600388126973482, 0.6237100215701977, 1.041294154299143, 1.0881041060151693}},
      {std::make_shared<nn::ELU>(0.7),
       "alpha=0.7",
       {-0.6052653017343711, -0.2754285382011566, 0.25, 1.5, 3.0},
       {0.09473469826562889, 0.42457146179884336, 1.0, 1.0, 1.0}},
      {std::make_shared<nn::Softplus>(2.0, 4.0),
       "beta=2, threshold=4",
       {0.009074963958904869, 0.15663084375911143, 0.48703849209005334, 1.524293675786871, 3.0},
       {0.017986209962091555, 0.2689414213699951, 0.6224593312018546, 0.9525741268224333, 1.0}},
      {std::make_shared<nn::Hardtanh>(-0.5, 2.0),
       "min_val=-0.5, max_val=2",
       {-0.5, -0.5, 0.25, 1.5, 2.0},
       {0.0, 0.0, 1.0, 1.0, 0.0}},
  };
  for (const Expect& c : cases) {
    INFO(c.m->type_name() << "(" << c.m->extra_repr() << ")");
    CHECK(c.m->extra_repr() == c.repr);
    Variable x(from_vector(xs, {5}, DType::f64), true);
    Variable y;
    {
      Tape tape;
      y = (*c.m)(x);
      tape.backward(sum(y));
    }
    const std::vector<double> got = y.data().to_vector(), grad = x.grad()->unscaled().to_vector();
    for (size_t i = 0; i < xs.size(); ++i) {
      CHECK(got[i] == Approx(c.y[i]).epsilon(1e-13).margin(1e-300));
      CHECK(grad[i] == Approx(c.dx[i]).epsilon(1e-13).margin(1e-300));
    }
    CHECK((*c.m)(Variable(randn({2, 3, 4}, 7, DType::f16))).shape() == Shape{2, 3, 4});
  }
  CHECK_THROWS_WITH(nn::GELU("exact"), Contains("GELU: approximate must be \"none\" or \"tanh\", got \"exact\""));
  CHECK_THROWS_WITH(nn::Softplus(0.0), Contains("Softplus: beta must be finite and nonzero"));
  CHECK_THROWS_WITH(nn::ELU(std::nan("")), Contains("ELU: alpha must be finite"));
  CHECK_THROWS_WITH(nn::Hardtanh(1.0, -1.0), Contains("Hardtanh: min_val 1 > max_val -1"));
}

TEST_CASE("BatchNorm with momentum None keeps the cumulative average, and its count is in the checkpoint",
          "[nn][layers][batch_norm]") {
  // PyTorch's momentum=None: running = (1 - 1/n) running + (1/n) batch, n = num_batches_tracked,
  // so after n batches the running mean is the plain average of the n batch means (and the
  // running variance that of the unbiased batch variances, the initial 0 and 1 forgotten).
  const std::vector<Tensor> batches = {randn({6, 3}, 31), randn({6, 3}, 32) * 2.0 + 1.0, randn({6, 3}, 33) - 0.5};
  nn::BatchNorm1d bn(3, 1e-5, std::nullopt);
  CHECK(bn.str() == "BatchNorm1d(3, eps=1e-05, momentum=None)");
  std::vector<double> sum_mean(3, 0.0), sum_var(3, 0.0);
  for (size_t k = 0; k < batches.size(); ++k) {
    bn(Variable(batches[k]));
    for (int64_t c = 0; c < 3; ++c) {
      const std::vector<double> col = batches[k].select(1, c).to_vector();
      double m = 0.0, v = 0.0;
      for (double e : col) m += e / 6.0;
      for (double e : col) v += (e - m) * (e - m) / 5.0;
      sum_mean[size_t(c)] += m;
      sum_var[size_t(c)] += v;
      const double n = double(k + 1);
      CHECK(bn.running_mean().flat_get(c) == Approx(sum_mean[size_t(c)] / n).epsilon(1e-5));
      CHECK(bn.running_var().flat_get(c) == Approx(sum_var[size_t(c)] / n).epsilon(1e-5));
    }
    CHECK(bn.num_batches_tracked().item() == double(k + 1));
  }

  // Interrupted after two batches and resumed from a safetensors checkpoint: the same bits as
  // the uninterrupted run, because the count travels with the running statistics.
  nn::BatchNorm1d first(3, 1e-5, std::nullopt), straight(3, 1e-5, std::nullopt);
  for (size_t k = 0; k < 2; ++k) {
    first(Variable(batches[k]));
    straight(Variable(batches[k]));
  }
  const std::string path = "bn_cumulative_checkpoint.safetensors";
  save_safetensors(path, first.state_dict());
  nn::BatchNorm1d resumed(3, 1e-5, std::nullopt);
  resumed.load_state_dict(load_safetensors(path));
  std::remove(path.c_str());
  CHECK(resumed.num_batches_tracked().item() == 2.0);
  resumed(Variable(batches[2]));
  straight(Variable(batches[2]));
  CHECK(resumed.running_mean().to_vector() == straight.running_mean().to_vector());
  CHECK(resumed.running_var().to_vector() == straight.running_var().to_vector());

  // A fixed momentum still blends as before; eval and track_running_stats = false do not count.
  nn::BatchNorm2d fixed(2);
  fixed(Variable(randn({2, 2, 3, 3}, 34)));
  CHECK(fixed.num_batches_tracked().item() == 1.0);
  CHECK_THROWS_WITH(nn::BatchNorm1d(3, 1e-5, 1.5), Contains("momentum must be in [0, 1] or None, got 1.5"));
}

TEST_CASE("LayerNorm and GroupNorm normalize, hold their parameters and check their input", "[nn][layers]") {
  nn::LayerNorm ln({4});
  CHECK(ln.str() == "LayerNorm([4], eps=1e-05)");
  CHECK(ln.parameters().size() == 2);
  CHECK(ln.named_buffers().empty());
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 10, 10, 10, 14}, {2, 4});
  const Tensor y = ln(Variable(x)).data();
  // Row 0: mean 2.5, biased var 1.25; row 1: mean 11, biased var 3.
  CHECK(y.flat_get(0) == Approx(-1.5 / std::sqrt(1.25 + 1e-5)).epsilon(1e-6));
  CHECK(y.flat_get(7) == Approx(3.0 / std::sqrt(3.0 + 1e-5)).epsilon(1e-6));
  ln.eval();  // no running statistics: eval computes the same
  CHECK(ln(Variable(x)).data().to_vector() == y.to_vector());
  CHECK(nn::LayerNorm({4}, 1e-5, false).parameters().empty());
  CHECK_THROWS_WITH(ln(Variable(zeros({2, 3}))), Contains("layer_norm: the last 1 dims of input f32[2, 3]"));

  nn::GroupNorm gn(2, 4);
  CHECK(gn.str() == "GroupNorm(2, 4, eps=1e-05)");
  CHECK(gn.weight.shape() == Shape{4});
  // Channels {0, 1} and {2, 3} of each sample form the groups.
  const Tensor xg = from_vector(std::vector<double>{1, 3, 5, 5, 2, 2, 2, 6}, {1, 4, 2});
  const Tensor yg = gn(Variable(xg)).data();
  CHECK(yg.flat_get(0) == Approx(-2.5 / std::sqrt(2.75 + 1e-5)).epsilon(1e-6));  // 1 3 5 5: mean 3.5
  CHECK(yg.flat_get(4) == Approx(-1.0 / std::sqrt(3.0 + 1e-5)).epsilon(1e-6));   // 2 2 2 6: mean 3
  CHECK_THROWS_WITH(nn::GroupNorm(3, 4), Contains("GroupNorm: num_channels must be a positive multiple of num_groups"));
  CHECK_THROWS_WITH(gn(Variable(zeros({2, 3, 5}))), Contains("GroupNorm(2, 4, eps=1e-05): expected input [N, 4, ...]"));

  // Mixed precision: f32 parameters stay f32 and get f32 gradients; y is 16-bit.
  for (DType dt : {DType::f16, DType::bf16}) {
    Tape tape;
    const Variable h = gn(Variable(randn({3, 4, 5}, 35).to(dt)));
    CHECK(h.dtype() == dt);
    tape.backward(sum(h * h));
    REQUIRE(gn.weight.grad().has_value());
    CHECK(gn.weight.grad()->g.dtype() == DType::f32);
    gn.zero_grad();
  }
}
