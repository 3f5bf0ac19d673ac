// Softmax, log-softmax and losses on plain tensors (no autograd), forward and backward side by
// side; the differentiable versions are in autograd/functions/loss.h.
//
// These ops are on the fp32 allow-list (docs/design.md section 5): whatever the input dtype, the CPU
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

// ---- cross entropy and nll_loss ----------------------------------------------------------
// The options of torch.nn.functional.cross_entropy / nll_loss:
//   weight           optional class weights [C] (floating, on the input's device; a constant,
//                    no gradient): loss_i is multiplied by weight[target_i]
//   ignore_index     a target equal to it contributes 0 to the loss and to the mean's divisor,
//                    and gets a zero gradient (it may be any value, also one inside [0, C))
//   label_smoothing  in [0, 1] (cross_entropy only): the target distribution becomes
//                    (1 - eps) onehot(t) + eps / C (Note [Cross-entropy options] in
//                    tensor/cpu/loss.cpp)
// mean divides the sum of the losses by the sum of weight[target_i] over the targets that are
// not ignored (their count without weights; with every target ignored that is 0 / 0 = NaN, as
// PyTorch's); none gives the losses in the targets' shape, 0 at ignored targets.
struct ClassLossOptions {
  Tensor weight;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// Fused log_softmax + negative log-likelihood over the class dim 1.
//   logits [N, C] with targets i64 [N], or logits [N, C, d1, ...] with targets [N, d1, ...];
//   loss_i = logsumexp(logits_i) - logits_i[target_i]; targets must lie in [0, C) (or equal
//   ignore_index).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::mean,
                     const ClassLossOptions& options = {});
// dlogits = (softmax(logits) - onehot(targets)) * g, g = dy (none, sum) or dy / divisor (mean),
// with the weights and the smoothing applied as in the forward.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy, Reduction reduction,
                              const ClassLossOptions& options = {});

// Negative log-likelihood of log-probabilities (the output of log_softmax), as
// torch.nn.functional.nll_loss: loss_i = -weight[t_i] * log_probs_i[t_i], shapes and options as
// cross_entropy's (label_smoothing must be 0).
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction = Reduction::mean,
                const ClassLossOptions& options = {});
// dlog_probs = -weight[t] * g at the target, 0 elsewhere.
Tensor nll_loss_backward(const Tensor& log_probs, const Tensor& targets, const Tensor& dy, Reduction reduction,
                         const ClassLossOptions& options = {});

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

// ---- binary cross entropy on probabilities -----------------------------------------------
// probs (in [0, 1]; a value outside is an error, which a CUDA device reports at its next read,
// Note [Deferred device checks]; NaN passes on, where PyTorch refuses it, so that a loss scaler
// sees it) and targets of one shape and floating dtype, as torch.nn.functional.binary_cross_entropy:
//   loss = -(t log(p) + (1 - t) log(1 - p)),  each log clamped to >= -100.
// The fp32 treatment it needs in mixed precision: Note [BCE on probabilities] in nn/loss.h.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& targets, Reduction reduction = Reduction::mean);
// d/dp = (p - t) / max(p (1 - p), 1e-12f) * g,  d/dt = (log(1 - p) - log(p)) * g (logs clamped).
LossGrads binary_cross_entropy_backward(const Tensor& probs, const Tensor& targets, const Tensor& dy,
                                        Reduction reduction, bool need_dprobs, bool need_dtargets);

// ---- L1 and smooth L1 ----------------------------------------------------------------------
// |a - b| over two tensors of one shape and dtype (torch.nn.functional.l1_loss).
Tensor l1_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);
// da = sign(a - b) g (0 where a == b),  db = -da.
LossGrads l1_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, bool need_da,
                           bool need_db);
// Huber-like: d = a - b, 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere; beta >= 0
// (0: l1_loss), as torch.nn.functional.smooth_l1_loss.
Tensor smooth_l1_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean, double beta = 1.0);
// da = (d / beta where |d| < beta, else sign(d)) g,  db = -da.
LossGrads smooth_l1_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, double beta,
                                  bool need_da, bool need_db);

// ---- mean squared error ------------------------------------------------------------------
// (a - b)^2 over two tensors of one shape and dtype (no broadcasting).
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);
// da = 2 (a - b) g,  db = -da.
LossGrads mse_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Reduction reduction, bool need_da,
                            bool need_db);

}  // namespace mixtape
