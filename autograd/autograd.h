// Everything autograd: Variable, Tape, NoGrad, scaling rules, and the differentiable ops.
#pragma once

#include "autograd/op_list.h"
#include "autograd/scaled_grad.h"
#include "autograd/scaling.h"
#include "autograd/tape.h"
#include "autograd/telemetry.h"
#include "autograd/variable.h"
#include "autograd/gradient_scaling.h"

#include "autograd/functions/batch_norm.h"
#include "autograd/functions/conv.h"
#include "autograd/functions/dropout.h"
#include "autograd/functions/elementwise.h"
#include "autograd/functions/embedding.h"
#include "autograd/functions/index.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/loss.h"
#include "autograd/functions/lstm.h"
#include "autograd/functions/pool.h"
#include "autograd/functions/reduce.h"
#include "autograd/functions/shape.h"
#include "autograd/functions/view.h"
