#include "nn/loss.h"

#include <cmath>
#include <utility>

#include "autograd/functions/elementwise.h"
#include "autograd/functions/loss.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "nn/precision.h"

namespace mixtape::nn {

namespace {

void check_args(const Module& m, const Variable& input, const Tensor& target) {
  MT_CHECK(input.defined(), m.str(), ": the input is an undefined Variable");
  MT_CHECK(target.defined(), m.str(), ": the target is an undefined tensor");
}

std::string reduction_repr(Reduction r) { return std::string("reduction=") + reduction_name(r); }

// The options with the class weights on x's device and in x's dtype (the kernels read any
// floating dtype; the move makes them the loss's).
ClassLossOptions options_for(const ClassLossOptions& o, const Variable& x) {
  ClassLossOptions r = o;
  if (o.weight.defined()) r.weight = o.weight.to(x.device()).to(x.dtype());
  return r;
}

std::string class_loss_repr(Reduction r, const ClassLossOptions& o, bool smoothing) {
  std::string s = reduction_repr(r);
  if (o.weight.defined()) s += ", weight=" + o.weight.meta();
  if (o.ignore_index != -100) s += detail::cat(", ignore_index=", o.ignore_index);
  if (smoothing && o.label_smoothing != 0.0) s += detail::cat(", label_smoothing=", o.label_smoothing);
  return s;
}

void check_weight(const char* module, const ClassLossOptions& o) {
  if (!o.weight.defined()) return;
  MT_CHECK(o.weight.dim() == 1 && is_floating(o.weight.dtype()), module,
           ": weight must be a floating 1-dim tensor of class weights, got ", o.weight.meta());
}

// BCELoss's and BCEWithLogitsLoss's weight and pos_weight (Note [Binary loss weights] in
// autograd/functions/loss.cpp), checked when the module is made; their shapes are checked against
// the input at each call.
void check_binary_weight(const char* module, const char* what, const Tensor& weight) {
  if (!weight.defined()) return;
  MT_CHECK(is_floating(weight.dtype()), module, ": ", what, " must be a floating tensor, got ", weight.meta());
}

std::string binary_loss_repr(Reduction r, const BinaryLossOptions& o) {
  return reduction_repr(r) + (o.weight.defined() ? ", weight=" + o.weight.meta() : std::string()) +
         (o.pos_weight.defined() ? ", pos_weight=" + o.pos_weight.meta() : std::string());
}

}  // namespace

CrossEntropyLoss::CrossEntropyLoss(Reduction reduction, ClassLossOptions options)
    : Module("CrossEntropyLoss"), reduction_(reduction), options_(std::move(options)) {
  check_weight("CrossEntropyLoss", options_);
  MT_CHECK(options_.label_smoothing >= 0.0 && options_.label_smoothing <= 1.0,
           "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", options_.label_smoothing);
}

Variable CrossEntropyLoss::forward(const Variable& logits, const Tensor& targets) {
  check_args(*this, logits, targets);
  const Variable x = fp32_input(OpId::cross_entropy, logits);
  return cross_entropy(x, targets, reduction_, options_for(options_, x));
}

std::string CrossEntropyLoss::extra_repr() const { return class_loss_repr(reduction_, options_, true); }

NLLLoss::NLLLoss(Reduction reduction, ClassLossOptions options)
    : Module("NLLLoss"), reduction_(reduction), options_(std::move(options)) {
  check_weight("NLLLoss", options_);
  MT_CHECK(options_.label_smoothing == 0.0, "NLLLoss: label_smoothing is CrossEntropyLoss's option, got ",
           options_.label_smoothing);
}

Variable NLLLoss::forward(const Variable& log_probs, const Tensor& targets) {
  check_args(*this, log_probs, targets);
  const Variable x = fp32_input(OpId::nll_loss, log_probs);
  return nll_loss(x, targets, reduction_, options_for(options_, x));
}

std::string NLLLoss::extra_repr() const { return class_loss_repr(reduction_, options_, false); }

BCELoss::BCELoss(Reduction reduction, Tensor weight)
    : Module("BCELoss"), reduction_(reduction), options_{.weight = std::move(weight), .pos_weight = {}} {
  check_binary_weight("BCELoss", "weight", options_.weight);
}

Variable BCELoss::forward(const Variable& probs, const Tensor& targets) {
  check_args(*this, probs, targets);
  const Variable x = fp32_input(OpId::binary_cross_entropy, probs);  // Note [BCE on probabilities]
  return binary_cross_entropy(x, targets.to(x.dtype()), reduction_, options_);
}

std::string BCELoss::extra_repr() const { return binary_loss_repr(reduction_, options_); }

L1Loss::L1Loss(Reduction reduction) : Module("L1Loss"), reduction_(reduction) {}

Variable L1Loss::forward(const Variable& input, const Tensor& target) {
  check_args(*this, input, target);
  const Variable x = fp32_input(OpId::l1_loss, input);
  return l1_loss(x, target.to(x.dtype()), reduction_);
}

std::string L1Loss::extra_repr() const { return reduction_repr(reduction_); }

SmoothL1Loss::SmoothL1Loss(Reduction reduction, double beta)
    : Module("SmoothL1Loss"), reduction_(reduction), beta_(beta) {
  MT_CHECK(beta >= 0.0 && std::isfinite(beta), "SmoothL1Loss: beta must be finite and >= 0, got ", beta);
}

Variable SmoothL1Loss::forward(const Variable& input, const Tensor& target) {
  check_args(*this, input, target);
  const Variable x = fp32_input(OpId::smooth_l1_loss, input);
  return smooth_l1_loss(x, target.to(x.dtype()), reduction_, beta_);
}

std::string SmoothL1Loss::extra_repr() const { return detail::cat(reduction_repr(reduction_), ", beta=", beta_); }

BCEWithLogitsLoss::BCEWithLogitsLoss(Reduction reduction, Tensor weight, Tensor pos_weight)
    : Module("BCEWithLogitsLoss"),
      reduction_(reduction),
      options_{.weight = std::move(weight), .pos_weight = std::move(pos_weight)} {
  check_binary_weight("BCEWithLogitsLoss", "weight", options_.weight);
  check_binary_weight("BCEWithLogitsLoss", "pos_weight", options_.pos_weight);
}

Variable BCEWithLogitsLoss::forward(const Variable& logits, const Tensor& targets) {
  check_args(*this, logits, targets);
  const Variable x = fp32_input(OpId::bce_with_logits, logits);
  return binary_cross_entropy_with_logits(x, targets.to(x.dtype()), reduction_, options_);
}

std::string BCEWithLogitsLoss::extra_repr() const { return binary_loss_repr(reduction_, options_); }

MSELoss::MSELoss(Reduction reduction) : Module("MSELoss"), reduction_(reduction) {}

Variable MSELoss::forward(const Variable& input, const Tensor& target) {
  check_args(*this, input, target);
  const Variable x = fp32_input(OpId::mse_loss, input);
  return mse_loss(x, target.to(x.dtype()), reduction_);
}

std::string MSELoss::extra_repr() const { return reduction_repr(reduction_); }

}  // namespace mixtape::nn
