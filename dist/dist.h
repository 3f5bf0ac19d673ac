// Data-parallel training across processes (docs/data-parallel.md).
#pragma once

#include "dist/communicator.h"
#include "dist/data_parallel.h"
