// Elementwise CPU kernels: unary ops (forward and backward side by side) and binary ops with
// broadcasting. Inputs are any strides; outputs are freshly allocated by the front-end.
#pragma once

#include "tensor/core/op_kinds.h"
#include "tensor/core/strided.h"

namespace mixtape::cpu {

void unary(UnaryOp op, const Strided& x, const Strided& out, double a, double b);
// dx = dy * f'(x) using x and/or the saved output y (each op reads what it needs).
void unary_backward(UnaryOp op, const Strided& x, const Strided& y, const Strided& dy, const Strided& dx, double a,
                    double b);
void binary(BinaryOp op, const Strided& a, const Strided& b, const Strided& out);

}  // namespace mixtape::cpu
