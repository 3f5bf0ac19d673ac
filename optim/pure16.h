// Pure 16-bit training (the "bf16-pure" and "fp16-pure" policies of docs/design.md section 5): weights
// AND optimizer state stored in bf16 or f16, no fp32 copy. Zamirai, Zhang, Aberger, De Sa,
// "Revisiting BFloat16 Training", Algorithms 2-5: SGD and AdamW (and, by the same recipe,
// RMSprop and Adagrad: docs/mixed-precision.md) whose weight update is rounded
//   nearest     to nearest even: updates below half an ulp of the weight are lost (their
//               "standard" algorithm; training stalls late, their Theorem 1)
//   stochastic  stochastically, from a Philox stream (unbiased: E[w_new] = w + u)
//   kahan       to nearest, with a 16-bit Kahan compensation buffer per parameter that carries
//               the lost low part into the next update (2x weight memory)
// The kernels are sgd16_update_ / adamw16_update_ / rmsprop16_update_ / adagrad16_update_
// (tensor/ops/optim.h, formulas there).
//
//   SGD16 opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .rounding = UpdateRounding::kahan});
//   ... backward ...;  opt.step();  opt.zero_grad();
//   // with loss scaling (fp16-pure): scaled_step(opt, scaler) from optim/scaled_step.h
//
// Note [16-bit hyper-parameters]
// In a 16-bit unit the decay rates are 16-bit numbers too, and rounding can change the
// algorithm: beta2 = 0.999 is 1.0 in bf16 (ulp 2^-8 below 1), which would stop the second
// moment from ever forgetting. As Zamirai et al. (appendix C.1, BERT) we then use the largest
// representable value below 1 instead: 1 - 2^-8 = 0.99609375 in bf16 (the paper writes 0.997,
// which is not a bf16 value; it rounds to 0.99609375), 1 - 2^-11 in f16. Every decay rate
// (SGD momentum, AdamW beta1, beta2, RMSprop alpha and momentum) is rounded to the parameter's format to nearest even; a
// rate below 1 that rounds to 1 is replaced so, and the optimizer says so once: warnings() lists
// the messages and each is printed once per process to stderr. Learning rate, eps and weight
// decay enter the fp32 compute as given (rounding them moves values by < 2^-8 relative and
// never changes the algorithm).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "tensor/core/rng.h"

namespace mixtape {

enum class UpdateRounding : uint8_t { nearest, stochastic, kahan };
const char* update_rounding_name(UpdateRounding r);                 // "nearest", "stochastic", "kahan"
UpdateRounding update_rounding_from_name(const std::string& name);  // throws on an unknown name

// A decay rate as a 16-bit unit holds it (Note [16-bit hyper-parameters]).
struct DecayRate16 {
  double value;   // the rate used: rounded to the format, or the largest value below 1
  bool adjusted;  // the rate was below 1 but rounded to 1, so it was replaced
};
DecayRate16 decay_rate_16(double rate, DType format);

// What the 16-bit optimizers share: the Philox stream of stochastic rounding, whose position is
// saved with the state ("rounding", "rng.seed", "rng.offset") so a resumed run draws the same
// numbers, and the warnings about hyper-parameters (Note [16-bit hyper-parameters]).
class Pure16Optimizer : public Optimizer {
 public:
  const std::vector<std::string>& warnings() const { return warnings_; }
  const Generator& generator() const { return gen_; }

 protected:
  Pure16Optimizer(double lr, double weight_decay, uint64_t seed) : Optimizer(lr, weight_decay), gen_(seed) {}
  // The Philox offset for an update of `numel` elements; the stream advances only under
  // stochastic rounding.
  uint64_t stream_offset(UpdateRounding rounding, int64_t numel);
  // Stores the warnings and prints each distinct one once per process.
  void set_warnings(std::vector<std::string> warnings);
  void save_rounding(TensorDict& dict, UpdateRounding rounding) const;
  // Reads what save_rounding wrote (throwing, with nothing changed, on bad values).
  struct RoundingState {
    UpdateRounding rounding;
    uint64_t seed, offset;
  };
  RoundingState load_rounding(const TensorDict& dict) const;
  // Moves the stream to a loaded position.
  void restore_stream(const RoundingState& r) { gen_.set_state(r.seed, r.offset); }

 private:
  Generator gen_;
  std::vector<std::string> warnings_;
};

struct SGD16Options {
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;  // Philox stream for stochastic rounding
};

// Algorithms 2 (stochastic) and 3 (Kahan): g = grad + wd w; m = momentum m + g; w -= lr m.
// State: "momentum_buffer" (when momentum != 0) and "kahan_comp" (Kahan), both in the
// parameter's 16-bit dtype. The Philox stream position is saved with the state
// ("rng.seed", "rng.offset"), so a resumed run draws the same numbers.
class SGD16 : public Pure16Optimizer {
 public:
  explicit SGD16(std::vector<Variable> params, SGD16Options options = {});
  const char* name() const override { return "SGD16"; }
  const SGD16Options& options() const { return options_; }
  std::optional<double> momentum() const override { return options_.momentum; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string> buffer_names() const override;
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;

 private:
  void validate(const SGD16Options& o) const;
  void refresh_warnings();
  SGD16Options options_;
};

struct AdamW16Options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;  // 0.99609375 in bf16 (Note [16-bit hyper-parameters])
  double eps = 1e-8;
  double weight_decay = 1e-2;
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
  bool amsgrad = false;
};

// Algorithms 4 (stochastic) and 5 (Kahan). State: "exp_avg", "exp_avg_sq", with amsgrad
// "max_exp_avg_sq" and, with Kahan, "kahan_comp", in the parameter's 16-bit dtype; Philox position
// as for SGD16.
// f16 state: exp_avg_sq = g^2 underflows to 0 for |g| < 2^-12 and overflows for |g| > 256, which
// bf16's range avoids; the optimizer warns when it holds f16 parameters.
class AdamW16 : public Pure16Optimizer {
 public:
  explicit AdamW16(std::vector<Variable> params, AdamW16Options options = {});
  const char* name() const override { return "AdamW16"; }
  const AdamW16Options& options() const { return options_; }
  std::optional<double> momentum() const override { return options_.beta1; }  // beta1
  void set_momentum(double beta1) override;

 protected:
  std::vector<std::string> buffer_names() const override;
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;

 private:
  void validate(const AdamW16Options& o) const;
  void refresh_warnings();
  AdamW16Options options_;
};

struct RMSprop16Options {
  double lr = 1e-2;
  double alpha = 0.99;  // 0.98828125 in bf16 (Note [16-bit hyper-parameters])
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

// torch.optim.RMSprop with 16-bit state (rmsprop16_update_). State: "square_avg",
// "momentum_buffer" (momentum > 0), "grad_avg" (centered) and, with Kahan, "kahan_comp", in the
// parameter's 16-bit dtype; Philox position as for SGD16. f16 state: square_avg holds g^2, with
// the range limits AdamW16's exp_avg_sq has (the optimizer warns).
class RMSprop16 : public Pure16Optimizer {
 public:
  explicit RMSprop16(std::vector<Variable> params, RMSprop16Options options = {});
  const char* name() const override { return "RMSprop16"; }
  const RMSprop16Options& options() const { return options_; }
  std::optional<double> momentum() const override { return options_.momentum; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string> buffer_names() const override;
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;

 private:
  void validate(const RMSprop16Options& o) const;
  void refresh_warnings();
  RMSprop16Options options_;
};

struct Adagrad16Options {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;  // rounded to the parameter's format when stored
  double eps = 1e-10;
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

// torch.optim.Adagrad with a 16-bit accumulator (adagrad16_update_). State: "sum" and, with
// Kahan, "kahan_comp", in the parameter's 16-bit dtype; Philox position as for SGD16.
class Adagrad16 : public Pure16Optimizer {
 public:
  explicit Adagrad16(std::vector<Variable> params, Adagrad16Options options = {});
  const char* name() const override { return "Adagrad16"; }
  const Adagrad16Options& options() const { return options_; }

 protected:
  std::vector<std::string> buffer_names() const override;
  double buffer_init(size_t b) const override { return b == 0 ? options_.initial_accumulator_value : 0.0; }
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;

 private:
  void validate(const Adagrad16Options& o) const;
  void refresh_warnings();
  Adagrad16Options options_;
};

}  // namespace mixtape
