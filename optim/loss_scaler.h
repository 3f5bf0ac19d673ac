// Loss scalers: choose the loss scale S for the next backward pass and decide whether the
// gradients of the last one may be applied (DESIGN.md sections 1 and 5).
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
#include <string>
#include <vector>

#include "autograd/variable.h"
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

class LossScaler {
 public:
  virtual ~LossScaler() = default;

  // "none", "static", "backoff", "logmax": names the scaler in messages and state dicts.
  virtual const char* name() const = 0;
  // The scale for the next backward pass (Note [Loss scales are powers of two]).
  float scale() const { return scale_; }

  // Records one step's gradients (taken at scale()) and moves the scale. Returns whether the
  // step should be applied; false means: skip the update and drop the gradients.
  bool update(const GradCheck& check);

  int64_t steps() const { return steps_; }      // update() calls so far
  int64_t skipped() const { return skipped_; }  // of which returned false
  bool last_skipped() const { return last_skipped_; }

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

 private:
  int64_t steps_ = 0;
  int64_t skipped_ = 0;
  bool last_skipped_ = false;
};

// Scale 1, every step applied (also one with inf/NaN gradients): training without a scaler.
class NoLossScaler : public LossScaler {
 public:
  NoLossScaler() : LossScaler(1.0f) {}
  const char* name() const override { return "none"; }

 protected:
  bool on_update(const GradCheck&) override { return true; }
};

// A constant scale S (Micikevicius et al.); a step with inf/NaN gradients is skipped.
class StaticLossScaler : public LossScaler {
 public:
  explicit StaticLossScaler(float scale);
  const char* name() const override { return "static"; }

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
  int64_t growth_tracker() const { return growth_tracker_; }  // clean steps since the last change

 protected:
  bool on_update(const GradCheck& check) override;
  void save_extra(TensorDict& dict) const override;
  void load_extra(const TensorDict& dict) override;

 private:
  BackoffOptions options_;
  int64_t growth_tracker_ = 0;
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

}  // namespace mixtape
