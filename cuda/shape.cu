// Shape kernels: concat, the device twin of cpu::concat (tensor/cpu/shape.cpp).
#include "cuda/backend.h"
#include "cuda/common.cuh"

namespace mixtape::cuda {

// Each input is copied into its window of the output (out.narrow(dim, start, size)): same shape,
// the output's strides. Inputs may be any strided views; the copy is copy_cast's same-dtype path
// (a bit copy: one memcpy when both sides are contiguous, else the strided copy kernel), queued
// on the device's one stream in input order. Empty inputs launch nothing.
void concat(const std::vector<Strided>& xs, int64_t dim, const Strided& out) {
  DeviceGuard guard(out.device().index);
  int64_t start = 0;
  for (const Strided& x : xs) {
    const int64_t len = x.size(dim);
    const Strided window = out.narrow(dim, start, len);
    start += len;
    if (x.numel() == 0) continue;
    copy_cast(x, window, Rounding::nearest, 0, 0);
  }
}

}  // namespace mixtape::cuda
