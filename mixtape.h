// The public API in one include: tensors, tensor ops, autograd and differentiable ops.
#pragma once

#include "autograd/autograd.h"
#include "data/data.h"
#include "dist/dist.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tensor/safetensors.h"
#include "tensor/state_io.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "train/train.h"
