// mlp_demo: trains a two-layer MLP on a synthetic regression task through the tape and prints
// the loss falling. It shows the moving parts of mixed-precision training in ~100 lines:
//   fp32 master weights -> cast to the compute dtype in forward (recorded on the tape)
//   -> loss cast back to fp32 -> backward seeded with {S * ones, S} (static loss scaling)
//   -> each parameter's ScaledGrad unscaled in fp32 -> SGD update on the fp32 master.
//
//   ./mlp_demo                      # fp32
//   ./mlp_demo --dtype f16 --loss-scale 1024
//   ./mlp_demo --dtype bf16
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "mixtape.h"

using namespace mixtape;

namespace {

struct Mlp {
  Variable w1, b1, w2, b2;  // fp32 masters

  Mlp(int64_t in, int64_t hidden, int64_t out, Generator& gen) {
    const double k1 = std::sqrt(6.0 / double(in)), k2 = std::sqrt(6.0 / double(hidden));  // Kaiming uniform
    w1 = Variable(uniform({hidden, in}, -k1, k1, gen), true, "w1");
    b1 = Variable(zeros({hidden}), true, "b1");
    w2 = Variable(uniform({out, hidden}, -k2, k2, gen), true, "w2");
    b2 = Variable(zeros({out}), true, "b2");
  }
  std::vector<Variable> params() const { return {w1, b1, w2, b2}; }

  // The casts are on the tape, so gradients flow back to the fp32 masters.
  Variable forward(const Variable& x, DType compute) const {
    Variable h = relu(linear(x, cast(w1, compute), cast(b1, compute)));
    return linear(h, cast(w2, compute), cast(b2, compute));
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small MLP on synthetic data through the mixtape tape."};
  std::string dtype_name_arg = "f32";
  float loss_scale = 1.0f;
  int steps = 300, batch = 64, hidden = 64;
  double lr = 0.05;
  uint64_t seed = 1;
  app.add_option("--dtype", dtype_name_arg, "compute dtype: f32, f16 or bf16")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  app.add_option("--loss-scale", loss_scale, "static loss scale S (a power of two)");
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 1000000));
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 1 << 20));
  app.add_option("--hidden", hidden, "hidden units")->check(CLI::Range(1, 1 << 16));
  app.add_option("--lr", lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "random seed");
  CLI11_PARSE(app, argc, argv);

  try {
    const DType compute = dtype_from_name(dtype_name_arg);
    MT_CHECK(is_power_of_two(loss_scale), "--loss-scale must be a power of two, got ", loss_scale);
    Generator gen(seed);
    const int64_t in = 8, out = 1;
    // Teacher: y = sin(x . a) + 0.5 * tanh(x . b), a fixed random function of 8 inputs.
    const Tensor a = normal({in, 1}, 0.0, 0.5, gen), b = normal({in, 1}, 0.0, 0.5, gen);
    auto teacher = [&](const Tensor& x) {
      return sigmoid(matmul(x, a)) * 2.0 + tanh(matmul(x, b)) * 0.5;
    };
    Mlp model(in, hidden, out, gen);

    std::printf("mlp_demo: %d steps, batch %d, hidden %d, compute %s, loss scale %g\n", steps, batch, hidden,
                dtype_name(compute), double(loss_scale));
    const auto t0 = std::chrono::steady_clock::now();
    double first = 0.0, last = 0.0;
    for (int step = 1; step <= steps; ++step) {
      const Tensor xb = normal({batch, in}, 0.0, 1.0, gen);
      const Tensor yb = teacher(xb);
      Tape tape;
      Variable pred = model.forward(Variable(xb.to(compute)), compute);
      Variable loss = mse_loss(cast(pred, DType::f32), Variable(yb));  // the loss runs in fp32
      tape.backward(loss, loss_scale);
      {
        NoGrad no_grad;
        for (Variable p : model.params()) {
          const Tensor g = p.grad()->unscaled();  // g / S in fp32: the one unscale
          p.set_data(p.data() - g * lr);          // update the fp32 master
          p.zero_grad();
        }
      }
      last = loss.item();
      if (step == 1) first = last;
      if (step == 1 || step % 50 == 0 || step == steps) std::printf("step %4d  loss %.5f\n", step, last);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("loss %.5f -> %.5f in %.2f s (%.0f steps/s)\n", first, last, secs, double(steps) / secs);
    if (!(last < first)) {
      std::fprintf(stderr, "mlp_demo: the loss did not fall\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_demo: %s\n", e.what());
    return 2;
  }
  return 0;
}
