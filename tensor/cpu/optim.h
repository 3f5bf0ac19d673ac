// CPU kernels of the fused optimizer updates (tensor/ops/optim.h). The front-end has validated
// shapes, dtypes and hyper-parameters; param and state are updated in place, any strides.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape::cpu {

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, int64_t step);
void adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, int64_t step);

}  // namespace mixtape::cpu
