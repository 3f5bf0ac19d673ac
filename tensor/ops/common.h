// Helpers shared by the op front-ends: argument checks with messages that name the op, the
// shapes and the dtypes. The device switch they end in is on_device (tensor/core/device.h).
#pragma once

#include <initializer_list>

#include "tensor/tensor.h"

namespace mixtape::ops {

// All tensors defined, on one device, and (when same_dtype) of one dtype.
void check_same(const char* op, std::initializer_list<const Tensor*> ts, bool same_dtype = true);
void check_floating(const char* op, const Tensor& t);
void check_dim(const char* op, const Tensor& t, int64_t ndim, const char* what);

}  // namespace mixtape::ops
