// Differentiable convolutions (GEMM-like nodes, autograd/scaling.h): dX is computed from
// beta * dY with beta from gemm_beta and carries beta * alpha; dW and db keep alpha.
#pragma once

#include "autograd/variable.h"
#include "tensor/ops/conv.h"

namespace mixtape {

// x [N, C, H, W], w [OC, C/groups, KH, KW], b [OC] or an undefined Variable -> [N, OC, OH, OW].
// A grouped node asks gemm_beta with its own group's dot-product length, OC/groups*KH*KW.
// padding as torch's: a size, or "same" (stride 1; tensor/ops/conv.h same_padding) -> [N, OC, H, W].
Variable conv2d(const Variable& x, const Variable& w, const Variable& b = Variable(), Size2 stride = 1,
                ConvPadding padding = 0, Size2 dilation = 1, int64_t groups = 1);
// x [N, IC, H, W], w [IC, OC, KH, KW], b [OC] or undefined -> [N, OC, OH, OW], the adjoint of conv2d.
Variable conv_transpose2d(const Variable& x, const Variable& w, const Variable& b = Variable(), Size2 stride = 1,
                          Size2 padding = 0, Size2 output_padding = 0, Size2 dilation = 1);

}  // namespace mixtape
