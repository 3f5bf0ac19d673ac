// LSTM cell CPU kernels, forward and backward side by side. Inputs have any strides; outputs
// are freshly allocated (contiguous) by the front-end. Shapes: gates [B, 4H], the rest [B, H].
#pragma once

#include "tensor/core/strided.h"

namespace mixtape::cpu {

void lstm_cell(const Strided& gates, const Strided& c_prev, const Strided& c, const Strided& h);
void lstm_cell_backward(const Strided& gates, const Strided& c_prev, const Strided& dc, const Strided& dh,
                        const Strided& d_gates, const Strided& d_c_prev);

}  // namespace mixtape::cpu
