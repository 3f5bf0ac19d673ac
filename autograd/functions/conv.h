#pragma once

#include "autograd/variable.h"
