// Every tensor-level op front-end (no autograd).
#pragma once

#include "tensor/ops/batch_norm.h"
#include "tensor/ops/conv.h"
#include "tensor/ops/dropout.h"
#include "tensor/ops/elementwise.h"
#include "tensor/ops/embedding.h"
#include "tensor/ops/grad_telemetry.h"
#include "tensor/ops/linalg.h"
#include "tensor/ops/loss.h"
#include "tensor/ops/lstm.h"
#include "tensor/ops/optim.h"
#include "tensor/ops/pool.h"
#include "tensor/ops/reduce.h"
#include "tensor/ops/shape.h"
#include "tensor/ops/stats.h"
#include "tensor/tensor.h"
#include "tensor/threads.h"
