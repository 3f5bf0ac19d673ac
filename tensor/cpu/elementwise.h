// Elementwise CPU kernels: unary ops (forward and backward side by side) and binary ops with
// broadcasting. Inputs are any strides; outputs are freshly allocated by the front-end.
#pragma once

#include "tensor/core/op_kinds.h"
#include "tensor/tensor.h"

namespace mixtape::cpu {

void unary(UnaryOp op, const Tensor& x, Tensor& out, double a, double b);
// dx = dy * f'(x) using x and/or the saved output y (each op reads what it needs).
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                    double a, double b);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace mixtape::cpu
