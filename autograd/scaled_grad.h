// ScaledGrad: a gradient that carries its scale. `g` holds scale x (true gradient); scales are
// powers of two, so scaling and unscaling are exact unless a value under- or overflows.
// This is Zhao et al.'s tuple <alpha, dX>; loss scaling is the special case where every
// gradient shares the loss scale S.
#pragma once

#include "tensor/tensor.h"

namespace mixtape {

struct ScaledGrad {
  Tensor g;
  float scale = 1.0f;

  bool defined() const { return g.defined(); }
  // The true gradient in f32 (or f64 for f64 gradients): g / scale, computed in fp32.
  // This is the single place a gradient is unscaled.
  Tensor unscaled() const;
};

// Whether s can be a scale: a power of two in [2^-126, 2^127], the normal float powers of two
// (Note [Loss scales are powers of two] in optim/loss_scaler.h). Multiplying by such an s and
// dividing by it again is exact unless a value leaves its format's range.
bool is_power_of_two(double s);

}  // namespace mixtape
