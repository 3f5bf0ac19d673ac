// Declarations of the CUDA op launchers listed in cuda/launchers.def. They take Strided operands
// (tensor/core/strided.h): cuda/ sees tensor/core/, never Tensor (Note [Kernel arguments]).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/core/op_kinds.h"
#include "tensor/core/scale_formulas.h"
#include "tensor/core/strided.h"
#include "tensor/core/update_formulas.h"
#include "tensor/core/upsample_formulas.h"

namespace mixtape::cuda {

#define MT_CUDA_LAUNCHER(name, params) void name params;
#include "cuda/launchers.def"
#undef MT_CUDA_LAUNCHER

double max_abs(const Strided& x);

}  // namespace mixtape::cuda
