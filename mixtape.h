// The public API in one include: tensors, tensor ops, autograd and differentiable ops.
#pragma once

#include "autograd/autograd.h"
#include "nn/nn.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
