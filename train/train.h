// The training loop and what runs around it: staging data on the device, metrics, progress,
// checkpoints.
#pragma once

#include "train/checkpoint.h"
#include "train/loop.h"
#include "train/metrics.h"
#include "train/staging.h"
