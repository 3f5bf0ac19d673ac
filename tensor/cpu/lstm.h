// LSTM cell CPU kernels, forward and backward side by side. Inputs have any strides; outputs
// are freshly allocated (contiguous) by the front-end. Shapes: gates [B, 4H], the rest [B, H].
#pragma once

#include "tensor/tensor.h"

namespace mixtape::cpu {

void lstm_cell(const Tensor& gates, const Tensor& c_prev, Tensor& c, Tensor& h);
void lstm_cell_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& dc, const Tensor& dh,
                        Tensor& d_gates, Tensor& d_c_prev);

}  // namespace mixtape::cpu
