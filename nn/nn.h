// Everything nn: Module, Sequential, layers, losses, initializers (namespace mixtape::nn).
#pragma once

#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/gru.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/lstm.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/pool.h"
#include "nn/precision.h"
#include "nn/sequential.h"
