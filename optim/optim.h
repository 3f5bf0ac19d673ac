// Optimizers, gradient clipping and learning-rate schedules.
#pragma once

#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
#include "tensor/ops/optim.h"
#include "tensor/safetensors.h"
