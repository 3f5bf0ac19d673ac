// Loss scalers: choose the loss scale S for the next backward pass and decide whether the
// gradients of the last one may be applied (docs/design.md sections 1 and 5).
//
//   BackoffLossScaler scaler;                       // 2^16, x2 every 2000 clean steps, x0.5 on inf
//   MasterWeights mw(model.parameters(), make_adamw);
//   for (...) {
//     Tape tape;
//     Variable loss = ...;
//     tape.backward(loss, scaler.scale());         // gradients arrive as {S * dL/dw, S}
//     mw.step(scaler);                             // checks, asks scaler.update, skips or applies
//   }
//
// The scaler sees the gradients only through a GradCheck: whether any gradient holds an inf or
// NaN, and the largest |true gradient| (check_grads computes both, one pass per tensor, with the
// fused grad_stats kernel). update() moves the scale and returns whether to apply the step: a
// step whose gradients overflowed must be skipped, or the infs would reach the weights
// (Micikevicius et al., section 3.2).
//
// Note [Loss scales are powers of two]
// Every scale a scaler returns is a power of two in [2^-126, 2^127] (a normal float), and so
// are the factors and clamps it is configured with: multiplying a gradient by S and dividing it
// by S again is then exact unless a value leaves the format's range, so loss scaling changes
// which values underflow or overflow and nothing else. Growth is skipped, never clamped to
// FLT_MAX, when it would leave the float range, so the scale can never become inf or 0.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/scaled_grad.h"
#include "autograd/variable.h"
#include "tensor/core/update_formulas.h"
#include "tensor/safetensors.h"

namespace mixtape {

// What a scaler needs to know about one step's gradients.
struct GradCheck {
  bool found_inf = false;  // some gradient element is inf or NaN (or would overflow fp32 when unscaled)
  double max_abs = 0.0;    // max |g / scale| over the finite elements of every gradient
  size_t grads = 0;        // how many gradients were inspected
};

// Inspects the ScaledGrads of `params` (parameters without a gradient are skipped): one
// grad_stats pass per tensor over the stored (scaled) values, each parameter's max divided by
// its own scale.
GradCheck check_grads(const std::vector<Variable>& params);

// Note [Loss scale on the device]
// Trained on a GPU, a scaler keeps its state there (keep_on): the scale, the rule's counter and
// the step counts live in two small readout tensors (f32 and i64, laid out by formulas::StepF and
// StepI in tensor/core/update_formulas.h), the backward pass is seeded from the device scale
// (seed()), and unscale_and_decide runs steps 1-4 of Note [Scaled step] as two launches: one
// multi-tensor kernel unscales every gradient into fp32, checks it for inf/NaN and sums its
// squares, and one decision kernel applies the rule (formulas::loss_scale_update, the host's own
// code) and the clip factor. The host learns the outcome when it reads the device anyway (Note
// [Readout block] in cuda/runtime.h): scale(), steps(), skipped(), last_skipped() and
// state_dict() read the state then, and cost a synchronization only when nothing has read the
// device since the step. Rules with a device formula: none, static, backoff (device_rule());
// LogMax keeps its statistics on the host, and a step under it decides on the host.
// With the state on the device, the seed's ScaledGrad carries scale 1 and its values carry S:
// the gradients' host-side scales are the per-operator factors alone (1 under loss scaling),
// and the device scale S, shared by every gradient of the step, is divided out with them.

class LossScaler {
 public:
  virtual ~LossScaler() = default;

  // "none", "static", "backoff", "logmax": names the scaler in messages and state dicts.
  virtual const char* name() const = 0;
  // The scale for the next backward pass (Note [Loss scales are powers of two]).
  float scale() const;

  // Records one step's gradients (taken at scale()) and moves the scale. Returns whether the
  // step should be applied; false means: skip the update and drop the gradients.
  bool update(const GradCheck& check);

  int64_t steps() const;    // update() calls so far
  int64_t skipped() const;  // of which returned false
  bool last_skipped() const;
  float last_scale() const;  // the scale the last step's gradients carried (scale() before it)

  // ---- the state on a device (Note [Loss scale on the device]) ----
  // The rule as the device runs it; nullopt when it has no device formula.
  virtual std::optional<formulas::LossScaleRule> device_rule() const { return std::nullopt; }
  // Moves the state to `device` (a CUDA device with a device_rule(); the CPU brings it back).
  void keep_on(Device device);
  bool on_device() const { return fstate_.defined(); }
  // The backward seed for `root` (one element): {S * ones, S} on the host, {S * ones, 1} with the
  // state on the device (S copied from there, no synchronization).
  ScaledGrad seed(const Variable& root) const;
  // Steps 1-4 on the device: unscales grads[i] / scales[i] / S into fp32 (the returned tensors),
  // checks, applies the rule and computes the clip factor for max_grad_norm (0: none). Needs
  // on_device(); grads on its device.
  std::vector<Tensor> unscale_and_decide(const std::vector<Tensor>& grads, const std::vector<float>& scales,
                                         double max_grad_norm);
  // The state the update kernels read (formulas::StepF: kApplied, kClip), and what the last
  // unscale_and_decide found, read from the device (a synchronization if nothing read it since).
  const Tensor& device_state() const { return fstate_; }
  GradCheck last_device_check() const;
  double last_device_grad_norm() const;
  bool last_device_applied() const;

  // State for checkpoints: metadata only ("loss_scaler" = name(), "scale", "steps",
  // "skipped", and the rule's own counters and statistics, written so that they read back
  // exactly). load_state_dict checks the kind and every value before changing anything.
  TensorDict state_dict() const;
  void load_state_dict(const TensorDict& dict);

 protected:
  explicit LossScaler(float initial_scale) : scale_(initial_scale) {}
  // The rule: given the check of gradients taken at scale_, set scale_ for the next step and
  // return whether to apply this one.
  virtual bool on_update(const GradCheck& check) = 0;
  virtual void save_extra(TensorDict& dict) const {}
  // Validates and stores the rule's own entries; throws (changing nothing) on bad values.
  virtual void load_extra(const TensorDict& dict) {}

  float scale_;
  int64_t tracker_ = 0;  // the rule's counter of clean steps (backoff)

 private:
  // With the state on the device: the host fields take its values (a read of the readout
  // tensors), or the device takes theirs.
  void pull() const;
  void push();

  int64_t steps_ = 0;
  int64_t skipped_ = 0;
  bool last_skipped_ = false;
  float last_scale_ = 0.0f;  // 0 before the first step
  Tensor fstate_, istate_;   // Note [Loss scale on the device]; undefined on the host
};

// Scale 1, every step applied (also one with inf/NaN gradients): training without a scaler.
class NoLossScaler : public LossScaler {
 public:
  NoLossScaler() : LossScaler(1.0f) {}
  const char* name() const override { return "none"; }
  std::optional<formulas::LossScaleRule> device_rule() const override { return formulas::LossScaleRule{}; }

 protected:
  bool on_update(const GradCheck&) override { return true; }
};

// A constant scale S (Micikevicius et al.); a step with inf/NaN gradients is skipped.
class StaticLossScaler : public LossScaler {
 public:
  explicit StaticLossScaler(float scale);
  const char* name() const override { return "static"; }
  std::optional<formulas::LossScaleRule> device_rule() const override {
    return formulas::LossScaleRule{.kind = formulas::LossScaleRule::Kind::fixed};
  }

 protected:
  bool on_update(const GradCheck& check) override { return !check.found_inf; }
};

struct BackoffOptions {
  float init_scale = 65536.0f;  // 2^16, as torch.cuda.amp.GradScaler
  float growth_factor = 2.0f;   // power of two >= 1
  float backoff_factor = 0.5f;  // power of two in (0, 1]
  int64_t growth_interval = 2000;
  float min_scale = 1.0f;         // OpenSeq2Seq's clamps; powers of two,
  float max_scale = 16777216.0f;  // max_scale may be +infinity (no upper clamp)
};

// Dynamic loss scaling by backoff: PyTorch GradScaler's update rule with OpenSeq2Seq's clamps.
//   inf/NaN:  skip the step, scale = max(scale * backoff, min_scale), counter = 0
//   clean:    counter += 1; when counter == growth_interval:
//             scale = min(scale * growth, max_scale) unless that leaves the float range, counter = 0
class BackoffLossScaler : public LossScaler {
 public:
  explicit BackoffLossScaler(BackoffOptions options = {});
  const char* name() const override { return "backoff"; }
  const BackoffOptions& options() const { return options_; }
  int64_t growth_tracker() const;  // clean steps since the last change
  std::optional<formulas::LossScaleRule> device_rule() const override;

 protected:
  bool on_update(const GradCheck& check) override;
  void save_extra(TensorDict& dict) const override;
  void load_extra(const TensorDict& dict) override;

 private:
  BackoffOptions options_;
};

struct LogMaxOptions {
  float init_scale = 1.0f;         // OpenSeq2Seq starts at 1; the statistics take over after one step
  double beta1 = 0.99;             // running mean of x = log2(max |g|)
  double beta2 = 0.999;            // running mean of x and x^2 for the variance
  double overflow_std_dev = 3.09;  // Phi^-1(0.999): P(overflow) ~ 0.001 under the log-normal model
  double log_max = 16.0;           // log2 of the format's overflow threshold: fp16 max 65504 < 2^16
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;
};

// OpenSeq2Seq's "LogMax" (the doc's "LogNormal") automatic loss scaling. Each step, with
// x = log2(max |true gradient|) (Note [LogMax statistics] in loss_scaler.cpp):
//   x_hat  = beta1 x_hat + (1 - beta1) x,  mu = x_hat / (1 - beta1^t)
//   xs_hat = beta2 xs_hat + (1 - beta2) x,  xsq_hat = beta2 xsq_hat + (1 - beta2) x^2
//   sigma  = sqrt(max(0, xsq_hat / (1 - beta2^t) - (xs_hat / (1 - beta2^t))^2))
//   scale  = clamp(2^floor(log_max - (mu + overflow_std_dev sigma)), min_scale, max_scale)
// and a step with inf/NaN gradients is skipped.
class LogMaxLossScaler : public LossScaler {
 public:
  explicit LogMaxLossScaler(LogMaxOptions options = {});
  const char* name() const override { return "logmax"; }
  const LogMaxOptions& options() const { return options_; }
  int64_t iteration() const { return iteration_; }  // steps that fed the statistics
  double mu() const;                                // bias-corrected running mean of x (0 before the first)
  double sigma() const;  // bias-corrected running standard deviation of x (0 before the first)

 protected:
  bool on_update(const GradCheck& check) override;
  void save_extra(TensorDict& dict) const override;
  void load_extra(const TensorDict& dict) override;

 private:
  LogMaxOptions options_;
  int64_t iteration_ = 0;
  double x_hat_ = 0.0, slow_x_hat_ = 0.0, xsq_hat_ = 0.0;
};

// ---- choosing a scaler by name -------------------------------------------------------------

// --loss-scale: none | static:S | backoff | logmax | gradient
struct LossScaleSpec {
  enum class Kind : uint8_t { none, fixed, backoff, logmax, gradient };
  Kind kind = Kind::none;
  float scale = 1.0f;  // fixed: S, a power of two

  std::string str() const;  // "none", "static:1024", "backoff", "logmax", "gradient"
};
// Throws, saying what is accepted, on anything else (S must be a power of two in [2^-126, 2^127]).
LossScaleSpec parse_loss_scale(const std::string& text);
// The scaler for a spec (gradient: a static scale of 1, which still skips inf/NaN steps).
std::unique_ptr<LossScaler> make_loss_scaler(const LossScaleSpec& spec, const BackoffOptions& backoff = {},
                                             const LogMaxOptions& logmax = {});

}  // namespace mixtape
