// Declarations of the CUDA op launchers listed in cuda/launchers.def.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/core/op_kinds.h"
#include "tensor/tensor.h"

namespace mixtape::cuda {

#define MT_CUDA_LAUNCHER(name, params) void name params;
#include "cuda/launchers.def"
#undef MT_CUDA_LAUNCHER

double max_abs(const Tensor& x);

}  // namespace mixtape::cuda
