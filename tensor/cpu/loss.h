// CPU kernels for softmax and the losses, forward and backward side by side. Inputs may have
// any strides; outputs are allocated by the front-ends (tensor/ops/loss.cpp), which validate.
//
// Reductions reach the kernels as (reduce, divisor): reduce = false writes one loss per element
// into `out` (the targets' shape) and reads one dy per element; reduce = true writes the single
// value sum / divisor into the 0-dim `out` and reads the 0-dim dy, with g = dy / divisor for
// every element (divisor = 1 for sum, the element count for mean).
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// log_out selects log_softmax. dim is wrapped (non-negative).
void softmax(const Strided& x, int64_t dim, bool log_out, const Strided& out);
void softmax_backward(const Strided& y, const Strided& dy, int64_t dim, bool log_out, const Strided& dx);

// Class dim 1; targets: logits' shape without dim 1. Throws on a target outside [0, C) that is
// not ignore_index. weight: optional [C] class weights (any floating dtype); log_probs: the input
// holds log-probabilities (nll_loss) instead of logits (cross_entropy, with label_smoothing).
// mean (with reduce): the divisor is the sum of the weights of the targets that are not ignored
// (the count of those targets without class weights), as PyTorch's; else 1.
void cross_entropy(const Strided& logits, const Strided& targets, const Strided& weight, int64_t ignore_index,
                   double label_smoothing, bool log_probs, bool reduce, bool mean, const Strided& out);
void cross_entropy_backward(const Strided& logits, const Strided& targets, const Strided& weight, int64_t ignore_index,
                            double label_smoothing, bool log_probs, const Strided& dy, bool reduce, bool mean,
                            const Strided& dlogits);

// dx, dt (da, db): outputs, each undefined when not wanted.
void bce_with_logits(const Strided& x, const Strided& t, bool reduce, double divisor, const Strided& out);
void bce_with_logits_backward(const Strided& x, const Strided& t, const Strided& dy, bool reduce, double divisor,
                              const Strided& dx, const Strided& dt);

// Binary cross entropy on probabilities x (tensor/core/loss_formulas.h).
void bce(const Strided& x, const Strided& t, bool reduce, double divisor, const Strided& out);
void bce_backward(const Strided& x, const Strided& t, const Strided& dy, bool reduce, double divisor, const Strided& dx,
                  const Strided& dt);

// L1 and smooth L1 (beta = 0: L1) (tensor/core/loss_formulas.h).
void l1_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out);
void l1_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                      const Strided& da, const Strided& db);
void smooth_l1_loss(const Strided& a, const Strided& b, double beta, bool reduce, double divisor, const Strided& out);
void smooth_l1_loss_backward(const Strided& a, const Strided& b, double beta, const Strided& dy, bool reduce,
                             double divisor, const Strided& da, const Strided& db);

void mse_loss(const Strided& a, const Strided& b, bool reduce, double divisor, const Strided& out);
void mse_loss_backward(const Strided& a, const Strided& b, const Strided& dy, bool reduce, double divisor,
                       const Strided& da, const Strided& db);

}  // namespace mixtape::cpu
