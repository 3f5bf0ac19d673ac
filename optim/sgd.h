// Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay,
// as torch.optim.SGD (formulas in tensor/ops/optim.h, sgd_update_). With 16-bit parameters it is
// SGD16 (Note [Storage policy] in optim/optimizer.h): Zamirai et al.'s Algorithms 2 and 3,
//   g = grad + wd w;  m = momentum m + g;  w -= lr m     (sgd16_update_)
// with state "momentum_buffer" (momentum != 0) and "kahan_comp" (Kahan) in the parameter's dtype;
// it has no dampening and no Nesterov momentum.
//
//   SGD opt(model_params, {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
#pragma once

#include "optim/optimizer.h"

namespace mixtape {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // default for groups that do not set their own
  bool nesterov = false;      // needs momentum > 0 and dampening == 0
  // 16-bit parameters (Note [Storage policy]): how the update is rounded, the Philox stream's seed.
  UpdateRounding rounding = UpdateRounding::stochastic;
  uint64_t seed = 0;
};

class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Variable> params, SGDOptions options = {});
  const char* name() const override { return pure16() ? "SGD16" : "SGD"; }
  const SGDOptions& options() const { return options_; }
  std::optional<double> momentum() const override { return options_.momentum; }
  void set_momentum(double momentum) override;

 protected:
  std::vector<std::string> buffer_names() const override;
  void apply(const ParamGroup& group, Tensor& param, const Tensor& grad, ParamState& state, int64_t step,
             Tensor* rounded_copy) override;
  void save_options(TensorDict& dict) const override;
  void load_options(const TensorDict& dict) override;
  void check_storage() const override;
  std::vector<std::pair<const char*, double>> decay_rates() const override { return {{"momentum", options_.momentum}}; }

 private:
  void validate(const SGDOptions& o) const;
  SGDOptions options_;
};

}  // namespace mixtape
