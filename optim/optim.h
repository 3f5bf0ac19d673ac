// Optimizers, gradient clipping, learning-rate schedules, and the mixed-precision layer: loss
// scalers, fp32 master weights and the pure 16-bit update rules.
#pragma once

#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/master_weights.h"
#include "optim/optimizer.h"
#include "optim/trainer.h"
#include "optim/pure16.h"
#include "optim/rmsprop.h"
#include "optim/scaled_step.h"
#include "optim/sgd.h"
#include "tensor/ops/optim.h"
#include "tensor/safetensors.h"
