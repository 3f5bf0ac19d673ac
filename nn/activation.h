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

}  // namespace mixtape::nn
