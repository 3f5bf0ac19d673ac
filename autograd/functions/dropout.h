// Differentiable dropout (tensor-level kernel: tensor/ops/dropout.h). The node passes the
// incoming gradient scale through.
#pragma once

#include <cstdint>

#include "autograd/variable.h"
#include "tensor/core/rng.h"

namespace mixtape {

// Inverted dropout (Note [Dropout mask] in tensor/ops/dropout.h). Returns x itself when
// !training or p == 0. The backward pass regenerates the mask from the generator state of the
// forward pass.
Variable dropout(const Variable& x, double p, bool training, Generator& gen);

}  // namespace mixtape
