// Loss modules: callables (input Variable, target Tensor) -> loss Variable.
//
// Losses are on the fp32 allow-list (Note [The fp32 allow-list] in nn/precision.h): a 16-bit input is first cast to f32
// with the differentiable cast, the cast whose backward Zhao's rule may rescale (autograd/
// functions/shape.h), and the loss is computed and returned in f32. f32 and f64 inputs are
// used as they are. Targets of BCE and MSE are converted to the loss's dtype.
#pragma once

#include "autograd/functions/loss.h"
#include "autograd/variable.h"
#include "nn/module.h"
#include "tensor/ops/loss.h"

namespace mixtape::nn {

// logits [N, C] (or [N, C, d...]) against i64 class indices [N] (or [N, d...]); class weights
// (f32 [C], moved to the logits' device and dtype on use), ignore_index and label_smoothing as
// torch.nn.CrossEntropyLoss (tensor/ops/loss.h).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(Reduction reduction = Reduction::mean, ClassLossOptions options = {});
  Variable forward(const Variable& logits, const Tensor& targets);
  Variable operator()(const Variable& logits, const Tensor& targets) { return forward(logits, targets); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  ClassLossOptions options_;
};

// Log-probabilities (a LogSoftmax's output) against class indices, as torch.nn.NLLLoss (class
// weights and ignore_index as CrossEntropyLoss's; no label smoothing).
class NLLLoss : public Module {
 public:
  explicit NLLLoss(Reduction reduction = Reduction::mean, ClassLossOptions options = {});
  Variable forward(const Variable& log_probs, const Tensor& targets);
  Variable operator()(const Variable& log_probs, const Tensor& targets) { return forward(log_probs, targets); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  ClassLossOptions options_;
};

// Note [BCE on probabilities]
// BCELoss takes probabilities, the output of a Sigmoid (the classic DCGAN discriminator), and is
// a cast_input entry of the fp32 allow-list: a 16-bit input is cast to f32 and the loss, its logs
// clamped to >= -100 as PyTorch's, is computed and returned in f32. The cast cannot give back the
// precision a 16-bit sigmoid has already lost, and the gradient is the hazard: dL/dp =
// (p - t) / (p (1 - p)) g is about g / p for a confident wrong answer, and the cast's backward
// rounds it to 16 bits on its way to the sigmoid. With a loss scale S and a mean over n elements
// (g = S / n) it overflows f16 where p < S / (65504 n): at S = 2^16 and n = 64, for every p below
// 1/64. (PyTorch's autocast refuses binary_cross_entropy for this reason.) The remedy keeps the
// bounded gradient in 16 bits: run the final Sigmoid in fp32 as well (cast the logits to f32
// with the differentiable cast, then Sigmoid, then BCELoss), so that what crosses the cast is the
// sigmoid's input gradient (p - t) g, at most g in magnitude; or use BCEWithLogitsLoss, which
// fuses the two. tests/nn/test_precision.cpp shows both the overflow and the remedy.
// `weight` (optional, as PyTorch's) rescales each element's loss; it broadcasts to the input's
// shape, and mean averages the weighted losses over the elements (Note [Binary loss weights]).
class BCELoss : public Module {
 public:
  explicit BCELoss(Reduction reduction = Reduction::mean, Tensor weight = {});
  Variable forward(const Variable& probs, const Tensor& targets);
  Variable operator()(const Variable& probs, const Tensor& targets) { return forward(probs, targets); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  BinaryLossOptions options_;
};

// Sigmoid + binary cross entropy in the stable form; targets are probabilities of logits' shape.
// `weight` as BCELoss's; `pos_weight` weighs the positive term, one per class (the last dim), as
// torch's (BinaryLossOptions in autograd/functions/loss.h).
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::mean, Tensor weight = {}, Tensor pos_weight = {});
  Variable forward(const Variable& logits, const Tensor& targets);
  Variable operator()(const Variable& logits, const Tensor& targets) { return forward(logits, targets); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  BinaryLossOptions options_;
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

// |input - target|, input and target of one shape.
class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::mean);
  Variable forward(const Variable& input, const Tensor& target);
  Variable operator()(const Variable& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
};

// 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (d = input - target, beta >= 0).
class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::mean, double beta = 1.0);
  Variable forward(const Variable& input, const Tensor& target);
  Variable operator()(const Variable& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;

 private:
  Reduction reduction_;
  double beta_;
};

}  // namespace mixtape::nn
