// CPU kernels of the fused optimizer updates (tensor/ops/optim.h). The front-end has validated
// shapes, dtypes and hyper-parameters; param and state are updated in place, any strides.
// rounded_copy: nullptr, or the 16-bit copy written in the same pass (Note [Fused master copy]).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape::cpu {

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step, Tensor* rounded_copy);
void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step, Tensor* rounded_copy);

// out: 2 elements of g's compute dtype (f32, or f64 for f64 g): [any inf/NaN ? 1 : 0, max finite |g|].
void grad_stats(const Tensor& g, Tensor& out);

// The 16-bit update rules (bf16 / f16 param and state, f32 gradient).
void sgd16_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, Tensor& kahan_comp, double lr,
                  double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset);
void adamw16_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& kahan_comp,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step,
                    Rounding rounding, uint64_t seed, uint64_t offset);

}  // namespace mixtape::cpu
