// The training setups fuzz_checkpoint restores checkpoints into (fuzz/checkpoint.cpp), shared
// with make_seeds.cpp, which saves a checkpoint of each after two steps as the harness's seeds.
// Each setup is a small MLP under one precision policy, optimizer and loss scaler, chosen so that
// together they hold every kind of state a checkpoint carries: Adam's and RMSprop's moments, SGD's
// momentum, Adagrad's sums, the pure policies' Philox position and Kahan buffers, the backoff and
// LogMax scalers, the gradient-scaling rule's cached scales, the fp8 delayed recipe's amax
// histories, a learning-rate schedule and a dropout generator.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mixtape.h"

namespace fuzz {

struct CheckpointSetup {
  const char* name;
  const char* precision;
  const char* loss_scale;
  mixtape::OptimizerSpec optimizer;
  mixtape::UpdateRounding rounding = mixtape::UpdateRounding::stochastic;
  bool delayed_fp8 = false;
};

inline std::vector<CheckpointSetup> checkpoint_setups() {
  using mixtape::OptimizerKind;
  using mixtape::UpdateRounding;
  return {
      {"fp16-adam-backoff", "fp16", "backoff", {.kind = OptimizerKind::adam, .lr = 1e-2, .amsgrad = true}},
      {"bf16pure-sgd-kahan",
       "bf16-pure",
       "none",
       {.kind = OptimizerKind::sgd, .lr = 0.1, .momentum = 0.9},
       UpdateRounding::kahan},
      {"fp16-rmsprop-gradient",
       "fp16",
       "gradient",
       {.kind = OptimizerKind::rmsprop, .lr = 1e-3, .momentum = 0.5, .centered = true}},
      {"bf16pure-adagrad-logmax", "bf16-pure", "logmax", {.kind = OptimizerKind::adagrad, .lr = 1e-2}},
      {"fp8-adamw-delayed", "fp8", "none", {.kind = OptimizerKind::adamw, .lr = 1e-3, .weight_decay = 0.01}, {}, true},
  };
}

// A model with what trains it, built the same way for the same setup every time.
struct CheckpointRun {
  std::shared_ptr<mixtape::nn::Sequential> model;
  std::unique_ptr<mixtape::PrecisionTrainer> trainer;
  std::unique_ptr<mixtape::LRScheduler> sched;
  mixtape::train::RunIdentity identity;
};

inline CheckpointRun make_checkpoint_run(const CheckpointSetup& s) {
  using namespace mixtape;
  CheckpointRun r;
  Generator gen(3);
  auto hidden = std::make_shared<nn::Linear>(16, 32, true, gen);  // one statement each: a fixed draw order
  auto out = std::make_shared<nn::Linear>(32, 16, true, gen);
  r.model = std::make_shared<nn::Sequential>(hidden, std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Dropout>(0.25, uint64_t(7)), out);
  PrecisionOptions p;
  p.precision = nn::precision_from_name(s.precision);
  p.loss_scale = parse_loss_scale(s.loss_scale);
  p.rounding = s.rounding;
  p.seed = 11;
  if (s.delayed_fp8) {
    p.fp8.recipe = Fp8Recipe::delayed;
    p.fp8.amax_history_len = 4;
  }
  r.trainer = std::make_unique<PrecisionTrainer>(*r.model, s.optimizer, p);
  r.sched = std::make_unique<LRScheduler>(r.trainer->optimizer(), CosineAnnealingLR(100));
  r.identity = {{"program", "fuzz_checkpoint"}, {"setup", s.name}};
  mixtape::train::add_precision_identity(r.identity, *r.trainer);
  return r;
}

// One training step on a fixed batch of 8 (a regression onto the input).
inline void checkpoint_train_step(CheckpointRun& r) {
  using namespace mixtape;
  Generator gen(5);
  const Tensor x = normal({8, 16}, 0.0, 1.0, gen);
  Tape tape;
  r.trainer->begin_step(tape);
  const Variable y = (*r.model)(Variable(r.trainer->input(x)));
  const Variable loss = mse_loss(nn::fp32_input(OpId::mse_loss, y), x);
  r.trainer->backward(tape, loss);
  r.trainer->step();
  r.sched->step();
}

// The checkpoint of `r` as the example programs save it (without the run's identity, which
// Checkpointer::save adds).
inline mixtape::TensorDict checkpoint_of(const CheckpointRun& r, int64_t step) {
  mixtape::TensorDict ckpt;
  mixtape::train::add_training_state(ckpt, "", *r.model, *r.trainer, r.sched.get());
  ckpt.set_meta("progress.step", std::to_string(step));
  return ckpt;
}

}  // namespace fuzz
