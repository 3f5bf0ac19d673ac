// Differentiable batch norm, dropout and embedding (tensor-level kernels: tensor/ops/nn.h).
// Every node passes the incoming gradient scale through.
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "tensor/core/rng.h"

namespace mixtape {

// weight and bias may be undefined Variables (no affine part). running_mean / running_var are
// plain buffers, updated in place in training mode and used for normalization in eval mode (see
// batch_norm_forward). Training-mode backward runs through the batch statistics; eval-mode
// backward is the affine map's. Gradients of weight and bias come in the parameters' dtype.
Variable batch_norm(const Variable& x, const Variable& weight, const Variable& bias, const Tensor& running_mean,
                    const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// Inverted dropout (Note [Dropout mask] in tensor/ops/nn.h). Returns x itself when !training or
// p == 0. The backward pass regenerates the mask from the generator state of the forward pass.
Variable dropout(const Variable& x, double p, bool training, Generator& gen);

// weight [V, D] rows at i64 `indices` (any shape); dW scatter-adds, so repeated indices sum.
Variable embedding(const Tensor& indices, const Variable& weight);

}  // namespace mixtape
