// Initializers: gains, fans, bounds and moments on large tensors, default layer inits, DCGAN.
#include "support/catch.h"

#include <cmath>

#include "mixtape.h"
#include "nn/nn.h"

using namespace mixtape;
namespace init = mixtape::nn::init;
using Catch::Contains;

namespace {

struct Moments {
  double mean = 0, std = 0, max_abs = 0;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= double(v.size());
  for (double x : v) {
    m.std += (x - m.mean) * (x - m.mean);
    m.max_abs = std::max(m.max_abs, std::abs(x));
  }
  m.std = std::sqrt(m.std / double(v.size()));
  return m;
}

}  // namespace

TEST_CASE("gains and fans follow torch.nn.init", "[nn][init]") {
  CHECK(init::calculate_gain(init::Nonlinearity::linear) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::sigmoid) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::tanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::relu) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu, 0.0) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::leaky_relu, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3.0)));
  const init::Fans f = init::calculate_fans({32, 16, 3, 5});
  CHECK(f.fan_in == 16 * 15);
  CHECK(f.fan_out == 32 * 15);
  CHECK(init::calculate_fans({7, 9}).fan_in == 9);
  CHECK_THROWS_WITH(init::calculate_fans({7}), Contains("at least 2 dims"));
}

TEST_CASE("kaiming and xavier initializers hit their bounds and standard deviations", "[nn][init]") {
  Generator gen(123);
  const Tensor w = empty({256, 512});           // 131072 draws: the std estimate is good to ~0.5%
  const double bound = std::sqrt(6.0 / 512.0);  // relu gain sqrt(2) * sqrt(3 / fan_in)
  init::kaiming_uniform_(w, gen);
  Moments m = moments(w);
  CHECK(m.max_abs <= bound);
  CHECK(m.max_abs >= 0.999 * bound);
  CHECK(m.std == Approx(bound / std::sqrt(3.0)).epsilon(0.01));
  CHECK(std::abs(m.mean) < 0.01 * bound);

  init::kaiming_normal_(w, gen, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu);
  m = moments(w);
  CHECK(m.std == Approx(std::sqrt(2.0 / 256.0)).epsilon(0.01));
  CHECK(std::abs(m.mean) < 0.01 * m.std);

  init::xavier_uniform_(w, gen, 2.0);
  m = moments(w);
  const double xb = 2.0 * std::sqrt(6.0 / (256.0 + 512.0));
  CHECK(m.max_abs <= xb);
  CHECK(m.std == Approx(xb / std::sqrt(3.0)).epsilon(0.01));

  init::xavier_normal_(w, gen);
  CHECK(moments(w).std == Approx(std::sqrt(2.0 / 768.0)).epsilon(0.01));

  init::normal_(w, gen, 3.0, 0.5);
  m = moments(w);
  CHECK(m.mean == Approx(3.0).epsilon(0.005));
  CHECK(m.std == Approx(0.5).epsilon(0.01));
  init::uniform_(w, gen, 2.0, 4.0);
  m = moments(w);
  CHECK(m.mean == Approx(3.0).epsilon(0.005));
  CHECK(m.max_abs <= 4.0);

  init::constant_(w, 0.25);
  CHECK(moments(w).mean == 0.25);
  CHECK(moments(w).std == 0.0);
  init::ones_(w);
  CHECK(moments(w).mean == 1.0);
  init::zeros_(w);
  CHECK(moments(w).max_abs == 0.0);

  // 16-bit tensors get the draws rounded once; f64 tensors are filled in f64.
  const Tensor h = empty({64, 64}, DType::bf16);
  init::kaiming_uniform_(h, gen);
  CHECK(moments(h).max_abs <= std::sqrt(6.0 / 64.0) * (1 + dtype_eps(DType::bf16)));
  CHECK_THROWS_WITH(init::kaiming_uniform_(empty({3}), gen), Contains("at least 2 dims"));
  CHECK_THROWS_WITH(init::normal_(from_vector(std::vector<int64_t>{1}, {1}), gen), Contains("floating"));
}

TEST_CASE("default layer inits follow torch and are reproducible from a seed", "[nn][init]") {
  Generator g1(7);
  nn::Linear lin(400, 300, g1);
  Moments m = moments(lin.weight.data());
  const double bound = 1.0 / std::sqrt(400.0);
  CHECK(m.max_abs <= bound);
  CHECK(m.max_abs >= 0.99 * bound);
  CHECK(m.std == Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  CHECK(moments(lin.bias.data()).max_abs <= bound);

  nn::Conv2d conv(16, 64, 3, 1, 0, 1, true, g1);
  const double cb = 1.0 / std::sqrt(16.0 * 9.0);
  CHECK(moments(conv.weight.data()).max_abs <= cb);
  CHECK(moments(conv.weight.data()).max_abs >= 0.98 * cb);
  CHECK(moments(conv.bias.data()).max_abs <= cb);

  // torch's fan_in of a transposed-conv weight [in, out, k, k] is out * k * k.
  nn::ConvTranspose2d up(64, 8, 4, 2, 1, 0, 1, true, g1);
  const double ub = 1.0 / std::sqrt(8.0 * 16.0);
  CHECK(moments(up.weight.data()).max_abs <= ub);
  CHECK(moments(up.weight.data()).max_abs >= 0.98 * ub);

  nn::LSTM lstm(10, 25, 2, true, false, 0.0, false, g1);
  for (const Variable& p : lstm.parameters()) { CHECK(moments(p.data()).max_abs <= 0.2); }
  CHECK(moments(lstm.layers()[0].weight_hh.data()).max_abs >= 0.19);

  nn::BatchNorm2d bn(4);
  CHECK(bn.weight.data().to_vector() == std::vector<double>(4, 1.0));
  CHECK(bn.bias.data().to_vector() == std::vector<double>(4, 0.0));
  CHECK(bn.running_var().to_vector() == std::vector<double>(4, 1.0));

  nn::Embedding emb(100, 50, g1);
  CHECK(moments(emb.weight.data()).std == Approx(1.0).epsilon(0.05));

  // Same seed, same model; another seed, another model.
  Generator a(99), b(99), c(100);
  nn::Linear la(5, 5, a), lb(5, 5, b), lc(5, 5, c);
  CHECK(la.weight.data().to_vector() == lb.weight.data().to_vector());
  CHECK(la.bias.data().to_vector() == lb.bias.data().to_vector());
  CHECK(la.weight.data().to_vector() != lc.weight.data().to_vector());
}

TEST_CASE("dcgan_init draws conv weights from N(0, 0.02) and batch-norm weights from N(1, 0.02)", "[nn][init]") {
  Generator gen(1);
  nn::Sequential g(std::make_shared<nn::ConvTranspose2d>(64, 32, 4, 2, 1, 0, 1, false, gen),
                   std::make_shared<nn::BatchNorm2d>(2048), std::make_shared<nn::ReLU>(),
                   std::make_shared<nn::Conv2d>(32, 32, 4, 2, 1, 1, true, gen),
                   std::make_shared<nn::Linear>(8, 8, gen));
  const std::vector<double> conv_bias = g.at<nn::Conv2d>(3)->bias.data().to_vector();
  const std::vector<double> lin_w = g.at<nn::Linear>(4)->weight.data().to_vector();
  auto bn = g.at<nn::BatchNorm2d>(1);
  init::constant_(bn.get()->bias, 5.0);
  Generator ig(2);
  init::dcgan_init(g, ig);

  for (const Tensor& w : {g.at<nn::ConvTranspose2d>(0)->weight.data(), g.at<nn::Conv2d>(3)->weight.data()}) {
    const Moments m = moments(w);
    CHECK(std::abs(m.mean) < 0.001);
    CHECK(m.std == Approx(0.02).epsilon(0.03));
  }
  const Moments mb = moments(bn->weight.data());
  CHECK(mb.mean == Approx(1.0).epsilon(0.002));
  CHECK(mb.std == Approx(0.02).epsilon(0.05));
  CHECK(moments(bn->bias.data()).max_abs == 0.0);
  // Untouched: conv biases and other layers.
  CHECK(g.at<nn::Conv2d>(3)->bias.data().to_vector() == conv_bias);
  CHECK(g.at<nn::Linear>(4)->weight.data().to_vector() == lin_w);
}
