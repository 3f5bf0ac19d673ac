// RMSprop (Hinton's lecture 6e; Graves 2013 for the centered form) and Adagrad (Duchi, Hazan &
// Singer), as torch.optim.RMSprop and torch.optim.Adagrad (formulas in tensor/ops/optim.h,
// rmsprop_update_ and adagrad_update_). Weight decay is an L2 penalty folded into the gradient,
// as there. With 16-bit parameters they are RMSprop16 and Adagrad16 (Note [Storage policy] in
// optim/optimizer.h; rmsprop16_update_, adagrad16_update_): the state in the parameter's dtype,
// rounded to nearest when stored, plus "kahan_comp" under Kahan rounding; f16 state that holds
// squares (square_avg, sum) underflows to 0 for |g| < 2^-12 and overflows past 65504 (the
// optimizer warns).
//
//   RMSprop opt(params, {.lr = 1e-2, .alpha = 0.99, .momentum = 0.9, .centered = true});
//   Adagrad opt(params, {.lr = 1e-2, .lr_decay = 1e-4, .initial_accumulator_value = 0.1});
#pragma once

#include "optim/optimizer.h"

namespace mixtape {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // decay of the running average of g^2, in [0, 1)
  double eps = 1e-8;
  double weight_decay = 0.0;  // default for groups that do not set their own
  double momentum = 0.0;
  bool centered = false;  // divide by the running estimate of the variance instead of the second moment
  // 16-bit parameters (Note [Storage policy]): how the update is rounded, the Philox stream's seed.
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

// State: "square_avg", "momentum_buffer" (momentum > 0) and "grad_avg" (centered), as PyTorch
// names them, all starting at zero.
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Variable> params, RMSpropOptions options = {});
  const char* name() const override { return pure16() ? "RMSprop16" : "RMSprop"; }
  const RMSpropOptions& options() const { return options_; }
  std::optional<double> momentum() const override { return options_.momentum; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string> buffer_names() const override;
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;
  std::vector<std::pair<const char*, double>> decay_rates() const override {
    return {{"alpha", options_.alpha}, {"momentum", options_.momentum}};
  }
  const char* f16_state_warning() const override {
    return "square_avg in f16 holds g^2, which underflows to 0 for |g| < 2^-12 and overflows for |g| > 256 (bf16 "
           "has the range for it)";
  }

 private:
  void validate(const RMSpropOptions& o) const;
  RMSpropOptions options_;
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;  // the step size at update t is lr / (1 + (t - 1) lr_decay)
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;  // where "sum" starts (rounded to a 16-bit parameter's format)
  double eps = 1e-10;
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

// State: "sum", the running sum of g^2, starting at initial_accumulator_value. The step count
// that lr_decay reads is each parameter's own.
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Variable> params, AdagradOptions options = {});
  const char* name() const override { return pure16() ? "Adagrad16" : "Adagrad"; }
  const AdagradOptions& options() const { return options_; }

 protected:
  std::vector<std::string> buffer_names() const override;
  double buffer_init(size_t b) const override { return b == 0 ? options_.initial_accumulator_value : 0.0; }
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;
  const char* f16_state_warning() const override {
    return "sum in f16 accumulates g^2, which underflows to 0 for |g| < 2^-12 and overflows past 65504 (bf16 has "
           "the range for it)";
  }

 private:
  void validate(const AdagradOptions& o) const;
  AdagradOptions options_;
};

}  // namespace mixtape
