// Index checks on the device whose result waits in the readout block (Note [Deferred device
// checks] in cuda/runtime.h): cross_entropy's targets and embedding's indices are validated by
// one small kernel each, and the host hears of a bad one at its next read of the block.
#include "cuda/common.cuh"

namespace mixtape::cuda {

namespace {

inline constexpr int kCheckBlock = 1024;

// One block of kCheckBlock threads (any n: each thread strides over the positions).
// slot[0] = the smallest row-major position p < n whose index lies outside [0, limit) (and is not
// `allowed`, when has_allowed), or -1;
// slot[1] = the index there (0 when none). Both are written whatever the outcome: the slot is
// reused without being cleared.
__global__ void first_bad_index_kernel(const int64_t* __restrict__ idx, OffsetCalculator<1> ic, int64_t n,
                                       int64_t limit, bool has_allowed, int64_t allowed, int64_t* slot) {
  __shared__ int64_t scratch[32];
  int64_t best = n;
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x) {
    int64_t o[1];
    ic.offsets(p, o);
    const int64_t k = idx[o[0]];
    if ((k < 0 || k >= limit) && !(has_allowed && k == allowed) && p < best)
      best = p;  // p grows: the first hit is this thread's minimum
  }
  for (int s = 16; s > 0; s >>= 1) best = min(best, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)best, s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = lane < int(blockDim.x >> 5) ? scratch[lane] : n;
    for (int s = 16; s > 0; s >>= 1) best = min(best, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)best, s));
    if (lane == 0) {
      int64_t value = 0;
      if (best < n) {
        int64_t o[1];
        ic.offsets(best, o);
        value = idx[o[0]];
      }
      slot[0] = best < n ? best : -1;
      slot[1] = value;
    }
  }
}

}  // namespace

void defer_index_check(const Strided& indices, int64_t limit, CheckMessage message, bool has_allowed, int64_t allowed) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  DeviceGuard guard(indices.device().index);
  int64_t* slot = defer_check(indices.device().index, std::move(message));
  const OffsetCalculator<1> ic = make_offset_calculator<1>(indices.shape(), {indices.strides()});
  first_bad_index_kernel<<<1, kCheckBlock, 0, stream_of(indices)>>>(static_cast<const int64_t*>(indices.raw_data()), ic,
                                                                    n, limit, has_allowed, allowed, slot);
  MT_CUDA_CHECK_LAUNCH("first_bad_index_kernel");
}

}  // namespace mixtape::cuda
