// Inverted dropout on plain tensors (no autograd); the differentiable version is in
// autograd/functions/dropout.h.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixtape {

// Inverted dropout: y = x * mask / (1 - p), mask_i ~ Bernoulli(1 - p). The mask comes from the
// Philox stream of `gen` (Note [Dropout mask]), so it depends only on the seed, the generator's
// offset and the element's row-major index: reproducible and independent of threads or device.
// Identity (and no random numbers drawn) when !training or p == 0. p must be in [0, 1).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// Note [Dropout mask]
// Element i (row-major) is kept when uniform01_f64(philox_words(seed, offset + i)[0..1]) < 1 - p,
// the same draw as bernoulli(x.shape(), 1 - p, gen) from the same generator state. A draw
// reserves numel counters (gen.advance). The backward pass regenerates the mask from
// (seed, offset) instead of storing it, by applying the same function to dy:
//   dx = dy * mask / (1 - p) = dropout_apply(dy, p, seed, offset).
Tensor dropout_apply(const Tensor& x, double p, uint64_t seed, uint64_t offset);

}  // namespace mixtape
