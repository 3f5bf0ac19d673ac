// CPU kernels for softmax and the losses, forward and backward side by side. Inputs may have
// any strides; outputs are allocated by the front-ends (tensor/ops/loss.cpp), which validate.
//
// Reductions reach the kernels as (reduce, divisor): reduce = false writes one loss per element
// into `out` (the targets' shape) and reads one dy per element; reduce = true writes the single
// value sum / divisor into the 0-dim `out` and reads the 0-dim dy, with g = dy / divisor for
// every element (divisor = 1 for sum, the element count for mean).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape::cpu {

// log_out selects log_softmax. dim is wrapped (non-negative).
void softmax(const Tensor& x, int64_t dim, bool log_out, Tensor& out);
void softmax_backward(const Tensor& y, const Tensor& dy, int64_t dim, bool log_out, Tensor& dx);

// Class dim 1; targets: logits' shape without dim 1. Throws on a target outside [0, C).
void cross_entropy(const Tensor& logits, const Tensor& targets, bool reduce, double divisor, Tensor& out);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& dy, bool reduce,
                            double divisor, Tensor& dlogits);

// dx, dt (da, db): outputs, each undefined when not wanted.
void bce_with_logits(const Tensor& x, const Tensor& t, bool reduce, double divisor, Tensor& out);
void bce_with_logits_backward(const Tensor& x, const Tensor& t, const Tensor& dy, bool reduce, double divisor,
                              Tensor& dx, Tensor& dt);

void mse_loss(const Tensor& a, const Tensor& b, bool reduce, double divisor, Tensor& out);
void mse_loss_backward(const Tensor& a, const Tensor& b, const Tensor& dy, bool reduce, double divisor, Tensor& da,
                       Tensor& db);

}  // namespace mixtape::cpu
