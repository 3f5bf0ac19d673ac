// A complete small model written with mixtape's API: the README shows this file verbatim
// (a test compares them), and CI compiles it both in-tree and against the installed package.
#include <cstdio>

#include "mixtape.h"

using namespace mixtape;

// y = 3 x0 - 2 x1 + 1 is learned by a two-layer MLP.
struct Regressor : nn::Module {
  std::shared_ptr<nn::Linear> hidden, out;
  explicit Regressor(Generator& gen) : Module("Regressor") {
    hidden = register_module("hidden", std::make_shared<nn::Linear>(2, 16, true, gen));
    out = register_module("out", std::make_shared<nn::Linear>(16, 1, true, gen));
  }
  Variable forward(const Variable& x) { return (*out)(relu((*hidden)(x))); }
};

int main() {
  Generator gen(42);
  Regressor model(gen);
  Adam opt(model.parameters(), {.lr = 0.01});
  const Tensor w = from_vector(std::vector<double>{3, -2}, {2, 1});
  double first = 0, last = 0;
  for (int step = 0; step < 500; ++step) {
    const Tensor x = normal({32, 2}, 0.0, 1.0, gen);
    const Tensor y = matmul(x, w) + 1.0;
    Tape tape;  // records the forward pass while in scope
    Variable loss = mse_loss(model.forward(Variable(x)), y);
    tape.backward(loss);  // leaves receive ScaledGrads (scale 1: no loss scaling)
    opt.step();
    opt.zero_grad();
    last = loss.item();
    if (step == 0) first = last;
  }
  std::printf("mse %.4f -> %.6f\n", first, last);
  return last < 0.01 * first ? 0 : 1;
}
