// Differentiable softmax, log-softmax and losses (tensor-level kernels: tensor/ops/loss.h, which
// also defines Reduction). Every node passes the incoming gradient scale through; each backward
// formula is linear in dy, so a loss scale S reaches the inputs exactly.
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "tensor/ops/loss.h"

namespace mixtape {

Variable softmax(const Variable& x, int64_t dim);
Variable log_softmax(const Variable& x, int64_t dim);

// logits [N, C] (or [N, C, d...]) against i64 class targets [N] (or [N, d...]); class weights,
// ignore_index and label smoothing in `options` (tensor/ops/loss.h; the weights are constants).
Variable cross_entropy(const Variable& logits, const Tensor& targets, Reduction reduction = Reduction::mean,
                       const ClassLossOptions& options = {});
// Log-probabilities [N, C] (or [N, C, d...]) against class targets, as cross_entropy's.
Variable nll_loss(const Variable& log_probs, const Tensor& targets, Reduction reduction = Reduction::mean,
                  const ClassLossOptions& options = {});

// The optional tensors of torch.nn.functional.binary_cross_entropy(_with_logits), constants
// (Note [Binary loss weights] in loss.cpp):
//   weight      each element's loss times weight broadcast to the input's shape, before the
//               reduction (a mean divides by the number of elements);
//   pos_weight  with logits only: the positive term's weight, broadcast along the last dim (one
//               per class): -[p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))].
struct BinaryLossOptions {
  Tensor weight;
  Tensor pos_weight;
};

// Probabilities in [0, 1] against targets of the same shape; differentiable in both.
Variable binary_cross_entropy(const Variable& probs, const Variable& targets, Reduction reduction = Reduction::mean,
                              const BinaryLossOptions& options = {});
Variable binary_cross_entropy(const Variable& probs, const Tensor& targets, Reduction reduction = Reduction::mean,
                              const BinaryLossOptions& options = {});

// |input - target| and the smooth L1 loss (beta >= 0); differentiable in both inputs.
Variable l1_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::mean);
Variable l1_loss(const Variable& input, const Tensor& target, Reduction reduction = Reduction::mean);
Variable smooth_l1_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::mean,
                        double beta = 1.0);
Variable smooth_l1_loss(const Variable& input, const Tensor& target, Reduction reduction = Reduction::mean,
                        double beta = 1.0);

// Differentiable in both logits and targets (d/dt = -logits).
Variable binary_cross_entropy_with_logits(const Variable& logits, const Variable& targets,
                                          Reduction reduction = Reduction::mean, const BinaryLossOptions& options = {});
// Targets as a constant.
Variable binary_cross_entropy_with_logits(const Variable& logits, const Tensor& targets,
                                          Reduction reduction = Reduction::mean, const BinaryLossOptions& options = {});

// Differentiable in both inputs.
Variable mse_loss(const Variable& input, const Variable& target, Reduction reduction = Reduction::mean);
Variable mse_loss(const Variable& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace mixtape
