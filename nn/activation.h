// Activation modules: thin wrappers over the differentiable elementwise ops, so activations
// can sit in a Sequential.
#pragma once

#include "nn/module.h"

namespace mixtape::nn {

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Variable forward(const Variable& x) override;
};

// max(x, 0) + negative_slope * min(x, 0).
class LeakyReLU : public UnaryModule {
 public:
  explicit LeakyReLU(double negative_slope = 0.01);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  double negative_slope() const { return slope_; }

 private:
  double slope_;
};

class Sigmoid : public UnaryModule {
 public:
  Sigmoid() : UnaryModule("Sigmoid") {}
  Variable forward(const Variable& x) override;
};

class Tanh : public UnaryModule {
 public:
  Tanh() : UnaryModule("Tanh") {}
  Variable forward(const Variable& x) override;
};

// x Phi(x), Phi the standard normal CDF; approximate = "tanh" uses
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as torch.nn.GELU.
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

// x * sigmoid(x).
class SiLU : public UnaryModule {
 public:
  SiLU() : UnaryModule("SiLU") {}
  Variable forward(const Variable& x) override;
};

// x for x > 0, else alpha (exp(x) - 1).
class ELU : public UnaryModule {
 public:
  explicit ELU(double alpha = 1.0);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  double alpha() const { return alpha_; }

 private:
  double alpha_;
};

// log(1 + exp(beta x)) / beta, and x where beta x > threshold.
class Softplus : public UnaryModule {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  double beta() const { return beta_; }
  double threshold() const { return threshold_; }

 private:
  double beta_, threshold_;
};

// x clamped to [min_val, max_val]; the gradient is dy strictly inside, 0 elsewhere.
class Hardtanh : public UnaryModule {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Variable forward(const Variable& x) override;
  std::string extra_repr() const override;
  double min_val() const { return min_; }
  double max_val() const { return max_; }

 private:
  double min_, max_;
};

}  // namespace mixtape::nn
