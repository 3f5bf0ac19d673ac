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

// Note [Binary loss weights]
// BCELoss and BCEWithLogitsLoss take PyTorch's optional `weight`: each element's loss times the
// weight broadcast to the input's shape, then the reduction, so a mean divides the weighted sum by
// the number of elements (not by the sum of the weights, as cross_entropy's class weights do). It
// is that composition here: the unreduced loss op, a multiplication by the constant weight (in the
// loss's dtype, f32 under the fp32 allow-list) and a sum or mean, each differentiated as usual.
void check_binary_weight(const char* module, const Tensor& weight) {
  if (!weight.defined()) return;
  MT_CHECK(is_floating(weight.dtype()), module, ": weight must be a floating tensor, got ", weight.meta());
}

Variable weighted_loss(const Module& m, const Variable& losses, const Tensor& weight, Reduction r) {
  const Shape& shape = losses.data().shape();
  bool fits = weight.dim() <= int64_t(shape.size());
  for (int64_t i = 1; fits && i <= weight.dim(); ++i) {  // trailing dims: equal, or 1 in the weight
    const int64_t w = weight.size(weight.dim() - i);
    fits = w == 1 || w == shape[shape.size() - size_t(i)];
  }
  MT_CHECK(fits, m.str(), ": weight ", weight.meta(), " does not broadcast to the input's shape ",
           losses.data().meta());
  const Variable w = losses * Variable(weight.to(losses.data().device()).to(losses.data().dtype()));
  return r == Reduction::none ? w : r == Reduction::sum ? sum(w) : mean(w);
}

std::string binary_loss_repr(Reduction r, const Tensor& weight) {
  return reduction_repr(r) + (weight.defined() ? ", weight=" + weight.meta() : std::string());
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
    : Module("BCELoss"), reduction_(reduction), weight_(std::move(weight)) {
  check_binary_weight("BCELoss", weight_);
}

Variable BCELoss::forward(const Variable& probs, const Tensor& targets) {
  check_args(*this, probs, targets);
  const Variable x = fp32_input(OpId::binary_cross_entropy, probs);  // Note [BCE on probabilities]
  if (!weight_.defined()) return binary_cross_entropy(x, targets.to(x.dtype()), reduction_);
  return weighted_loss(*this, binary_cross_entropy(x, targets.to(x.dtype()), Reduction::none), weight_, reduction_);
}

std::string BCELoss::extra_repr() const { return binary_loss_repr(reduction_, weight_); }

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

BCEWithLogitsLoss::BCEWithLogitsLoss(Reduction reduction, Tensor weight)
    : Module("BCEWithLogitsLoss"), reduction_(reduction), weight_(std::move(weight)) {
  check_binary_weight("BCEWithLogitsLoss", weight_);
}

Variable BCEWithLogitsLoss::forward(const Variable& logits, const Tensor& targets) {
  check_args(*this, logits, targets);
  const Variable x = fp32_input(OpId::bce_with_logits, logits);
  if (!weight_.defined()) return binary_cross_entropy_with_logits(x, targets.to(x.dtype()), reduction_);
  return weighted_loss(*this, binary_cross_entropy_with_logits(x, targets.to(x.dtype()), Reduction::none), weight_,
                       reduction_);
}

std::string BCEWithLogitsLoss::extra_repr() const { return binary_loss_repr(reduction_, weight_); }

MSELoss::MSELoss(Reduction reduction) : Module("MSELoss"), reduction_(reduction) {}

Variable MSELoss::forward(const Variable& input, const Tensor& target) {
  check_args(*this, input, target);
  const Variable x = fp32_input(OpId::mse_loss, input);
  return mse_loss(x, target.to(x.dtype()), reduction_);
}

std::string MSELoss::extra_repr() const { return reduction_repr(reduction_); }

}  // namespace mixtape::nn
