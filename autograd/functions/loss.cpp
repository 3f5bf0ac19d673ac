#include "autograd/functions/loss.h"

#include "autograd/tape.h"

namespace mixtape {

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

Variable binary_cross_entropy(const Variable& probs, const Variable& targets, Reduction reduction) {
  Tensor y = mixtape::binary_cross_entropy(probs.data(), targets.data(), reduction);
  return record(
      OpId::binary_cross_entropy, {probs, targets}, y,
      [x = probs.data(), t = targets.data(), reduction](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    LossGrads g = binary_cross_entropy_backward(x, t, dy[0], reduction, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
      });
}

Variable binary_cross_entropy(const Variable& probs, const Tensor& targets, Reduction reduction) {
  return binary_cross_entropy(probs, Variable(targets), reduction);
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

Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& targets, Reduction reduction) {
  Tensor y = mixtape::binary_cross_entropy_with_logits(logits.data(), targets.data(), reduction);
  return record(OpId::bce_with_logits, {logits, targets}, y,
                [x = logits.data(), t = targets.data(), reduction](const std::vector<Tensor>& dy,
                                                                   const std::vector<bool>& needs) {
    LossGrads g = binary_cross_entropy_with_logits_backward(x, t, dy[0], reduction, needs[0], needs[1]);
    return std::vector<Tensor>{g.da, g.db};
  });
}

Variable binary_cross_entropy_with_logits(const Variable& logits, const Tensor& targets, Reduction reduction) {
  return binary_cross_entropy_with_logits(logits, Variable(targets), reduction);
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
