// Softmax, log-softmax and losses on plain tensors (no autograd), forward and backward side by
// side; the differentiable versions are in autograd/functions/loss.h.
//
// These ops are on the fp32 allow-list (DESIGN.md section 5): whatever the input dtype, the CPU
// kernels compute in fp32 (f64 for f64 inputs), accumulate sums in double, and round the output
// once to the input's dtype. (Mixed-precision models cast logits to f32 before the loss; the
// 16-bit paths here exist so that pure 16-bit runs still get one rounding per output.)
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

// How a loss combines its per-element values: the mean over elements, their sum, or none (the
// per-element losses, in the shape of the targets).
enum class Reduction : uint8_t { mean, sum, none };
const char* reduction_name(Reduction r);

// ---- softmax -----------------------------------------------------------------------------
// Along `dim` (negative counts from the back), max-subtracted so large logits do not overflow.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// From the forward output y:  softmax:     dx = y * (dy - sum(dy * y))
//                             log_softmax: dx = dy - exp(y) * sum(dy)     (sums along dim)
Tensor softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim);
Tensor log_softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim);

// ---- cross entropy -----------------------------------------------------------------------
// Fused log_softmax + negative log-likelihood over the class dim 1.
//   logits [N, C] with targets i64 [N], or logits [N, C, d1, ...] with targets [N, d1, ...];
//   loss_i = logsumexp(logits_i) - logits_i[target_i]; targets must lie in [0, C).
// mean divides by the number of targets; none returns the losses in the targets' shape.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::mean);
// dlogits = (softmax(logits) - onehot(targets)) * g, g = dy (none, sum) or dy / count (mean).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy, Reduction reduction);

// Gradients of a two-input loss; each undefined unless requested.
struct LossGrads {
  Tensor da;
  Tensor db;
};

// ---- binary cross entropy with logits ----------------------------------------------------
// logits and targets (probabilities) of one shape and floating dtype; in the stable form
//   loss = max(x, 0) - x * t + log(1 + exp(-|x|)).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                        Reduction reduction = Reduction::mean);
// d/dx = (sigmoid(x) - t) * g,  d/dt = -x * g  (g as for cross_entropy_backward).
LossGrads binary_cross_entropy_with_logits_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy,
                                                    Reduction reduction, bool need_dlogits, bool need_dtargets);

// ---- mean squared error ------------------------------------------------------------------
// (a - b)^2 over two tensors of one shape and dtype (no broadcasting).
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);
// da = 2 (a - b) g,  db = -da.
LossGrads mse_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, bool need_da,
                            bool need_db);

}  // namespace mixtape
