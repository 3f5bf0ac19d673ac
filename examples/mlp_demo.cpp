// mlp_demo: trains a two-layer MLP on a synthetic regression task and prints the loss falling,
// to show the moving parts of mixed-precision training in a small program:
//   parameters in f32 (the masters) -> cast to the compute dtype in forward, on the tape (Mlp)
//   -> loss computed in fp32 (nn::fp32_input) -> backward seeded with {S * ones, S}
//   -> each parameter's gradient arrives as a ScaledGrad {S * dL/dw, S} (printed at step 1)
//   -> the trainer checks it for inf/NaN, unscales it in fp32 and updates the f32 master.
// PrecisionTrainer (optim/trainer.h) does the last three for any policy, including the pure
// ones (16-bit parameters, no masters, rounded updates).
//
//   ./mlp_demo                                            # fp32
//   ./mlp_demo --precision fp16 --loss-scale static:1024
//   ./mlp_demo --precision bf16
//   ./mlp_demo --precision bf16-pure --update-rounding stochastic
//   ./mlp_demo --device cpu                               # default --device auto: cuda:0 if any
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "common.h"
#include "mixtape.h"

using namespace mixtape;

namespace {

// x [B, in] -> relu(x W1^T + b1) W2^T + b2 [B, out], Kaiming-uniform weights.
class Mlp : public nn::Module {
 public:
  Mlp(int64_t in, int64_t hidden, int64_t out, Generator& gen) : Module("Mlp") {
    const double k1 = std::sqrt(6.0 / double(in)), k2 = std::sqrt(6.0 / double(hidden));
    w1 = register_parameter("w1", uniform({hidden, in}, -k1, k1, gen));
    b1 = register_parameter("b1", zeros({hidden}));
    w2 = register_parameter("w2", uniform({out, hidden}, -k2, k2, gen));
    b2 = register_parameter("b2", zeros({out}));
  }

  // The parameters are cast to x's dtype (the compute dtype) with the differentiable cast, so
  // the casts are on the tape and the gradients flow back to the f32 parameters (what
  // nn::Linear does inside).
  Variable forward(const Variable& x) {
    const DType dt = x.dtype();
    const Variable h = relu(linear(x, cast(w1, dt), cast(b1, dt)));
    return linear(h, cast(w2, dt), cast(b2, dt));
  }

  Variable w1, b1, w2, b2;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small MLP on synthetic data under any precision policy."};
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  examples::PrecisionFlags precision;
  precision.add_to(app);
  examples::OptimizerFlags optimizer;  // default SGD
  optimizer.add_to(app);
  examples::DeviceFlag device_flag;
  device_flag.add_to(app);
  int steps = 300, batch = 64, hidden = 64, log_every = 50;
  double lr = 0.05;
  uint64_t seed = 1;
  std::string metrics_path;
  bool smoke = false;
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--hidden", hidden, "hidden units")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--lr", lr, "learning rate")
      ->check(examples::finite)
      ->check(examples::positive)
      ->capture_default_str();
  app.add_option("--seed", seed, "random seed")->check(examples::seed_range)->capture_default_str();
  app.add_option("--metrics", metrics_path, "write JSON Lines metrics to this file");
  app.add_option("--log-every", log_every, "steps between step events and printed losses")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_flag("--smoke", smoke, "100 steps, a step event every 5 (CI smoke run)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (smoke) {  // for the flags not given explicitly
      examples::smoke_default(app, "--steps", steps, 100);
      examples::smoke_default(app, "--log-every", log_every, 5);
    }
    const Device device = device_flag.resolve();
    Generator gen(seed);
    const int64_t in = 8, out = 1;
    // Teacher: y = 2 sigmoid(x . a) + 0.5 tanh(x . b), a fixed random function of 8 inputs.
    const Tensor a = normal({in, 1}, 0.0, 0.5, gen), b = normal({in, 1}, 0.0, 0.5, gen);
    auto teacher = [&](const Tensor& x) { return sigmoid(matmul(x, a)) * 2.0 + tanh(matmul(x, b)) * 0.5; };
    Mlp model(in, hidden, out, gen);
    model.to(device);  // before the trainer: its masters and optimizer state follow the parameters
    PrecisionTrainer trainer(model, optimizer.spec({.kind = OptimizerKind::sgd, .lr = lr}), precision.options(seed));
    train::Metrics metrics(metrics_path);

    std::printf("mlp_demo: %d steps, batch %d, hidden %d\ndevice: %s\nprecision: %s\n", steps, batch, hidden,
                examples::device_description(device, num_threads()).c_str(), trainer.describe().c_str());
    const auto t0 = std::chrono::steady_clock::now();
    double first = 0.0, last = 0.0;
    for (int step = 1; step <= steps; ++step) {
      // The data is drawn and labelled on the CPU (the same numbers on every device) and copied over.
      const Tensor xb = normal({batch, in}, 0.0, 1.0, gen);
      const Tensor yb = teacher(xb).to(device);
      Tape tape;
      trainer.begin_step(tape);
      const Variable pred = model.forward(Variable(trainer.input(xb)));
      const Variable loss = mse_loss(nn::fp32_input(OpId::mse_loss, pred), Variable(yb));  // fp32
      const float scale = trainer.scale();
      trainer.backward(tape, loss);  // seeded with {S * ones, S}
      if (step == 1)
        for (const auto& [name, p] : model.named_parameters())
          std::printf("step 1: %s's gradient arrives as %s {S * dL/d%s, S = %g}\n", name.c_str(),
                      dtype_name(p.grad()->g.dtype()), name.c_str(), double(p.grad()->scale));
      const bool applied = trainer.step();  // check, unscale in fp32, update (or skip)
      metrics.write_telemetry(trainer);
      last = loss.item();
      MT_CHECK(std::isfinite(last) || !applied, "the loss became ", last, " at step ", step);
      if (step == 1) first = last;
      if (step % log_every == 0 || step == steps) {
        std::printf("step %4d  loss %.5f  scale %g%s\n", step, last, double(scale), applied ? "" : "  (skipped)");
        metrics.write({{"event", "step"}, {"step", step}, {"loss", last}, {"scale", scale}, {"skipped", !applied}});
      }
    }
    const double secs = train::seconds_since(t0);
    std::printf("loss %.5f -> %.5f in %.2f s (%.0f steps/s)\n%s\n", first, last, secs, double(steps) / secs,
                train::precision_summary(trainer).c_str());
    nlohmann::json summary = {{"event", "summary"},
                              {"device", device.str()},
                              {"steps", steps},
                              {"first_loss", first},
                              {"final_loss", last},
                              {"wall_s", secs},
                              {"steps_per_s", double(steps) / secs}};
    train::add_precision_summary(summary, trainer);
    metrics.write(summary);
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
