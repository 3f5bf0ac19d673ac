// CPU kernels of the fused optimizer updates (tensor/ops/optim.h). The front-end has validated
// shapes, dtypes and hyper-parameters; param and state are updated in place, any strides.
// rounded_copy: absent, or the 16-bit copy written in the same pass (Note [Fused master copy]).
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

void sgd_update(const Strided& param, const Strided& grad, const Strided& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step, const Strided& rounded_copy);
// max_exp_avg_sq: absent, or AMSGrad's running maximum of exp_avg_sq.
void adam_update(const Strided& param, const Strided& grad, const Strided& exp_avg, const Strided& exp_avg_sq,
                 const Strided& max_exp_avg_sq, double lr, double beta1, double beta2, double eps, double weight_decay,
                 bool decoupled, int64_t step, const Strided& rounded_copy);
// grad_avg is read and written only when centered, momentum_buf only when momentum > 0.
void rmsprop_update(const Strided& param, const Strided& grad, const Strided& square_avg, const Strided& grad_avg,
                    const Strided& momentum_buf, double lr, double alpha, double eps, double weight_decay,
                    double momentum, bool centered, const Strided& rounded_copy);
void adagrad_update(const Strided& param, const Strided& grad, const Strided& sum, double lr, double lr_decay,
                    double eps, double weight_decay, int64_t step, const Strided& rounded_copy);

// out: 2 elements of g's compute dtype (f32, or f64 for f64 g): [any inf/NaN ? 1 : 0, max finite |g|].
void grad_stats(const Strided& g, const Strided& out);

// The 16-bit update rules (bf16 / f16 param and state, f32 gradient).
void sgd16_update(const Strided& param, const Strided& grad, const Strided& momentum_buf, const Strided& kahan_comp,
                  double lr, double momentum, double weight_decay, Rounding rounding, uint64_t seed, uint64_t offset);
void adamw16_update(const Strided& param, const Strided& grad, const Strided& exp_avg, const Strided& exp_avg_sq,
                    const Strided& max_exp_avg_sq, const Strided& kahan_comp, double lr, double beta1, double beta2,
                    double eps, double weight_decay, int64_t step, Rounding rounding, uint64_t seed, uint64_t offset);
void rmsprop16_update(const Strided& param, const Strided& grad, const Strided& square_avg, const Strided& grad_avg,
                      const Strided& momentum_buf, const Strided& kahan_comp, double lr, double alpha, double eps,
                      double weight_decay, double momentum, bool centered, Rounding rounding, uint64_t seed,
                      uint64_t offset);
void adagrad16_update(const Strided& param, const Strided& grad, const Strided& sum, const Strided& kahan_comp,
                      double lr, double lr_decay, double eps, double weight_decay, int64_t step, Rounding rounding,
                      uint64_t seed, uint64_t offset);

}  // namespace mixtape::cpu
