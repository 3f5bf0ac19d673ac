// Checks on the device whose result waits in the readout block (Note [Deferred device checks] in
// cuda/runtime.h): cross_entropy's targets and embedding's indices (in range), and
// binary_cross_entropy's probabilities (in [0, 1]), are validated by one small kernel each, and
// the host hears of a bad one at its next read of the block.
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

inline constexpr int kCheckBlock = 1024;

// One block of kCheckBlock threads (any n: each thread strides over the positions).
// slot[0] = the smallest row-major position p < n where bad(p, &value) holds, or -1;
// slot[1] = that value (0 when none). Both are written whatever the outcome: the slot is
// reused without being cleared.
template <class Bad>
__global__ void __launch_bounds__(kCheckBlock) first_bad_kernel(Bad bad, int64_t n, int64_t* slot) {
  __shared__ int64_t scratch[32];
  int64_t best = n, value = 0;
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x)
    if (p < best && bad(p, &value)) best = p;  // p grows: the first hit is this thread's minimum
  for (int s = 16; s > 0; s >>= 1) best = min(best, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)best, s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = lane < int(blockDim.x >> 5) ? scratch[lane] : n;
    for (int s = 16; s > 0; s >>= 1) best = min(best, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)best, s));
    if (lane == 0) {
      value = 0;
      if (best < n) bad(best, &value);
      slot[0] = best < n ? best : -1;
      slot[1] = value;
    }
  }
}

// An i64 index outside [0, limit) that is not `allowed` (when has_allowed); value: the index.
struct BadIndex {
  const int64_t* idx;
  OffsetCalculator<1> ic;
  int64_t limit;
  bool has_allowed;
  int64_t allowed;
  __device__ bool operator()(int64_t p, int64_t* value) const {
    int64_t o[1];
    ic.offsets(p, o);
    const int64_t k = idx[o[0]];
    *value = k;
    return (k < 0 || k >= limit) && !(has_allowed && k == allowed);
  }
};

// A value outside [lo, hi] (NaN is not outside); value: the bits of the double it widens to.
template <class T>
struct OutOfRange {
  const T* x;
  OffsetCalculator<1> ic;
  double lo, hi;
  __device__ bool operator()(int64_t p, int64_t* value) const {
    int64_t o[1];
    ic.offsets(p, o);
    const double v = double(load(x[o[0]]));
    *value = __double_as_longlong(v);
    return v < lo || v > hi;
  }
};

template <class Bad>
void launch_check(const Strided& t, Bad bad, CheckMessage message, const char* name) {
  DeviceGuard guard(t.device().index);
  int64_t* slot = defer_check(t.device().index, std::move(message));
  first_bad_kernel<<<1, kCheckBlock, 0, stream_of(t)>>>(bad, t.numel(), slot);
  MT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void defer_index_check(const Strided& indices, int64_t limit, CheckMessage message, bool has_allowed, int64_t allowed) {
  if (indices.numel() == 0) return;
  const BadIndex bad{static_cast<const int64_t*>(indices.raw_data()),
                     make_offset_calculator<1>(indices.shape(), {indices.strides()}), limit, has_allowed, allowed};
  launch_check(indices, bad, std::move(message), "first_bad_kernel (index)");
}

void defer_range_check(const Strided& values, double lo, double hi, CheckMessage message) {
  if (values.numel() == 0) return;
  dispatch_floating(values.dtype(), "range check", [&](auto tag) {
    using T = decltype(tag);
    const OutOfRange<T> bad{static_cast<const T*>(values.raw_data()),
                            make_offset_calculator<1>(values.shape(), {values.strides()}), lo, hi};
    launch_check(values, bad, std::move(message), "first_bad_kernel (range)");
  });
}

}  // namespace mixtape::cuda
