#include "nn/loss.h"

#include "autograd/functions/loss.h"
#include "autograd/functions/shape.h"
#include "nn/precision.h"

namespace mixtape::nn {

namespace {

void check_args(const Module& m, const Variable& input, const Tensor& target) {
  MT_CHECK(input.defined(), m.str(), ": the input is an undefined Variable");
  MT_CHECK(target.defined(), m.str(), ": the target is an undefined tensor");
}

std::string reduction_repr(Reduction r) { return std::string("reduction=") + reduction_name(r); }

}  // namespace

CrossEntropyLoss::CrossEntropyLoss(Reduction reduction) : Module("CrossEntropyLoss"), reduction_(reduction) {}

Variable CrossEntropyLoss::forward(const Variable& logits, const Tensor& targets) {
  check_args(*this, logits, targets);
  return cross_entropy(fp32_input(OpId::cross_entropy, logits), targets, reduction_);
}

std::string CrossEntropyLoss::extra_repr() const { return reduction_repr(reduction_); }

BCEWithLogitsLoss::BCEWithLogitsLoss(Reduction reduction) : Module("BCEWithLogitsLoss"), reduction_(reduction) {}

Variable BCEWithLogitsLoss::forward(const Variable& logits, const Tensor& targets) {
  check_args(*this, logits, targets);
  const Variable x = fp32_input(OpId::bce_with_logits, logits);
  return binary_cross_entropy_with_logits(x, targets.to(x.dtype()), reduction_);
}

std::string BCEWithLogitsLoss::extra_repr() const { return reduction_repr(reduction_); }

MSELoss::MSELoss(Reduction reduction) : Module("MSELoss"), reduction_(reduction) {}

Variable MSELoss::forward(const Variable& input, const Tensor& target) {
  check_args(*this, input, target);
  const Variable x = fp32_input(OpId::mse_loss, input);
  return mse_loss(x, target.to(x.dtype()), reduction_);
}

std::string MSELoss::extra_repr() const { return reduction_repr(reduction_); }

}  // namespace mixtape::nn
