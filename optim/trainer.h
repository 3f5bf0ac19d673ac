// The training step of a precision policy (docs/design.md section 5), for any model: everything
// between "the model computed a loss" and "the parameters moved", chosen at run time.
//
//   PrecisionOptions p{.precision = nn::Precision::fp16, .loss_scale = parse_loss_scale("backoff")};
//   PrecisionTrainer trainer(model, {.kind = OptimizerKind::adamw, .lr = 1e-3}, p);
//   for (...) {
//     Tape tape;
//     trainer.begin_step(tape);                             // scaling rule and telemetry
//     Variable logits = model(trainer.input(x));             // x on the model's device, in the compute dtype
//     Variable loss = cross_entropy(nn::fp32_input(OpId::cross_entropy, logits), y);
//     trainer.backward(tape, loss);                         // seeded with the loss scale
//     bool applied = trainer.step();                        // check, skip or update
//   }
//
// What each policy builds (Note [Precision trainer]):
//   fp32, fp16, bf16   the parameters stay f32 and are their own masters; MasterWeights drives
//                      an SGD / Adam / AdamW / RMSprop / Adagrad over them: gradients arrive from the casts in
//                      module forward as {g, scale} in f32, are checked for inf/NaN, unscaled
//                      per parameter in fp32, clipped, and applied in fp32 (weight decay too).
//   fp8                as bf16, with an Fp8Context (autograd/fp8.h) on every tape begin_step()
//                      sees: the GEMM-like ops read their operands in 8 bits (options.fp8).
//   fp16-pure,         the model's parameters are converted to 16 bits (nn::apply_precision)
//   bf16-pure          and the same optimizer over them (SGD16, AdamW16, ...: Note [Storage policy] in
//                      optim/optimizer.h) updates them in place with the chosen rounding (nearest,
//                      stochastic, Kahan; optim/pure16.h); scaled_step() does the
//                      check, skip, unscale and clip.
// The loss scale is one of LossScaleSpec's kinds. "gradient" is Zhao et al.'s per-operator
// gradient scaling (autograd/gradient_scaling.h): a GradientScalingRule on every tape begin_step() sees, a loss
// scale of 1, and the same inf/NaN check and skip as a static scale.
//
// Device: the trainer works where the model's parameters are. Move the model first
// (model.to(Device::cuda(0))), then build the trainer: masters, optimizer state and Kahan buffers
// are created next to the parameters; input() moves each batch there. All parameters must be on
// one device. On a GPU, under the fp32 and mixed policies with Adam or AdamW (without amsgrad), a
// loss scale of none, static, backoff or gradient, and no value clipping, the step decides on the
// device (Note [Scaled step]): the
// scaler's state lives there (Note [Loss scale on the device]), and scale(), steps(),
// skipped(), last_grad_norm() and the step's report read it when asked.
//
// Telemetry (autograd/telemetry.h) is off unless telemetry_every > 0; on a sampled step the
// tape reports every gradient to it and a RoundingCensus (tensor/core/rounding_census.h) counts what the
// backward pass rounded to 16 bits, the underflow measured where it happens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/fp8.h"
#include "autograd/telemetry.h"
#include "autograd/gradient_scaling.h"
#include "dist/data_parallel.h"
#include "nn/module.h"
#include "nn/precision.h"
#include "optim/loss_scaler.h"
#include "optim/master_weights.h"
#include "optim/optimizer_kinds.h"
#include "optim/pure16.h"

namespace mixtape {

// sgd, adam, adamw, rmsprop, adagrad (optim/optimizer_kinds.h).
enum class OptimizerKind : uint8_t {
#define MIXTAPE_KIND(kind, Class) kind,
  MIXTAPE_OPTIMIZERS(MIXTAPE_KIND)
#undef MIXTAPE_KIND
};
// The settings of any optimizer by kind; each kind reads those it has.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;
  double weight_decay = 0.0;
  double momentum = 0.0;  // sgd, rmsprop
  bool nesterov = false;  // sgd, fp32 and mixed policies only
  double beta1 = 0.9;     // adam, adamw
  double beta2 = 0.999;
  // adam, adamw, rmsprop, adagrad; nullopt: the optimizer's own default (1e-8, Adagrad's 1e-10)
  std::optional<double> eps;
  bool amsgrad = false;                    // adam, adamw
  double alpha = 0.99;                     // rmsprop
  bool centered = false;                   // rmsprop
  double lr_decay = 0.0;                   // adagrad
  double initial_accumulator_value = 0.0;  // adagrad
};
const char* optimizer_kind_name(OptimizerKind k);  // "SGD", "Adam", "AdamW", "RMSprop", "Adagrad"
// "sgd", "adam", "adamw", "rmsprop", "adagrad" (as the examples' --optimizer takes them); throws,
// listing the choices, on anything else.
OptimizerKind optimizer_kind_from_name(const std::string& name);
// The --optimizer choices, "sgd, adam, adamw, rmsprop or adagrad".
std::string optimizer_kind_choices();

// The optimizer of `spec` over `params`: f32 (or f64) parameters, or the 16-bit parameters of a
// pure policy, updated under `rounding` from the Philox stream of `seed` (Note [Storage policy]
// in optim/optimizer.h). Throws for options the kind does not have (amsgrad, Nesterov).
std::unique_ptr<Optimizer> make_optimizer(std::vector<Variable> params, const OptimizerSpec& spec,
                                          UpdateRounding rounding = UpdateRounding::stochastic, uint64_t seed = 0);
// Each kind's own factory, beside its class (make_sgd in optim/sgd.cpp, ...).
#define MIXTAPE_MAKE(kind, Class)                                                                 \
  std::unique_ptr<Optimizer> make_##kind(std::vector<Variable> params, const OptimizerSpec& spec, \
                                         UpdateRounding rounding, uint64_t seed);
MIXTAPE_OPTIMIZERS(MIXTAPE_MAKE)
#undef MIXTAPE_MAKE

struct PrecisionOptions {
  nn::Precision precision = nn::Precision::fp32;
  LossScaleSpec loss_scale;
  BackoffOptions backoff;                                // used by loss_scale backoff
  LogMaxOptions logmax;                                  // used by loss_scale logmax
  GradientScalingOptions gradient_scaling;               // used by loss_scale gradient
  UpdateRounding rounding = UpdateRounding::stochastic;  // pure policies
  uint64_t seed = 0;                                     // stochastic rounding's Philox stream
  double max_grad_norm = 0.0;                            // > 0: clip unscaled gradients
  double max_grad_value = 0.0;  // > 0: clamp each unscaled gradient element (decides on the host)
  int64_t telemetry_every = 0;  // 0: off
  // The format telemetry measures against; nullopt: the compute dtype, f16 for fp32 runs.
  std::optional<DType> telemetry_format;
  Fp8Options fp8;  // the fp8 policy's recipe and formats
};

class PrecisionTrainer {
 public:
  // Applies the policy to `model` (pure: parameters to 16 bits) and builds the optimizer over
  // model.parameters(). Throws on a combination the policy cannot do (Nesterov or Adam with L2
  // weight decay under a pure policy, whose update rules are Zamirai et al.'s SGD and AdamW),
  // leaving the model as it was.
  PrecisionTrainer(nn::Module& model, const OptimizerSpec& optimizer, PrecisionOptions options);
  PrecisionTrainer(const PrecisionTrainer&) = delete;
  PrecisionTrainer& operator=(const PrecisionTrainer&) = delete;

  const PrecisionOptions& options() const { return options_; }
  nn::Precision precision() const { return options_.precision; }
  DType compute_dtype() const { return nn::compute_dtype(options_.precision); }
  // The device of the model's parameters (fixed when the trainer is built).
  Device device() const { return device_; }
  // A data tensor moved to device() and, when floating, cast to the compute dtype there (RNE; no
  // tape node: inputs need no gradient). Targets (integer labels) only move.
  Tensor input(const Tensor& x) const;

  // Call once per step on the tape that will record it, before the forward pass: attaches the
  // gradient-scaling rule (loss scale "gradient") and, on sampled steps, the telemetry.
  void begin_step(Tape& tape);
  // Attaches the same to a further tape of the current step (a step whose backward runs over
  // several tapes, as a GAN's generator update does).
  void attach(Tape& tape);
  // tape.backward(loss, scale()), with the rounding census open on sampled steps.
  void backward(Tape& tape, const Variable& loss);
  // A backward pass from an explicit seed (a gradient that already carries its scale, from
  // another tape of this step).
  void backward(Tape& tape, const Variable& root, const ScaledGrad& seed);
  // Checks the gradients, lets the scaler skip the step or applies it, and drops the gradients
  // (Note [Master weight step]). The report reads as whether the update was applied; on a GPU
  // the decision stays there until something reads it (Note [Scaled step]).
  StepReport step();
  void zero_grad();

  // Data-parallel training (dist/data_parallel.h, docs/data-parallel.md): from now on step()
  // averages the gradients over the ranks before it checks them, gradient scaling agrees each
  // beta with the other ranks, and after each step the model's buffers are rank 0's. The
  // parameters must already be the same on every rank (DataParallel::broadcast). With one
  // process nothing changes. Throws for a model on a GPU (the MPI communicator works on the CPU).
  void set_data_parallel(std::shared_ptr<dist::DataParallel> dp);
  const dist::DataParallel* data_parallel() const { return dp_.get(); }

  Optimizer& optimizer();  // for learning-rate schedules
  const Optimizer& optimizer() const;
  LossScaler& scaler() { return *scaler_; }
  const LossScaler& scaler() const { return *scaler_; }
  float scale() const { return scaler_->scale(); }            // the next backward's loss scale
  float last_scale() const { return scaler_->last_scale(); }  // the one the last step's gradients carried
  int64_t steps() const { return scaler_->steps(); }
  int64_t skipped() const { return scaler_->skipped(); }
  // Global L2 norm of the unscaled gradients of the last applied step (before clipping), and
  // whether the last step was applied.
  double last_grad_norm() const { return last_.grad_norm(); }
  bool last_applied() const { return last_.applied(); }
  // Warnings of the pure update rules (Note [16-bit hyper-parameters]).
  std::vector<std::string> warnings() const;

  // Telemetry: whether the current step (begin_step .. step) is sampled, the rounding census of
  // its backward passes, and the totals over every sampled step so far.
  bool sampled() const { return sampled_; }
  const RoundingCounts& last_rounding() const { return last_rounding_; }
  const RoundingCounts& total_rounding() const { return total_rounding_; }
  const Telemetry* telemetry() const { return telemetry_.get(); }
  const GradientScalingRule* gradient_scaling() const { return grad_scaling_.get(); }
  // The fp8 policy's context: what its last step quantized (nullptr under the other policies).
  const Fp8Context* fp8() const { return fp8_.get(); }
  // The step's records as JSON lines. Under gradient scaling, on every step: one "scales" line
  // with the log2 of the scale each node's output gradient carries, keyed "<node> <op> <output>"
  // (only the scales recomputed this step: all of them with update_period 1), and one
  // "overflow" line per overflow the tape's guard saw (Note [Overflow guard]), marked with
  // whether the step was skipped. On sampled steps: one "telemetry" line per gradient
  // (Telemetry::json_lines), one "rounding" line with the census, and under the fp8 policy one
  // "fp8" line per quantized operand (Fp8Context::json_lines).
  void write_telemetry(const std::function<void(std::string_view)>& sink, const std::string& prefix = {}) const;

  // "fp16 (f16 compute, f32 masters), loss scale backoff, AdamW" and the like.
  std::string describe() const;

  // Optimizer state under "optimizer.", the scaler's under "scaler.", the gradient-scaling
  // rule's step and cached betas under "gradient_scaling." (loss scale gradient), and the step
  // count (metadata "trainer.step", so telemetry keeps its schedule): with the model's state and
  // generators, everything a resumed run needs to continue bit for bit.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 private:
  // Runs a backward pass, inside a rounding census on sampled steps.
  void census_backward(const std::function<void()>& run_backward);

  PrecisionOptions options_;
  nn::Module* model_ = nullptr;  // for its buffers under data parallelism
  std::shared_ptr<dist::DataParallel> dp_;
  std::vector<Variable> params_;
  Device device_;
  std::unique_ptr<MasterWeights> masters_;  // fp32 and mixed policies
  std::unique_ptr<Optimizer> pure_;         // pure policies
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<GradientScalingRule> grad_scaling_;
  std::unique_ptr<Fp8Context> fp8_;
  std::unique_ptr<Telemetry> telemetry_;
  bool sampled_ = false;
  int64_t step_ = 0;  // begin_step calls so far
  StepReport last_ = StepReport::decided(true, {}, 0.0);
  std::vector<ScaleRecord> last_scales_;       // the gradient-scaling rule's records of the last step
  std::vector<OverflowEvent> last_overflows_;  // and its overflows
  RoundingCounts last_rounding_, total_rounding_;
};

}  // namespace mixtape
