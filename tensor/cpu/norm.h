// CPU kernels for layer norm and group norm, forward and backward side by side. Both are one
// kernel: x contiguous, seen as [N, C, L] (N outer rows, C channels that index the affine
// parameters, L inner positions), its C channels split into G groups of K = C / G. Each (n, g)
// is one group of M = K * L elements with its own statistics:
//   layer_norm: N = the leading dims, C = the normalized shape's size, L = 1, G = 1
//   group_norm: N = batch, C = channels, L = the spatial size, G = groups
// The front-end (tensor/ops/norm.cpp) has validated the arguments and made x and dy contiguous.
#pragma once

#include <cstdint>

#include "tensor/core/strided.h"

namespace mixtape::cpu {

// mean, invstd: contiguous [N * G] of compute_t<x dtype>, written here. weight, bias: [C] or
// undefined; y: x's shape, contiguous.
void group_norm_forward(const Strided& x, int64_t channels, int64_t inner, int64_t groups, const Strided& weight,
                        const Strided& bias, double eps, const Strided& y, const Strided& mean, const Strided& invstd);
// dx, dweight, dbias: outputs, each undefined when not wanted; dy contiguous like x.
void group_norm_backward(const Strided& dy, const Strided& x, int64_t channels, int64_t inner, int64_t groups,
                         const Strided& weight, const Strided& mean, const Strided& invstd, const Strided& dx,
                         const Strided& dweight, const Strided& dbias);

}  // namespace mixtape::cpu
