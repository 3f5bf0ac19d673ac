#pragma once

#include "tensor/tensor.h"
