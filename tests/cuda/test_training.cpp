// Training end to end on the GPU against the same training on the CPU: a small CNN (conv, batch
// norm, ReLU, max pool, flatten, linear, cross-entropy) built from one seed, trained on the same
// batches through a PrecisionTrainer on each device, under fp32, fp16 with backoff loss scaling,
// and bf16-pure with stochastically rounded updates. Also: where the trainer puts its state, and
// Module::to(cuda) then back to the CPU returning every parameter and buffer bit for bit.
#include "tests/cuda/cuda_test.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mixtape.h"

using namespace mixtape;
using namespace mixtape::cuda_test;

namespace {

// [B, 1, 8, 8] -> conv 3x3 (1 -> 4, pad 1) - BN - ReLU - maxpool 2 -> [B, 4, 4, 4] -> flatten ->
// linear(64 -> 10). Built on the CPU from `seed`, so both devices start from the same weights.
std::shared_ptr<nn::Sequential> make_small_cnn(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, true, gen),
                                          std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                                          std::make_shared<nn::Linear>(4 * 4 * 4, 10, true, gen));
}

// One batch of 32 images (uniform in [-1, 1)) with random labels, on the CPU, fed `steps` times:
// the model memorizes it, so the loss falls step after step and the comparisons are of a
// training run, not of constants.
struct Batches {
  std::vector<Tensor> x, y;
};
Batches make_batches(int steps, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = uniform({32, 1, 8, 8}, -1.0, 1.0, gen);
  std::vector<int64_t> labels;
  for (double v : uniform({32}, 0.0, 10.0, gen, DType::f64).to_vector())
    labels.push_back(std::min<int64_t>(int64_t(v), 9));
  const Tensor y = from_vector(labels, {32});
  return Batches{std::vector<Tensor>(size_t(steps), x), std::vector<Tensor>(size_t(steps), y)};
}

struct Run {
  std::vector<double> losses;  // per step, before the update
  std::vector<bool> applied;
  int64_t skipped = 0;
  float final_scale = 1.0f;
  std::shared_ptr<nn::Sequential> model;
};

// Trains a fresh model on `device` with SGD (momentum 0.9, lr 0.05): SGD keeps a small difference
// in the gradients a small difference in the weights (Adam's g / sqrt(v) would turn a rounding
// difference in a near-zero gradient into a full-size step).
Run train_on(Device device, const Batches& data, const PrecisionOptions& options) {
  Run r;
  r.model = make_small_cnn(11);
  r.model->to(device);  // before the trainer, as the examples do
  PrecisionTrainer trainer(*r.model, {.kind = OptimizerKind::sgd, .lr = 0.05, .momentum = 0.9}, options);
  REQUIRE(trainer.device() == device);
  for (size_t s = 0; s < data.x.size(); ++s) {
    Tape tape;
    trainer.begin_step(tape);
    const Variable logits = (*r.model)(Variable(trainer.input(data.x[s])));
    REQUIRE(logits.device() == device);
    const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), trainer.input(data.y[s]));
    trainer.backward(tape, loss);
    r.applied.push_back(trainer.step());
    r.losses.push_back(loss.item());
  }
  r.skipped = trainer.skipped();
  r.final_scale = trainer.scale();
  return r;
}

PrecisionOptions policy(nn::Precision p, const std::string& scale, UpdateRounding rounding = UpdateRounding::nearest) {
  PrecisionOptions o;
  o.precision = p;
  o.loss_scale = parse_loss_scale(scale);
  o.rounding = rounding;
  o.seed = 1234;
  return o;
}

// |gpu - cpu| <= rel * max(1, |cpu|) for every step's loss, both finite.
void require_losses_close(const Run& gpu_run, const Run& cpu_run, double rel, const std::string& what) {
  REQUIRE(gpu_run.losses.size() == cpu_run.losses.size());
  for (size_t s = 0; s < cpu_run.losses.size(); ++s) {
    INFO(what << " step " << s + 1 << ": loss on the GPU " << gpu_run.losses[s] << ", on the CPU " << cpu_run.losses[s]
              << " (tolerance " << rel << " relative)");
    REQUIRE(std::isfinite(cpu_run.losses[s]));
    REQUIRE(std::isfinite(gpu_run.losses[s]));
    CHECK(std::fabs(gpu_run.losses[s] - cpu_run.losses[s]) <= rel * std::max(1.0, std::fabs(cpu_run.losses[s])));
  }
}

}  // namespace

TEST_CASE("cuda training fp32: a small CNN's losses and weights match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const Batches data = make_batches(6, 21);
  const PrecisionOptions o = policy(nn::Precision::fp32, "none");
  const Run ref = train_on(Device::cpu(), data, o);
  const Run dev = train_on(gpu(), data, o);
  // Tolerance: every op computes in fp32 on both devices; the GEMM, conv and batch-norm sums run in
  // another order, a relative difference of about K * 2^-24 (K <= 64 terms here: ~4e-6) per op,
  // and six SGD steps at lr 0.05 carry it along without amplifying it much. 1e-4 is 25x that and
  // still 100x below what a wrong kernel does (a dropped bias or a misindexed weight moves the
  // loss by 1e-2 or more).
  require_losses_close(dev, ref, 1e-4, "fp32");
  CHECK(ref.losses.back() < ref.losses.front());  // the run trains: the comparison is not of constants
  // The weights after six steps: fp32, within 1e-4 absolute + 64 ulps (the same order argument).
  const TensorDict wc = ref.model->state_dict(), wg = dev.model->state_dict();
  for (const auto& [name, t] : wc) {
    if (!is_floating(t.dtype())) {
      require_bit_identical(wg.at(name), t, name);  // num_batches_tracked: 6 on both
      continue;
    }
    require_close(wg.at(name), t, "fp32 " + name, 64.0, 1e-4);
  }
}

TEST_CASE("cuda training fp16 with backoff loss scaling: losses and scaler decisions match the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const Batches data = make_batches(8, 22);
  const PrecisionOptions o = policy(nn::Precision::fp16, "backoff");
  const Run ref = train_on(Device::cpu(), data, o);
  const Run dev = train_on(gpu(), data, o);
  // The scaler sees the same overflow on both devices: overflow at scale 2^16 is a matter of
  // orders of magnitude, not of the last bit.
  CHECK(dev.applied == ref.applied);
  CHECK(dev.skipped == ref.skipped);
  CHECK(dev.final_scale == ref.final_scale);
  // Tolerance: every op's output is rounded once to fp16 (unit roundoff 2^-11 = 4.9e-4) from an
  // fp32 result that differs between the devices only by summation order, so an element rounds to
  // a different fp16 neighbour only where the fp32 value sits on a rounding boundary: at most one
  // fp16 ulp on a few elements. The loss (fp32 cross-entropy over 32 samples of fp16 logits) moves
  // by well under one ulp of the logits per step; over eight steps of SGD with the fp32 masters 5e-3
  // relative (10 fp16 ulps) bounds it with room, while a wrong fp16 kernel (no rounding, a second
  // rounding through bf16, a wrong scale) is off by far more: a missing unscale by 2^16 alone moves
  // the loss to inf or NaN.
  require_losses_close(dev, ref, 5e-3, "fp16 backoff");
  CHECK(ref.losses.back() < ref.losses.front());
}

TEST_CASE("cuda training bf16-pure with stochastic rounding: same losses, same random stream as the CPU", "[cuda]") {
  MT_REQUIRE_GPU();
  const Batches data = make_batches(6, 23);
  const PrecisionOptions o = policy(nn::Precision::bf16_pure, "none", UpdateRounding::stochastic);
  {
    // One step: the weights are rounded stochastically from the same Philox words on both devices
    // (seed 1234, the same offsets), so an element can differ only where the fp32 value before
    // rounding differs enough to cross the random threshold: a bf16-ulp-sized difference in the
    // gradient moves it by lr * |g| * 2^-8, a small fraction of the weight's own ulp. With
    // independent random streams about a third of the stochastically rounded elements would differ
    // (2p(1-p) averaged over the fraction p); with the same stream nearly none. 90% identical
    // separates the two.
    const Batches one{{data.x[0]}, {data.y[0]}};
    const Run ref = train_on(Device::cpu(), one, o);
    const Run dev = train_on(gpu(), one, o);
    // Name by name (named_parameters lists them in registration order on both models).
    const auto pc = ref.model->named_parameters(), pg = dev.model->named_parameters();
    REQUIRE(pc.size() == pg.size());
    size_t same = 0, total = 0;
    for (size_t i = 0; i < pc.size(); ++i) {
      REQUIRE(pc[i].first == pg[i].first);
      REQUIRE(pc[i].second.dtype() == DType::bf16);
      const std::vector<uint64_t> a = element_bits(pc[i].second.data()), b = element_bits(pg[i].second.data());
      REQUIRE(a.size() == b.size());
      for (size_t k = 0; k < a.size(); ++k) same += a[k] == b[k];
      total += a.size();
    }
    INFO(same << " of " << total << " bf16 weights bit-identical after one step");
    CHECK(double(same) >= 0.9 * double(total));
  }
  const Run ref = train_on(Device::cpu(), data, o);
  const Run dev = train_on(gpu(), data, o);
  // Tolerance: every op rounds its output once to bf16 (unit roundoff 2^-8 = 3.9e-3), and the
  // weights themselves are bf16, so a one-ulp difference in a weight is 0.4-0.8% of it. After six
  // steps the losses differ by a few bf16 ulps of the logits at most: 3e-2 relative (about 8
  // bf16 ulps) bounds that, while a wrong update kernel (no update, a wrong sign, a wrong learning
  // rate) leaves the training curve, which falls by more than that over six steps.
  require_losses_close(dev, ref, 3e-2, "bf16-pure stochastic");
  CHECK(ref.losses.back() < ref.losses.front());
}

TEST_CASE("cuda PrecisionTrainer keeps masters and optimizer state on the parameters' device", "[cuda]") {
  MT_REQUIRE_GPU();
  const Batches data = make_batches(2, 24);
  for (const auto& [p, scale] :
       {std::pair{nn::Precision::fp16, "backoff"}, std::pair{nn::Precision::bf16_pure, "none"}}) {
    auto model = make_small_cnn(11);
    model->to(gpu());
    PrecisionTrainer trainer(*model, {.kind = OptimizerKind::adamw, .lr = 1e-3}, policy(p, scale));
    CHECK(trainer.device() == gpu());
    for (size_t s = 0; s < data.x.size(); ++s) {
      Tape tape;
      trainer.begin_step(tape);
      const Tensor x = trainer.input(data.x[s]);
      CHECK(x.device() == gpu());
      CHECK(x.dtype() == trainer.compute_dtype());
      const Tensor y = trainer.input(data.y[s]);
      CHECK(y.device() == gpu());
      CHECK(y.dtype() == DType::i64);  // labels move but are not cast
      const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, (*model)(Variable(x))), y);
      trainer.backward(tape, loss);
      trainer.step();
    }
    const TensorDict state = trainer.state_dict();
    CHECK(!state.tensors.empty());  // AdamW moments exist after two steps
    for (const auto& [name, t] : state.tensors) {
      INFO(nn::precision_name(p) << ": trainer state '" << name << "' " << t.meta());
      CHECK(t.device() == gpu());
    }
    for (const auto& [name, v] : model->named_parameters()) {
      INFO(name << " " << v.data().meta());
      CHECK(v.device() == gpu());
    }
  }
  // A model split over two devices is refused before the trainer changes anything.
  auto split = make_small_cnn(11);
  split->children().front()->to(gpu());
  CHECK_THROWS_WITH(
      PrecisionTrainer(*split, {.kind = OptimizerKind::sgd, .lr = 0.1}, policy(nn::Precision::fp32, "none")),
      Catch::Contains("move the whole model with Module::to(device)"));
}

TEST_CASE("cuda Module::to(cuda) and back returns every parameter and buffer bit for bit", "[cuda]") {
  MT_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    auto model = make_small_cnn(31);
    if (dt != DType::f32) model->to(dt);
    // Running statistics that are not the initial 0 and 1, and a counter that is not 0.
    {
      Generator gen(5);
      NoGrad ng;
      for (int i = 0; i < 3; ++i) (*model)(Variable(uniform({4, 1, 8, 8}, -2.0, 2.0, gen, dt)));
    }
    const TensorDict before = model->state_dict();
    std::vector<std::pair<std::string, Tensor>> snapshot;
    for (const auto& [name, t] : before) snapshot.emplace_back(name, t.clone());
    const std::vector<Variable> params = model->parameters();

    model->to(gpu());
    for (const auto& [name, t] : model->state_dict()) {
      INFO(name << " " << t.meta());
      CHECK(t.device() == gpu());
    }
    // A training-mode forward on the GPU counts one more batch (num_batches_tracked lives there too).
    {
      Generator gen(6);
      NoGrad ng;
      (*model)(Variable(on_gpu(uniform({4, 1, 8, 8}, -2.0, 2.0, gen, dt))));
    }
    const Tensor count = model->state_dict().at("1.num_batches_tracked");
    CHECK(count.device() == gpu());
    CHECK(count.item() == 4.0);
    // Put the statistics back as they were (copied from the CPU snapshot) before the round trip.
    {
      NoGrad ng;
      for (const auto& [name, t] : model->state_dict())
        if (name.starts_with("1.running") || name == "1.num_batches_tracked") {
          Tensor dst = t;
          for (const auto& [n, s] : snapshot)
            if (n == name) dst.copy_(s.to(gpu()));
        }
    }

    model->to(Device::cpu());
    const std::vector<Variable> after_params = model->parameters();
    REQUIRE(after_params.size() == params.size());
    for (size_t i = 0; i < params.size(); ++i) CHECK(after_params[i].same(params[i]));  // same Variables
    const TensorDict after = model->state_dict();
    for (const auto& [name, t] : snapshot) {
      INFO(dtype_name(dt) << " " << name);
      CHECK(after.at(name).device() == Device::cpu());
      require_bit_identical(after.at(name), t, std::string(dtype_name(dt)) + " round trip of " + name);
    }
  }
}

// ---- the training step without host round trips (Note [Scaled step], docs/design.md section 7) -------

namespace {

// [B, 1, 8, 8] -> conv(1 -> 4) - BN - ReLU - maxpool 2 -> conv(4 -> 8) - BN - ReLU - maxpool 2 ->
// flatten -> linear(32 -> 16) - ReLU - linear(16 -> 10): the cnn example's layers, small.
std::shared_ptr<nn::Sequential> make_cnn_like(uint64_t seed) {
  Generator gen(seed);
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(4, 8, 3, 1, 1, 1, true, gen), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(8 * 2 * 2, 16, true, gen), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 10, true, gen));
}

// The runtime counters of what ran between construction and the call.
struct Counted {
  cuda::RuntimeCounters at = cuda::runtime_counters();
  cuda::RuntimeCounters since() const {
    const cuda::RuntimeCounters now = cuda::runtime_counters();
    return {now.launches - at.launches, now.host_syncs - at.host_syncs, now.device_allocs - at.device_allocs};
  }
};

}  // namespace

TEST_CASE(
    "cuda training step fp16 backoff AdamW: no host synchronization, few launches, no allocation after the "
    "first step",
    "[cuda]") {
  MT_REQUIRE_GPU();
  auto model = make_cnn_like(41);
  model->to(gpu());
  PrecisionOptions o = policy(nn::Precision::fp16, "backoff");
  o.max_grad_norm = 1.0;  // clipping's norm on the device too
  PrecisionTrainer trainer(*model, {.kind = OptimizerKind::adamw, .lr = 1e-3}, o);
  REQUIRE(trainer.scaler().on_device());
  const Batches data = make_batches(6, 42);
  // The batches go to the device before the steps are counted: what is measured is the step.
  std::vector<Tensor> xs, ys;
  for (size_t s = 0; s < data.x.size(); ++s) {
    xs.push_back(trainer.input(data.x[s]));
    ys.push_back(trainer.input(data.y[s]));
  }
  Tensor losses = readout_zeros({int64_t(xs.size())}, DType::f32, gpu());  // the loop's loss log
  for (size_t s = 0; s < xs.size(); ++s) {
    const Counted counted;
    Tape tape;
    trainer.begin_step(tape);
    const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, (*model)(Variable(xs[s]))), ys[s]);
    trainer.backward(tape, loss);
    trainer.step();
    Tensor slot = losses.narrow(0, int64_t(s), 1);
    slot.copy_(loss.data().reshape({1}));
    const cuda::RuntimeCounters c = counted.since();
    INFO("step " << s + 1 << ": " << c.launches << " launches, " << c.host_syncs << " host synchronizations, "
                 << c.device_allocs << " device allocations");
    if (s == 0) continue;  // the first step allocates what the others reuse
    CHECK(c.host_syncs == 0);
    CHECK(c.launches <= 80);
    CHECK(c.device_allocs == 0);
  }
  // A step that logs reads everything in one synchronization: the losses, the scale, the skip
  // flag and the gradient norm all come with the read of the readout block.
  const Counted logging;
  const std::vector<double> l = losses.to_vector();
  const float scale = trainer.last_scale();
  const bool applied = trainer.last_applied();
  const double norm = trainer.last_grad_norm();
  CHECK(trainer.steps() == 6);
  CHECK(logging.since().host_syncs == 1);
  CHECK(applied);
  CHECK(scale == 65536.0f);
  CHECK(norm > 0.0);
  CHECK(l.back() < l.front());  // it trains
}

TEST_CASE("cuda training step: the skip decided on the device skips (an inf in one gradient)", "[cuda]") {
  MT_REQUIRE_GPU();
  auto model = make_cnn_like(43);
  model->to(gpu());
  PrecisionTrainer trainer(*model, {.kind = OptimizerKind::adamw, .lr = 1e-2, .weight_decay = 1e-2},
                           policy(nn::Precision::fp16, "backoff"));
  REQUIRE(trainer.scaler().on_device());
  const Batches data = make_batches(3, 44);
  const auto run_step = [&](size_t s, bool plant_inf) {
    Tape tape;
    trainer.begin_step(tape);
    const Variable loss = cross_entropy(
        nn::fp32_input(OpId::cross_entropy, (*model)(Variable(trainer.input(data.x[s])))), trainer.input(data.y[s]));
    trainer.backward(tape, loss);
    if (plant_inf) {  // one element of one weight gradient becomes inf
      Tensor g = model->parameters()[2].grad()->g;
      g.narrow(0, 0, 1).copy_(on_gpu(full({1}, INFINITY, g.dtype())).reshape(g.narrow(0, 0, 1).shape()));
    }
    return trainer.step();
  };
  CHECK(run_step(0, false).applied());
  const auto snapshot = [&] {
    std::vector<Tensor> w;
    for (const Variable& p : model->parameters()) w.push_back(on_cpu(p.data()));
    for (const auto& [name, t] : trainer.state_dict().tensors) w.push_back(on_cpu(t));
    return w;
  };
  const std::vector<Tensor> before = snapshot();
  const float scale = trainer.scale();
  const int64_t count = trainer.optimizer().step_count(0);
  const StepReport r = run_step(1, true);
  CHECK_FALSE(r.applied());
  CHECK(r.check().found_inf);
  CHECK(r.grad_norm() == 0.0);
  CHECK(trainer.scale() == scale / 2);  // backed off
  CHECK(trainer.last_scale() == scale);
  CHECK(trainer.skipped() == 1);
  CHECK(trainer.optimizer().step_count(0) == count);  // the skipped step does not count
  const std::vector<Tensor> after = snapshot();
  REQUIRE(after.size() == before.size());
  for (size_t k = 0; k < before.size(); ++k)
    require_bit_identical(after[k], before[k],
                          "weights and optimizer state after a skipped step, tensor " + std::to_string(k));
  // The next clean step applies again at the lower scale.
  CHECK(run_step(2, false).applied());
  CHECK(trainer.last_scale() == scale / 2);
  CHECK(trainer.optimizer().step_count(0) == count + 1);
}

TEST_CASE("cuda training step decided on the device matches the same step decided on the host", "[cuda]") {
  MT_REQUIRE_GPU();
  // The same model, batches and AdamW on the GPU, once with the backoff scaler's state on the device
  // (Note [Loss scale on the device]) and once on the host: the gradients are the same bits, so
  // the weights differ only by the device's pow in Adam's bias corrections (the same bits on the
  // emulated device) and the order of the norm's sum (clipping at 0.5 is active).
  const Batches data = make_batches(4, 45);
  std::vector<std::vector<Tensor>> weights;
  for (bool on_device : {true, false}) {
    auto model = make_cnn_like(46);
    model->to(gpu());
    nn::apply_precision(*model, nn::Precision::fp16);
    std::vector<Variable> params = model->parameters();
    MasterWeights mw(
        params, [](std::vector<Variable> m) { return std::make_unique<AdamW>(std::move(m), AdamWOptions{.lr = 1e-2}); },
        {.max_grad_norm = 0.5});
    BackoffLossScaler scaler({.init_scale = 1024.0f, .growth_interval = 2});
    if (on_device) scaler.keep_on(gpu());
    for (size_t s = 0; s < data.x.size(); ++s) {
      Tape tape;
      const Variable x(on_gpu(data.x[s]).to(DType::f16));
      const Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, (*model)(x)), on_gpu(data.y[s]));
      tape.backward(loss, scaler.seed(loss));
      CHECK(mw.step(scaler).applied());
    }
    CHECK(scaler.scale() == 4096.0f);  // grown twice
    std::vector<Tensor> w;
    for (size_t i = 0; i < params.size(); ++i) w.push_back(on_cpu(mw.master(i).data()));
    weights.push_back(w);
  }
  for (size_t k = 0; k < weights[0].size(); ++k)
    require_close(weights[0][k], weights[1][k], "master " + std::to_string(k), 16.0, 1e-6);
}
