// Adam (Kingma & Ba) with L2 weight decay folded into the gradient, and AdamW (Loshchilov &
// Hutter) with weight decay applied to the weights, as torch.optim.Adam / AdamW (formulas in
// tensor/ops/optim.h, adam_update_). Bias corrections use each parameter's own step count.
// amsgrad (Reddi, Kale & Kumar, "On the Convergence of Adam and Beyond") keeps one more buffer,
// "max_exp_avg_sq", the running maximum of exp_avg_sq, and divides by its square root instead;
// it has no multi-tensor rule, so a GPU step with it decides on the host (Note [Scaled step]).
// With 16-bit parameters it is AdamW16 (Note [Storage policy] in optim/optimizer.h): Zamirai et
// al.'s Algorithms 4 and 5 (adamw16_update_), state "exp_avg", "exp_avg_sq", with amsgrad
// "max_exp_avg_sq" and with Kahan "kahan_comp" in the parameter's dtype. Adam in 16 bits is
// AdamW16 with no weight decay (the 16-bit rule has no L2 form). f16 state: exp_avg_sq = g^2
// underflows to 0 for |g| < 2^-12 and overflows for |g| > 256, which bf16's range avoids; the
// optimizer warns when it holds f16 parameters.
//
//   AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.05});
#pragma once

#include "optim/optimizer.h"

namespace mixtape {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // default for groups that do not set their own
  bool amsgrad = false;       // Reddi et al.: the denominator uses the running maximum of exp_avg_sq
  // 16-bit parameters (Note [Storage policy]): how the update is rounded, the Philox stream's seed.
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

// The same settings with AdamW's default decay.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Variable> params, AdamOptions options = {});
  const char* name() const override { return pure16() ? "AdamW16" : decoupled_ ? "AdamW" : "Adam"; }
  const AdamOptions& options() const { return options_; }
  bool decoupled() const { return decoupled_; }
  std::optional<double> momentum() const override { return options_.beta1; }  // beta1
  void set_momentum(double beta1) override;

 protected:
  Adam(std::vector<Variable> params, AdamOptions options, bool decoupled);
  std::vector<std::string> buffer_names() const override;
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  bool has_multi_tensor_rule() const override { return !options_.amsgrad && !pure16(); }
  void apply_all(const std::vector<size_t>& index, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<ParamState*>& states, const std::vector<Tensor>& copies, Tensor& steps,
                 const Tensor& control) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;
  void check_storage() const override;
  std::vector<std::pair<const char*, double>> decay_rates() const override {
    return {{"beta1", options_.beta1}, {"beta2", options_.beta2}};
  }
  const char* f16_state_warning() const override {
    return "exp_avg_sq in f16 holds g^2, which underflows to 0 for |g| < 2^-12 and overflows for |g| > 256 (bf16 "
           "has the range for it)";
  }

 private:
  void validate(const AdamOptions& o) const;
  AdamOptions options_;
  bool decoupled_ = false;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Variable> params, AdamWOptions options = {});
};

}  // namespace mixtape
