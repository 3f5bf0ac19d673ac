#include "autograd/functions/loss.h"

#include "autograd/functions/elementwise.h"
#include "autograd/functions/reduce.h"
#include "autograd/tape.h"

namespace mixtape {

namespace {

// Note [Binary loss weights]
// binary_cross_entropy and binary_cross_entropy_with_logits take PyTorch's optional `weight`:
// each element's loss times the weight broadcast to the input's shape, then the reduction, so a
// mean divides the weighted sum by the number of elements (not by the sum of the weights, as
// cross_entropy's class weights do). It is that composition here: the unreduced loss op, a
// multiplication by the constant weight (in the loss's dtype, f32 under the fp32 allow-list) and a
// sum or mean, each differentiated as usual. pos_weight p (with logits) weighs the positive term:
// since -log sigmoid(x) = softplus(-x), the loss gains (p - 1) t softplus(-x), a constant times a
// differentiable op, before the weight and the reduction.

// Throws unless `t` (weight or pos_weight) is floating and broadcasts to `shape`'s trailing dims.
void check_broadcast(const char* op, const char* what, const Tensor& t, const Tensor& input) {
  MT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be a floating tensor, got ", t.meta());
  const Shape& shape = input.shape();
  bool fits = t.dim() <= int64_t(shape.size());
  for (int64_t i = 1; fits && i <= t.dim(); ++i) {  // trailing dims: equal, or 1 in t
    const int64_t n = t.size(t.dim() - i);
    fits = n == 1 || n == shape[shape.size() - size_t(i)];
  }
  MT_CHECK(fits, op, ": ", what, " ", t.meta(), " does not broadcast to the input's shape ", input.meta());
}

// `t` as a constant in x's dtype and device.
Variable constant_like(const Tensor& t, const Variable& x) { return Variable(t.to(x.device()).to(x.dtype())); }

Variable reduce(const Variable& losses, Reduction r) {
  return r == Reduction::none ? losses : r == Reduction::sum ? sum(losses) : mean(losses);
}

}  // namespace

Variable softmax(const Variable& x, int64_t dim) {
  Tensor y = mixtape::softmax(x.data(), dim);
  return record(OpId::softmax, {x}, y, [y, dim](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{softmax_backward(y, dy[0], dim)};
  });
}

Variable log_softmax(const Variable& x, int64_t dim) {
  Tensor y = mixtape::log_softmax(x.data(), dim);
  return record(OpId::log_softmax, {x}, y, [y, dim](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{log_softmax_backward(y, dy[0], dim)};
  });
}

Variable cross_entropy(const Variable& logits, const Tensor& targets, Reduction reduction,
                       const ClassLossOptions& options) {
  // Backward recomputes the softmax from the logits (kept alive anyway) instead of saving it.
  return record(
      OpId::cross_entropy, {logits}, mixtape::cross_entropy(logits.data(), targets, reduction, options),
      [x = logits.data(), targets, reduction, options](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{cross_entropy_backward(x, targets, dy[0], reduction, options)};
      });
}

Variable nll_loss(const Variable& log_probs, const Tensor& targets, Reduction reduction,
                  const ClassLossOptions& options) {
  return record(
      OpId::nll_loss, {log_probs}, mixtape::nll_loss(log_probs.data(), targets, reduction, options),
      [x = log_probs.data(), targets, reduction, options](const std::vector<Tensor>& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{nll_loss_backward(x, targets, dy[0], reduction, options)};
      });
}

Variable binary_cross_entropy(const Variable& probs, const Variable& targets, Reduction reduction,
                              const BinaryLossOptions& options) {
  MT_CHECK(!options.pos_weight.defined(),
           "binary_cross_entropy: pos_weight is binary_cross_entropy_with_logits's option (as torch's)");
  if (options.weight.defined()) {  // Note [Binary loss weights]
    check_broadcast("binary_cross_entropy", "weight", options.weight, probs.data());
    return reduce(binary_cross_entropy(probs, targets, Reduction::none) * constant_like(options.weight, probs),
                  reduction);
  }
  Tensor y = mixtape::binary_cross_entropy(probs.data(), targets.data(), reduction);
  return record(
      OpId::binary_cross_entropy, {probs, targets}, y,
      [x = probs.data(), t = targets.data(), reduction](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    LossGrads g = binary_cross_entropy_backward(x, t, dy[0], reduction, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
      });
}

Variable binary_cross_entropy(const Variable& probs, const Tensor& targets, Reduction reduction,
                              const BinaryLossOptions& options) {
  return binary_cross_entropy(probs, Variable(targets), reduction, options);
}

Variable l1_loss(const Variable& input, const Variable& target, Reduction reduction) {
  Tensor y = mixtape::l1_loss(input.data(), target.data(), reduction);
  return record(
      OpId::l1_loss, {input, target}, y,
      [a = input.data(), b = target.data(), reduction](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    LossGrads g = l1_loss_backward(a, b, dy[0], reduction, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
      });
}

Variable l1_loss(const Variable& input, const Tensor& target, Reduction reduction) {
  return l1_loss(input, Variable(target), reduction);
}

Variable smooth_l1_loss(const Variable& input, const Variable& target, Reduction reduction, double beta) {
  Tensor y = mixtape::smooth_l1_loss(input.data(), target.data(), reduction, beta);
  return record(OpId::smooth_l1_loss, {input, target}, y,
                [a = input.data(), b = target.data(), reduction, beta](const std::vector<Tensor>& dy,
                                                                       const std::vector<bool>& needs) {
    LossGrads g = smooth_l1_loss_backward(a, b, dy[0], reduction, beta, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
  });
}

Variable smooth_l1_loss(const Variable& input, const Tensor& target, Reduction reduction, double beta) {
  return smooth_l1_loss(input, Variable(target), reduction, beta);
}

Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& targets, Reduction reduction,
                                          const BinaryLossOptions& options) {
  const char* op = "binary_cross_entropy_with_logits";
  if (options.weight.defined() || options.pos_weight.defined()) {  // Note [Binary loss weights]
    Variable losses = binary_cross_entropy_with_logits(logits, targets, Reduction::none);
    if (options.pos_weight.defined()) {
      check_broadcast(op, "pos_weight", options.pos_weight, logits.data());
      const Tensor p = options.pos_weight.to(logits.device()).to(logits.dtype());
      losses = losses + Variable((p - 1.0) * targets.data().to(logits.dtype())) * softplus(-logits);
    }
    if (options.weight.defined()) {
      check_broadcast(op, "weight", options.weight, logits.data());
      losses = losses * constant_like(options.weight, logits);
    }
    return reduce(losses, reduction);
  }
  Tensor y = mixtape::binary_cross_entropy_with_logits(logits.data(), targets.data(), reduction);
  return record(OpId::bce_with_logits, {logits, targets}, y,
                [x = logits.data(), t = targets.data(), reduction](const std::vector<Tensor>& dy,
                                                                   const std::vector<bool>& needs) {
    LossGrads g = binary_cross_entropy_with_logits_backward(x, t, dy[0], reduction, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
  });
}

Variable binary_cross_entropy_with_logits(const Variable& logits, const Tensor& targets, Reduction reduction,
                                          const BinaryLossOptions& options) {
  return binary_cross_entropy_with_logits(logits, Variable(targets), reduction, options);
}

Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction) {
  Tensor y = mixtape::mse_loss(input.data(), target.data(), reduction);
  return record(
      OpId::mse_loss, {input, target}, y,
      [a = input.data(), b = target.data(), reduction](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    LossGrads g = mse_loss_backward(a, b, dy[0], reduction, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
      });
}

Variable mse_loss(const Variable& input, const Tensor& target, Reduction reduction) {
  return mse_loss(input, Variable(target), reduction);
}

}  // namespace mixtape
