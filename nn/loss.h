// Loss modules: callables (input Variable, target Tensor) -> loss Variable.
//
// Losses are on the fp32 allow-list (Note [The fp32 allow-list] in nn/precision.h): a 16-bit input is first cast to f32
// with the differentiable cast, the cast whose backward Zhao's rule may rescale (autograd/
// functions/shape.h), and the loss is computed and returned in f32. f32 and f64 inputs are
// used as they are. Targets of BCE and MSE are converted to the loss's dtype.
#pragma once

#include "autograd/variable.h"
#include "nn/module.h"
#include "tensor/ops/loss.h"

namespace mixtape::nn {

// logits [N, C] (or [N, C, d...]) against i64 class indices [N] (or [N, d...]).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::mean);
  Variable forward(const Variable& logits, const Tensor& targets);
  Variable operator()(const Variable& logits, const Tensor& targets) { return forward(logits, targets); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
};

// Sigmoid + binary cross entropy in the stable form; targets are probabilities of logits' shape.
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::mean);
  Variable forward(const Variable& logits, const Tensor& targets);
  Variable operator()(const Variable& logits, const Tensor& targets) { return forward(logits, targets); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
};

// (input - target)^2, input and target of one shape.
class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean);
  Variable forward(const Variable& input, const Tensor& target);
  Variable operator()(const Variable& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
};

}  // namespace mixtape::nn
